"""Volumes, claims and mounts as a member's kube-apiserver admits them: a submission that no
site could run is refused here, with the field's path, rather than failing at the site.

Kubernetes (pkg/apis/core/validation/validation.go): a volume's name is a DNS-1123 label
(``ValidateVolumes``); a claim's name is a DNS-1123 subdomain
(``ValidatePersistentVolumeName``; Argo creates ``<workflow>-<name>`` for each
``volumeClaimTemplates`` entry); a mount's ``subPath`` and ``subPathExpr`` must be relative
and must not contain ``..`` (``validateLocalDescendingPath``). A value with an Argo variable
is checked where it is known: at the site, after substitution.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from placement.parser.errors import FieldError
from placement.parser.names import DNS1123_LABEL, DNS1123_SUBDOMAIN

# Parts of a document that hold data, not pod specs: never read as volumes or mounts.
_DATA_KEYS = frozenset({"arguments", "inputs", "outputs", "withItems", "withParam", "metadata"})


def _templated(value: str) -> bool:
    return "{{" in value


def _name_problem(value: Any, *, subdomain: bool) -> str | None:
    if not isinstance(value, str) or not value:
        return "a name is required"
    if _templated(value):
        return None
    if subdomain:
        if len(value) > 253 or not DNS1123_SUBDOMAIN.match(value):
            return (
                f"{json.dumps(value)}: a lowercase RFC 1123 subdomain must consist of lower "
                "case alphanumeric characters, '-' or '.', and must start and end with an "
                "alphanumeric character"
            )
        return None
    if len(value) > 63 or not DNS1123_LABEL.match(value):
        return (
            f"{json.dumps(value)}: a lowercase RFC 1123 label must consist of lower case "
            "alphanumeric characters or '-', and must start and end with an alphanumeric "
            "character"
        )
    return None


def sub_path_problem(value: Any) -> str | None:
    """validateLocalDescendingPath's answer for a ``subPath`` (None when it is fine)."""
    if not isinstance(value, str):
        return None
    if value.startswith("/"):
        return f"{json.dumps(value)}: must be a relative path"
    if ".." in value.replace("\\", "/").split("/"):
        return f"{json.dumps(value)}: must not contain '..'"
    return None


def _mounts(mounts: list[Any], path: str) -> list[FieldError]:
    out = []
    for j, m in enumerate(mounts):
        if not isinstance(m, Mapping):
            continue
        for key in ("subPath", "subPathExpr"):
            problem = sub_path_problem(m.get(key))
            if problem:
                out.append(FieldError(f"{path}[{j}].{key}", problem))
    return out


def _volumes(volumes: list[Any], path: str) -> list[FieldError]:
    out = []
    for i, v in enumerate(volumes):
        if not isinstance(v, Mapping):
            continue
        problem = _name_problem(v.get("name"), subdomain=False)
        if problem:
            out.append(FieldError(f"{path}[{i}].name", problem))
        claim = v.get("persistentVolumeClaim")
        if isinstance(claim, Mapping) and "claimName" in claim:
            problem = _name_problem(claim.get("claimName"), subdomain=True)
            if problem:
                out.append(FieldError(f"{path}[{i}].persistentVolumeClaim.claimName", problem))
    return out


def _walk(node: Any, path: str, out: list[FieldError]) -> None:
    if isinstance(node, list):
        for i, item in enumerate(node):
            _walk(item, f"{path}[{i}]", out)
        return
    if not isinstance(node, Mapping):
        return
    for key, value in node.items():
        if not isinstance(key, str) or key in _DATA_KEYS:
            continue
        at = f"{path}.{key}" if path else key
        if key == "volumeMounts" and isinstance(value, list):
            out += _mounts(value, at)
        elif key == "volumes" and isinstance(value, list):
            out += _volumes(value, at)
        elif key == "volumeClaimTemplates" and isinstance(value, list):
            for i, c in enumerate(value):
                meta = c.get("metadata") if isinstance(c, Mapping) else None
                name = meta.get("name") if isinstance(meta, Mapping) else None
                problem = _name_problem(name, subdomain=True)
                if problem:
                    out.append(FieldError(f"{at}[{i}].metadata.name", problem))
        else:
            _walk(value, at, out)


def volume_errors(spec: Any, path: str = "spec") -> list[FieldError]:
    """Every volume, claim and mount problem in a Workflow's or WorkflowTemplate's spec:
    its own volumes and claim templates, and every template's (inline ones included)."""
    out: list[FieldError] = []
    _walk(spec, path, out)
    return out
