"""A request path as kube-apiserver's request info resolver reads it
(`k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`): the resource type, the namespace,
the object's name and the subresource."""

from __future__ import annotations

from typing import NamedTuple

from sandbox.resources import Registry, ResourceType


class Route(NamedTuple):
    rtype: ResourceType
    namespace: str | None
    name: str | None
    sub: str | None


def route(registry: Registry, path: str) -> Route | None:
    """The route of a resource path, None when no resource (or subresource) serves it."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api" and parts[1] == "v1":
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if not rest:
        return None
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        candidate = registry.lookup(group, version, rest[2])
        if candidate is not None and candidate.namespaced:
            namespace, rest = rest[1], rest[2:]
    rtype = registry.lookup(group, version, rest[0])
    if rtype is None or len(rest) > 3:
        return None
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if sub is not None and (sub != "status" or not rtype.status_subresource):
        return None
    if not rtype.namespaced:
        namespace = None
    return Route(rtype, namespace, name, sub)
