"""OverridePolicies and ClusterOverridePolicies applied to the copy sent to a member
(`pkg/util/overridemanager/overridemanager.go`, `imageoverride.go`, `labelannotationoverrider.go`).
The image overrider without `predicate` rewrites every `container.image` / `script.image` of a
Workflow's templates (upstream knows Pod paths only; see README)."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from sandbox import patch as patchlib
from sandbox.errors import ApiError
from sandbox.karmada.policy import policy_precision
from sandbox.karmada.scheduling import affinity_matches
from sandbox.store import Obj

log = logging.getLogger("sandbox.karmada")
APPLIED_OVERRIDES = "policy.karmada.io/applied-overrides"
APPLIED_CLUSTER_OVERRIDES = "policy.karmada.io/applied-cluster-overrides"


_IMAGE_RE = re.compile(
    r"^(?:(?P<registry>[^/]+\.[^/]+|[^/]+:\d+|localhost)/)?"
    r"(?P<repository>[^:@]+)(?::(?P<tag>[^@]+))?(?P<digest>@.+)?$"
)


def override_image(image: str, overrider: dict[str, Any]) -> str:
    m = _IMAGE_RE.match(image)
    if not m:
        return image
    parts = {k: m.group(k) or "" for k in ("registry", "repository", "tag")}
    digest = m.group("digest") or ""
    component = str(overrider.get("component", "")).lower()
    op = overrider.get("operator", "replace")
    value = str(overrider.get("value", ""))
    if component in parts:
        if op == "replace":
            parts[component] = value
        elif op == "add":
            parts[component] = parts[component] + value
        elif op == "remove":
            parts[component] = ""
    out = parts["repository"]
    if parts["registry"]:
        out = f"{parts['registry']}/{out}"
    if parts["tag"]:
        out = f"{out}:{parts['tag']}"
    return out + digest


def apply_overriders(obj: Obj, overriders: dict[str, Any]) -> Obj:
    for op in overriders.get("plaintext") or []:
        kind = op.get("operator", "replace")
        patched = patchlib.json_patch(
            obj, [{"op": kind, "path": op["path"], "value": op.get("value")}]
        )
        obj = patched if isinstance(patched, dict) else obj
    for io in overriders.get("imageOverrider") or []:
        pred = (io.get("predicate") or {}).get("path")
        paths = (
            [pred]
            if pred
            else [
                f"/spec/templates/{i}/{kind}/image"
                for i, t in enumerate((obj.get("spec") or {}).get("templates") or [])
                for kind in ("container", "script")
                if isinstance(t.get(kind), dict) and t[kind].get("image")
            ]
        )
        for path in paths:
            try:
                image = patchlib.get_pointer(obj, path)
            except ApiError:
                continue
            if isinstance(image, str):
                patched = patchlib.json_patch(
                    obj, [{"op": "replace", "path": path, "value": override_image(image, io)}]
                )
                obj = patched if isinstance(patched, dict) else obj
    for field_name, key in (("labelsOverrider", "labels"), ("annotationsOverrider", "annotations")):
        for lo in overriders.get(field_name) or []:
            target = obj["metadata"].setdefault(key, {})
            for k, v in (lo.get("value") or {}).items():
                if lo.get("operator") == "remove":
                    target.pop(k, None)
                else:
                    target[k] = v
    return obj


def _rules(policy: Obj) -> list[dict[str, Any]]:
    spec = policy.get("spec") or {}
    rules = list(spec.get("overrideRules") or [])
    if spec.get("overriders"):
        rules.append({"targetCluster": spec.get("targetCluster"), "overriders": spec["overriders"]})
    return rules


def apply_override_policies(
    obj: Obj, template: Obj, cluster: Obj, cluster_policies: list[Obj], policies: list[Obj]
) -> Obj:
    """The copy for one cluster: ClusterOverridePolicies first, then the namespace's
    OverridePolicies, each in name order, as `overridemanager.ApplyOverridePolicies` does; the
    names go into the applied-(cluster-)overrides annotations."""
    for key, group in (
        (APPLIED_CLUSTER_OVERRIDES, sorted(cluster_policies, key=lambda p: p["metadata"]["name"])),
        (APPLIED_OVERRIDES, sorted(policies, key=lambda p: p["metadata"]["name"])),
    ):
        applied = []
        for policy in group:
            spec = policy.get("spec") or {}
            if spec.get("resourceSelectors") and policy_precision(policy, template) < 0:
                continue
            for rule in _rules(policy):
                if not affinity_matches(rule.get("targetCluster"), cluster):
                    continue
                try:
                    obj = apply_overriders(obj, rule.get("overriders") or {})
                except ApiError as exc:
                    log.warning("override %s failed: %s", policy["metadata"]["name"], exc.message)
                    continue
                applied.append(policy["metadata"]["name"])
        if applied:
            obj["metadata"].setdefault("annotations", {})[key] = json.dumps(
                [{"policyName": n} for n in applied]
            )
    return obj
