"""What a request asks for, as kube-apiserver reads it, and the 401 and 403 it answers.

``request_attributes`` copies ``RequestInfoFactory.NewRequestInfo``
(``staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go``): fewer than three path
parts, or a prefix other than ``/api`` and ``/apis``, is a non-resource request whose verb is
the lower-cased method; otherwise the verb comes from the method (``POST`` create, ``GET``
get, ``PUT`` update, ``PATCH`` patch, ``DELETE`` delete), a ``get`` without a name is a
``list`` or, with ``watch``, a ``watch`` (a ``fieldSelector`` on ``metadata.name`` names the
object), a ``delete`` without a name a ``deletecollection``; the third part after the
resource is its subresource (so the cluster proxy is ``clusters/proxy`` named by the
cluster, whatever follows).

``forbidden`` copies ``forbiddenMessage`` and ``Forbidden`` of
``staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go`` and
``NewForbidden`` of ``staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go``.
"""

from __future__ import annotations

from collections.abc import Mapping

from sandbox.authz.rbac import Attributes, User
from sandbox.errors import ApiError

_METHOD_VERBS = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}
# Namespace subresources (``namespaceSubresources``): /namespaces/{ns}/status is the
# namespace's own status, not a resource named "status" in it.
_NAMESPACE_SUBRESOURCES = ("status", "finalize")
_TRUE = ("1", "t", "T", "true", "TRUE", "True")


def request_attributes(user: User, method: str, path: str, query: Mapping[str, str]) -> Attributes:
    parts = [p for p in path.strip("/").split("/") if p]
    non_resource = Attributes(user, method.lower(), resource_request=False, path=path)
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return non_resource
    rest = parts[1:]
    group = ""
    if parts[0] == "apis":
        if len(rest) < 3:
            return non_resource
        group, rest = rest[0], rest[1:]
    version, rest = rest[0], rest[1:]
    verb = _METHOD_VERBS.get(method.upper(), "")
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) >= 2 else ""
    subresource = rest[2] if len(rest) >= 3 else ""
    if not name and verb == "get":
        verb = "watch" if query.get("watch") in _TRUE else "list"
        name = _name_from_field_selector(query.get("fieldSelector") or "")
    if not name and verb == "delete":
        verb = "deletecollection"
    return Attributes(
        user,
        verb,
        group=group,
        version=version,
        resource=resource,
        subresource=subresource,
        name=name,
        namespace=namespace,
        path=path,
    )


def _name_from_field_selector(selector: str) -> str:
    for term in selector.split(","):
        key, sep, value = term.partition("==") if "==" in term else term.partition("=")
        if sep and key.strip() == "metadata.name" and "/" not in value:
            return value.strip()
    return ""


def unauthorized() -> ApiError:
    """A request whose credentials do not authenticate (an unknown token)."""
    return ApiError(401, "Unauthorized", "Unauthorized")


def forbidden_message(attrs: Attributes) -> str:
    who = attrs.user.name
    if not attrs.resource_request:
        return f'User "{who}" cannot {attrs.verb} path "{attrs.path}"'
    resource = attrs.resource
    if attrs.subresource:
        resource = f"{resource}/{attrs.subresource}"
    head = f'User "{who}" cannot {attrs.verb} resource "{resource}" in API group "{attrs.group}"'
    if attrs.namespace:
        return f'{head} in the namespace "{attrs.namespace}"'
    return f"{head} at the cluster scope"


def forbidden(attrs: Attributes) -> ApiError:
    message = forbidden_message(attrs)
    qualified = attrs.resource
    if attrs.group and qualified:
        qualified = f"{qualified}.{attrs.group}"
    if not qualified:
        text = f"forbidden: {message}"
    elif not attrs.name:
        text = f"{qualified} is forbidden: {message}"
    else:
        text = f'{qualified} "{attrs.name}" is forbidden: {message}'
    details = {"name": attrs.name, "group": attrs.group, "kind": attrs.resource}
    return ApiError(403, "Forbidden", text, {k: v for k, v in details.items() if v})
