"""The scheduler for a non-replica workload such as an Argo Workflow (`pkg/scheduler/core/`,
`pkg/scheduler/framework/plugins/`): filter clusters by cluster affinity (`clusteraffinity`),
taints and tolerations (`tainttoleration`) and API enablement (`apienablement`); never by free
resources. A Workflow gets one replica (Karmada's third-party interpreter for Workflow,
`pkg/resourceinterpreter/default/thirdparty/resourcecustomizations/argoproj.io/v1alpha1/Workflow/customizations.yaml`)
and no resource request, and `Duplicated` assignment (`pkg/scheduler/core/assignment.go`)
never estimates capacity: a full member gets the Workflow and its pods queue there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandbox.selectors import match_field_selector, match_label_selector
from sandbox.store import Obj, labels_of

NO_SCHEDULE_EFFECTS = ("NoSchedule", "NoExecute")


def cluster_fields(cluster: Obj) -> dict[str, str]:
    """extractClusterFields (pkg/util/selector.go): provider and region, when set. `zone`
    is matched against `spec.zones` apart (``zones_match``)."""
    spec = cluster.get("spec") or {}
    return {k: str(spec[k]) for k in ("provider", "region") if spec.get(k)}


def zones_match(expr: dict[str, Any], zones: list[str]) -> bool:
    """matchZones (pkg/util/selector.go): a `zone` requirement against the Cluster's
    `spec.zones` (the deprecated `spec.zone` is never read); unknown operators never match."""
    op, values = expr.get("operator", ""), expr.get("values") or []
    if op == "In":
        return any(z in values for z in zones)
    if op == "NotIn":
        return not any(z in values for z in zones)
    if op == "Exists":
        return bool(zones)
    if op == "DoesNotExist":
        return not zones
    return False


def affinity_matches(aff: dict[str, Any] | None, cluster: Obj) -> bool:
    if not aff:
        return True
    name = cluster["metadata"]["name"]
    if name in (aff.get("exclude") or []):
        return False
    if aff.get("clusterNames") and name not in aff["clusterNames"]:
        return False
    if aff.get("labelSelector") is not None and not match_label_selector(
        aff["labelSelector"], labels_of(cluster)
    ):
        return False
    selector = aff.get("fieldSelector") or {}
    expressions = selector.get("matchExpressions") or []
    zones = [str(z) for z in (cluster.get("spec") or {}).get("zones") or []]
    if not all(zones_match(e, zones) for e in expressions if e.get("key") == "zone"):
        return False
    others = {"matchExpressions": [e for e in expressions if e.get("key") != "zone"]}
    return match_field_selector(others, cluster_fields(cluster))


def cluster_ready(cluster: Obj) -> bool:
    for cond in (cluster.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def untolerated(cluster: Obj, tolerations: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first NoSchedule/NoExecute taint no toleration tolerates (`tainttoleration`)."""
    for taint in (cluster.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in NO_SCHEDULE_EFFECTS:
            continue
        if not any(_tolerates(tol, taint) for tol in tolerations):
            return dict(taint)
    return None


def _tolerates(tol: dict[str, Any], taint: dict[str, Any]) -> bool:
    if tol.get("effect") and tol["effect"] != taint.get("effect"):
        return False
    if tol.get("operator") == "Exists":
        return not tol.get("key") or tol["key"] == taint.get("key")
    return bool(
        tol.get("key") == taint.get("key") and tol.get("value", "") == taint.get("value", "")
    )


def tolerated(cluster: Obj, tolerations: list[dict[str, Any]]) -> bool:
    return untolerated(cluster, tolerations) is None


def taint_string(taint: dict[str, Any]) -> str:
    """corev1.Taint.ToString: `key=value:effect`, or `key:effect` without a value."""
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint.get('key', '')}{value}:{taint.get('effect', '')}"


def api_enabled(cluster: Obj, group_version: str, kind: str) -> bool:
    """The `APIEnablement` filter: a cluster whose status does not list the kind cannot take
    it. A cluster with no status yet lists nothing."""
    for entry in (cluster.get("status") or {}).get("apiEnablements") or []:
        if entry.get("groupVersion") == group_version and any(
            r.get("kind") == kind for r in entry.get("resources") or []
        ):
            return True
    return False


@dataclass
class Candidate:
    name: str
    score: int
    free_pods: float


def _filter(
    cluster: Obj,
    aff: dict[str, Any] | None,
    tolerations: list[dict[str, Any]],
    gvk: tuple[str, str],
) -> str | None:
    """Why the cluster is filtered out, in the scheduler's words; None when it fits."""
    if not affinity_matches(aff, cluster):
        return "cluster(s) did not match the placement cluster affinity constraint"
    taint = untolerated(cluster, tolerations)
    if taint is not None:
        return f"cluster(s) had untolerated taint {{{taint_string(taint)}}}"
    if not api_enabled(cluster, *gvk):
        return "cluster(s) did not have the API resource"
    return None


def _spread_limit(placement: dict[str, Any]) -> int | None:
    """How many clusters the spread constraints allow (None: no limit)."""
    limit: int | None = None
    for sc in placement.get("spreadConstraints") or []:
        if sc.get("maxGroups"):
            limit = int(sc["maxGroups"]) if limit is None else min(limit, int(sc["maxGroups"]))
    return limit


def schedule(
    clusters: list[Obj],
    placement: dict[str, Any],
    gvk: tuple[str, str],
    current: list[str],
    free_pods: dict[str, float],
) -> tuple[list[str], str]:
    """Target clusters for a binding, or ([], why). Affinity groups (`clusterAffinities`) are
    tried in order; clusters the binding already has score higher (`clusterlocality`), then
    more free pods, then name. Without spread constraints every feasible cluster gets a copy
    (Duplicated); `Divided` gets the best one (its single replica)."""
    clusters = sorted(clusters, key=lambda c: c["metadata"]["name"])
    tolerations = placement.get("clusterTolerations") or []
    groups = placement.get("clusterAffinities") or [placement.get("clusterAffinity")]
    reasons: dict[str, str] = {}
    for aff in groups:
        feasible = []
        for c in clusters:
            name = c["metadata"]["name"]
            why = _filter(c, aff, tolerations, gvk)
            if why is None:
                feasible.append(
                    Candidate(name, 100 if name in current else 0, free_pods.get(name, 0.0))
                )
            elif name not in reasons or "affinity" in reasons[name]:
                reasons[name] = why
        if not feasible:
            continue
        feasible.sort(key=lambda f: (-f.score, -f.free_pods, f.name))
        limit = _spread_limit(placement)
        rs = placement.get("replicaScheduling") or {}
        if rs.get("replicaSchedulingType", "Duplicated") == "Divided":
            limit = 1
        min_groups = max(
            [int(sc.get("minGroups") or 1) for sc in placement.get("spreadConstraints") or []]
            or [0]
        )
        if len(feasible) < min_groups:
            reasons = {
                f.name: "the number of feasible clusters is less than minGroups" for f in feasible
            }
            continue
        return [f.name for f in feasible[:limit]], ""
    counts: dict[str, int] = {}
    for r in reasons.values():
        counts[r] = counts.get(r, 0) + 1
    # FitError.Error (`pkg/scheduler/framework/types.go`): "<n> <reason>" strings, sorted.
    detail = ", ".join(sorted(f"{n} {r}" for r, n in counts.items()))
    return [], f"0/{len(clusters)} clusters are available: {detail}."
