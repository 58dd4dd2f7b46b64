"""What Karmada's Workflow controllers share: a Work's name and the Workflows it holds, and
status conditions as apimachinery's `meta.SetStatusCondition` sets them."""

from __future__ import annotations

from typing import Any

from sandbox.argo.expr import fnv32a
from sandbox.store import Obj, now_iso

Key = tuple[str, str]


def work_name(namespace: str, name: str) -> str:
    """names.GenerateWorkName (`pkg/util/names/names.go`): the name and a hash."""
    return f"{name}-{fnv32a(f'{namespace}-{name}-workflow'.lower())}"


def condition(status: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == ctype), None)


def set_condition(status: dict[str, Any], cond: dict[str, Any]) -> bool:
    """meta.SetStatusCondition: False when nothing changed."""
    prev = condition(status, cond["type"])
    if prev is not None and all(prev.get(k) == v for k, v in cond.items()):
        return False
    same = prev is not None and prev.get("status") == cond["status"]
    cond["lastTransitionTime"] = prev["lastTransitionTime"] if same and prev else now_iso()
    status["conditions"] = [
        c for c in status.get("conditions") or [] if c.get("type") != cond["type"]
    ] + [cond]
    return True


def key_of(obj: Obj) -> Key:
    return (obj["metadata"]["namespace"], obj["metadata"]["name"])


def work_keys(work: Obj) -> list[Key]:
    out = []
    for m in ((work.get("spec") or {}).get("workload") or {}).get("manifests") or []:
        mm = m.get("metadata") or {}
        out.append((mm.get("namespace", ""), mm.get("name", "")))
    return out
