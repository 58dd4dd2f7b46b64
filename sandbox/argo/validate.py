"""What Argo's controller refuses in a Workflow before it runs anything: variables no scope
can give a value (workflow/validate/validate.go), and claim templates the API server would
refuse."""

from __future__ import annotations

import json
import re
from typing import Any

_TAG = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
_PREFIXES = ("item", "steps.", "inputs.", "outputs.", "pod.", "workflow.", "tasks.")


def unresolved(wf: dict[str, Any]) -> str | None:
    """`templates.<t>: failed to resolve {{tag}}` for the first variable no scope could give
    a value: undeclared inputs, workflow parameters that are not arguments, steps and tasks
    that do not exist. Tags of other prefixes are left alone, as Argo does."""
    spec = wf.get("spec") or {}
    wf_params = {p.get("name") for p in (spec.get("arguments") or {}).get("parameters") or []}
    for tmpl in spec.get("templates") or []:
        inputs = tmpl.get("inputs") or {}
        params = {p.get("name") for p in inputs.get("parameters") or []}
        arts = {a.get("name") for a in inputs.get("artifacts") or []}
        groups = [g if isinstance(g, list) else [g] for g in tmpl.get("steps") or []]
        names = {s.get("name") for g in groups for s in g}
        names |= {t.get("name") for t in (tmpl.get("dag") or {}).get("tasks") or []}
        text = json.dumps({k: v for k, v in tmpl.items() if k != "outputs"})
        for tag in _TAG.findall(text):
            if tag.startswith("=") or not tag.startswith(_PREFIXES):
                continue
            parts = tag.split(".")
            bad = False
            if parts[0] == "inputs" and len(parts) >= 3:
                bad = (parts[1] == "parameters" and parts[2] not in params) or (
                    parts[1] == "artifacts" and parts[2] not in arts
                )
            elif parts[:2] == ["workflow", "parameters"] and len(parts) >= 3:
                bad = ".".join(parts[2:]) not in wf_params | {"json"}
            elif parts[0] in ("steps", "tasks") and len(parts) >= 2:
                bad = parts[1] not in names and parts[1] != "name"
            if bad:
                return f"templates.{tmpl.get('name')}: failed to resolve {{{{{tag}}}}}"
    return None


# pkg/apis/core/validation/validation.go ValidatePersistentVolumeClaimSpec
ACCESS_MODES = ("ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod")


def invalid_claim(wf: dict[str, Any]) -> str | None:
    """The API server's refusal of the first volumeClaimTemplate it would refuse for its access
    modes (the claim is named `<workflow>-<claim>`, createPVCs in operator.go)."""
    for c in (wf.get("spec") or {}).get("volumeClaimTemplates") or []:
        name = f"{wf['metadata'].get('name', '')}-{(c.get('metadata') or {}).get('name', '')}"
        modes = (c.get("spec") or {}).get("accessModes") or []
        if not modes:
            return (
                f'PersistentVolumeClaim "{name}" is invalid: spec.accessModes: Required value: '
                "at least 1 access mode is required"
            )
        for mode in modes:
            if mode not in ACCESS_MODES:
                supported = ", ".join(f'"{m}"' for m in ACCESS_MODES)
                return (
                    f'PersistentVolumeClaim "{name}" is invalid: spec.accessModes: Unsupported '
                    f'value: "{mode}": supported values: {supported}'
                )
    return None
