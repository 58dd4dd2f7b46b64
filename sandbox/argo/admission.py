"""What a member's kube-apiserver refuses in the objects Argo's controller creates for a
Workflow: its PersistentVolumeClaims (from `volumeClaimTemplates`) and its pods' volumes and
volume mounts. Messages as Kubernetes words them (pkg/apis/core/validation/validation.go and
k8s.io/apimachinery/pkg/util/validation/validation.go)."""

from __future__ import annotations

import json
import re
from typing import Any

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# validation.go: dns1123LabelErrMsg / dns1123SubdomainErrorMsg, through RegexError.
LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def invalid(field: str, value: Any, detail: str) -> str:
    """field.Invalid's text: `<field>: Invalid value: "<value>": <detail>`."""
    return f"{field}: Invalid value: {json.dumps(value)}: {detail}"


def subdomain_errors(field: str, name: str) -> list[str]:
    """IsDNS1123Subdomain (ValidatePersistentVolumeName is NameIsDNSSubdomain)."""
    out = []
    if len(name) > 253:
        out.append(invalid(field, name, "must be no more than 253 characters"))
    if not DNS1123_SUBDOMAIN.match(name):
        out.append(invalid(field, name, SUBDOMAIN_MESSAGE))
    return out


def local_descending_path_errors(field: str, path: str) -> list[str]:
    """validateLocalDescendingPath: "must be a relative path", then validatePathNoBacksteps:
    "must not contain '..'" (one error even for `../../..`)."""
    out = []
    if path.startswith("/"):
        out.append(invalid(field, path, "must be a relative path"))
    if ".." in path.split("/"):
        out.append(invalid(field, path, "must not contain '..'"))
    return out


def refused(kind: str, name: str, errors: list[str]) -> str | None:
    """A StatusError's message for an Invalid object (apimachinery errors.NewInvalid):
    `<Kind> "<name>" is invalid: <error>`, or `[<e1>, <e2>]` for several."""
    if not errors:
        return None
    body = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    return f'{kind} "{name}" is invalid: {body}'


def claim_template_refusal(workflow: str, templates: list[Any]) -> str | None:
    """Argo creates one claim per `volumeClaimTemplates` entry, named `<workflow>-<name>`
    (createPVCs, workflow/controller/operator.go), and marks the Workflow Error with
    "pvc create error: ..." when the API server refuses it."""
    for c in templates:
        meta = (c.get("metadata") if isinstance(c, dict) else None) or {}
        name = str(meta.get("name") or "")
        pvc = f"{workflow}-{name}"
        errors = subdomain_errors("metadata.name", pvc)
        if errors:
            return f"pvc create error: {refused('PersistentVolumeClaim', pvc, errors)}"
    return None


def pod_refusal(pod: str, declared: set[str], containers: list[dict[str, Any]]) -> str | None:
    """The pod Argo would create for these containers: a mount must name a volume of the
    Workflow or the template (addVolumeReferences, workflow/controller/workflowpod.go: "volume
    '%s' not found in workflow spec"); then kube-apiserver's ValidateVolumes (a volume's name
    is a DNS-1123 label) and ValidateVolumeMounts (`subPath` and `subPathExpr` are relative and
    never go up). Argo's pod has its `wait` container first, so the template's containers are
    `spec.containers[1]` on."""
    mounts = [
        (c, j, vm)
        for c, container in enumerate(containers, start=1)
        for j, vm in enumerate(container.get("volumeMounts") or [])
        if isinstance(vm, dict)
    ]
    used: list[str] = []
    for _c, _j, vm in mounts:
        name = str(vm.get("name") or "")
        if name not in declared:
            return f"volume '{name}' not found in workflow spec"
        if name not in used:
            used.append(name)
    errors: list[str] = []
    for i, v in enumerate(used):
        if not DNS1123_LABEL.match(v) or len(v) > 63:
            errors.append(invalid(f"spec.volumes[{i}].name", v, LABEL_MESSAGE))
    for c, j, vm in mounts:
        for key in ("subPath", "subPathExpr"):
            if vm.get(key):
                at = f"spec.containers[{c}].volumeMounts[{j}].{key}"
                errors += local_descending_path_errors(at, str(vm[key]))
    return refused("Pod", pod, errors)
