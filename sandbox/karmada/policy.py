"""Which (Cluster)PropagationPolicy claims a resource template (`pkg/detector/policy.go`,
`pkg/util/selector.go`): explicit priority first, then how precisely a resource selector
matches (name 3, labelSelector 2, apiVersion/kind 1), then name; a namespaced policy before any
cluster-scoped one."""

from __future__ import annotations

from typing import Any

from sandbox.selectors import match_label_selector
from sandbox.store import Obj, labels_of


def _selector_precision(sel: dict[str, Any], obj: Obj, api_version: str, kind: str) -> int:
    """How precisely one resourceSelector matches obj: -1 no match, then Karmada's order:
    name match 3, labelSelector match 2, apiVersion/kind only 1."""
    meta = obj["metadata"]
    if sel.get("apiVersion") != api_version or sel.get("kind") != kind:
        return -1
    if sel.get("namespace") and sel["namespace"] != meta.get("namespace"):
        return -1
    if sel.get("name"):
        return 3 if sel["name"] == meta["name"] else -1
    if sel.get("labelSelector") is not None:
        return 2 if match_label_selector(sel["labelSelector"], labels_of(obj)) else -1
    return 1


def policy_precision(policy: Obj, obj: Obj) -> int:
    best = -1
    for sel in (policy.get("spec") or {}).get("resourceSelectors") or []:
        best = max(best, _selector_precision(sel, obj, obj["apiVersion"], obj["kind"]))
    return best


def choose_policy(store_pps: list[Obj], store_cpps: list[Obj], obj: Obj) -> Obj | None:
    def pick(policies: list[Obj]) -> Obj | None:
        ranked = []
        for p in policies:
            if p["metadata"].get("deletionTimestamp"):
                continue
            prec = policy_precision(p, obj)
            if prec >= 0:
                prio = int((p.get("spec") or {}).get("priority") or 0)
                ranked.append((-prio, -prec, p["metadata"]["name"], p))
        ranked.sort(key=lambda r: r[:3])
        return ranked[0][3] if ranked else None

    ns = obj["metadata"].get("namespace")
    return pick([p for p in store_pps if p["metadata"].get("namespace") == ns]) or pick(store_cpps)
