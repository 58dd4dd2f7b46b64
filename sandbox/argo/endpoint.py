"""`/_sandbox/members/{site}/...`: a member cluster's own API for tests and demos.

* `POST workflows` creates a Workflow on the member directly (no Karmada), `GET workflows`
  lists the member's Workflows with live status;
* `POST objects` stores a Secret, ConfigMap or PersistentVolumeClaim in the member (what a
  step's env, parameters, volumes and cross-site artifact credentials read; a pod whose claim
  is absent stays Pending);
  `GET objects` lists those it holds (put there this way or propagated by Karmada);
* `GET pods/{namespace}/{pod}/log[?container=&tailLines=]` a pod's log, as the kubelet's.
"""

from __future__ import annotations

import uuid
from typing import Any

from sandbox.argo import admission
from sandbox.argo.member import ClusterHost
from sandbox.errors import ApiError
from sandbox.store import now_iso

# Objects a test or an operator may put into a member (what its steps read or mount, and the
# RBAC its API server evaluates for calls through Karmada's cluster proxy).
MEMBER_OBJECTS = (
    "Secret",
    "ConfigMap",
    "PersistentVolumeClaim",
    "Role",
    "RoleBinding",
    "ClusterRole",
    "ClusterRoleBinding",
)


def member_endpoint(
    sb: ClusterHost, method: str, parts: list[str], body: Any, query: dict[str, str]
) -> tuple[int, Any]:
    """(status, JSON body or text) for `parts` = [site, ...]."""
    member = sb.members.get(parts[0])
    if member is None:
        raise ApiError(404, "NotFound", f"no member cluster {parts[0]}")
    rest = parts[1:]
    if rest == ["workflows"] and method == "POST":
        if not isinstance(body, dict) or not (body.get("metadata") or {}).get("name"):
            raise ApiError.bad_request("a Workflow with metadata.name")
        meta = body.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        _check_names(meta)
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now_iso())
        body.setdefault("apiVersion", "argoproj.io/v1alpha1")
        body.setdefault("kind", "Workflow")
        member.apply_direct(body)
        return 201, body
    if rest == ["workflows"] and method == "GET":
        return 200, {"items": member.workflow_objects()}
    if rest == ["objects"] and method == "POST":
        if not isinstance(body, dict) or body.get("kind") not in MEMBER_OBJECTS:
            raise ApiError.bad_request(
                "a Secret, a ConfigMap, a PersistentVolumeClaim or an RBAC object"
            )
        _check_names(body.get("metadata") or {})
        member.put_object(body)
        return 201, body
    if rest == ["objects"] and method == "GET":
        return 200, {"items": [member.objects[k] for k in sorted(member.objects)]}
    if len(rest) == 4 and rest[0] == "pods" and rest[3] == "log" and method == "GET":
        tail = query.get("tailLines")
        text = member.pod_log(rest[1], rest[2], query.get("container"), int(tail) if tail else None)
        if text is None:
            raise ApiError(404, "NotFound", f'pods "{rest[2]}" not found')
        return 200, text
    raise ApiError(404, "NotFound", f"no member endpoint {method} {'/'.join(parts)}")


def _check_names(meta: dict[str, Any]) -> None:
    """The names a member's kube-apiserver admits (a namespace is a DNS-1123 label, an
    object's name a subdomain): the executor makes folders of them."""
    name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "default")
    errors = admission.subdomain_errors("metadata.name", name)
    if not admission.DNS1123_LABEL.match(namespace):
        errors.append(admission.invalid("metadata.namespace", namespace, admission.LABEL_MESSAGE))
    if errors:
        raise ApiError.bad_request("; ".join(errors))
