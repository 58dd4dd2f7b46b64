"""Cluster objects as Karmada keeps them: status collected from each member, and the taints
the cluster controller derives from the Ready condition.

* Status (`pkg/controllers/status/cluster_status_controller.go`): for push-mode clusters
  karmada-controller-manager collects it; for pull-mode clusters karmada-agent posts it. Ready is
  `ClusterReady` / `ClusterNotReady` (health endpoint not ok) / `ClusterNotReachable`;
  `resourceSummary` sums over nodes `allocatable`, `allocated` (scheduled pods' requests) and
  `allocating` (pods not yet scheduled). An offline or unhealthy cluster gets only its Ready
  condition updated.
* Unknown (`pkg/controllers/cluster/cluster_controller.go`, `monitorClusterHealth`): when no
  status was posted for the grace period (40 s upstream, divided by `--time-scale` here), Ready
  becomes Unknown, `ClusterStatusUnknown`. With the sandbox's `site-unreachable` fault this is
  what a pull-mode cluster shows; a push-mode one is probed by the control plane and shows
  `ClusterNotReachable`.
* Taints (`taintClusterByCondition`, same file): Ready False adds
  `cluster.karmada.io/not-ready:NoSchedule`, Unknown adds
  `cluster.karmada.io/unreachable:NoSchedule`, True removes both. NoExecute taints (eviction)
  are off by default upstream and not added.
"""

from __future__ import annotations

import time
from typing import Any

from sandbox import quantity
from sandbox.argo.member import ClusterHost, Member
from sandbox.resources import CLUSTER, NAMESPACE
from sandbox.store import Obj, clone, now_iso

NOT_READY_KEY = "cluster.karmada.io/not-ready"
UNREACHABLE_KEY = "cluster.karmada.io/unreachable"
EXECUTION_NS_PREFIX = "karmada-es-"
GRACE_PERIOD_S = 40.0
# `--cluster-status-update-frequency` (cmd/controller-manager/app/options/options.go: "how
# often karmada-controller-manager posts cluster status to karmada-apiserver", 10 s; the
# agent's flag has the same default), divided by `--time-scale` here. A Ready cluster's
# resourceSummary is posted no more often: posting it on every sandbox tick moved each
# Cluster twenty times a second under a fan-out, which no client of real Karmada sees.
# Readiness itself still changes at once (no failure threshold; see the README).
STATUS_UPDATE_FREQUENCY_S = 10.0

_READY = {
    "True": ("ClusterReady", "cluster is healthy and ready to accept workloads"),
    "NotHealthy": (
        "ClusterNotReady",
        "cluster is reachable but health endpoint responded without ok",
    ),
    "NotReachable": ("ClusterNotReachable", "cluster is not reachable"),
    "Unknown": (
        "ClusterStatusUnknown",
        "Cluster status controller stopped posting cluster status.",
    ),
}


def execution_namespace(cluster: str) -> str:
    return EXECUTION_NS_PREFIX + cluster


class ClusterController:
    def __init__(self, sandbox: ClusterHost) -> None:
        self.sb = sandbox
        self.store = sandbox.store
        # Cluster name -> monotonic time of its last posted status.
        self._posted: dict[str, float] = {}
        # Cluster name -> monotonic time its resourceSummary was last collected.
        self._collected: dict[str, float] = {}

    def reset(self) -> None:
        self._posted.clear()
        self._collected.clear()

    def sync(self) -> dict[str, Obj]:
        """Members for the clusters there are, their status and taints; the Cluster objects."""
        clusters = {c["metadata"]["name"]: c for c in self.store.all(CLUSTER)}
        for name in list(self.sb.members):
            if name not in clusters:
                self.sb.members.pop(name).clear()
                self._posted.pop(name, None)
                self._collected.pop(name, None)
        for name, cluster in clusters.items():
            if name not in self.sb.members:
                site = self.sb.sites.get(name)
                self.sb.members[name] = Member.for_cluster(self.sb, name, site, cluster)
            ns = execution_namespace(name)
            if self.store.find(NAMESPACE, None, ns) is None:
                self.store.create(NAMESPACE, {"metadata": {"name": ns}}, validate=False)
            clusters[name] = self._update(cluster)
        return clusters

    def _ready_state(self, cluster: Obj) -> str:
        name = cluster["metadata"]["name"]
        faults = self.sb.faults
        pull = (cluster.get("spec") or {}).get("syncMode") == "Pull"
        if faults.site_unreachable(name):
            if not pull:
                return "NotReachable"
            posted = self._posted.get(name)
            grace = GRACE_PERIOD_S / self.sb.config.time_scale
            if posted is None or time.monotonic() - posted >= grace:
                return "Unknown"
            return "Frozen"
        if faults.site_not_ready(name):
            return "NotHealthy"
        self._posted[name] = time.monotonic()
        return "True"

    def _update(self, cluster: Obj) -> Obj:
        state = self._ready_state(cluster)
        if state == "Frozen":
            return cluster
        old = cluster.get("status") or {}
        name = cluster["metadata"]["name"]
        if state == "True":
            now = time.monotonic()
            frequency = STATUS_UPDATE_FREQUENCY_S / self.sb.config.time_scale
            was_ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in old.get("conditions") or []
            )
            if was_ready and now - self._collected.get(name, -frequency) < frequency:
                return cluster
            self._collected[name] = now
            status = self._collect(self.sb.members[name])
        else:
            status = clone(old)
        cond_status = {"True": "True", "Unknown": "Unknown"}.get(state, "False")
        reason, message = _READY[state]
        prev = next((c for c in old.get("conditions") or [] if c.get("type") == "Ready"), None)
        ready = {
            "type": "Ready",
            "status": cond_status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": prev["lastTransitionTime"]
            if prev and prev.get("status") == cond_status
            else now_iso(),
        }
        status["conditions"] = [
            ready,
            *(c for c in status.get("conditions") or [] if c.get("type") != "Ready"),
        ]
        taints = _taints_for(cond_status, list((cluster.get("spec") or {}).get("taints") or []))
        if status == old and taints == list((cluster.get("spec") or {}).get("taints") or []):
            return cluster
        new = clone(cluster)
        new["status"] = status
        new.setdefault("spec", {})["taints"] = taints
        if not taints:
            new["spec"].pop("taints")
        return self.store.update(CLUSTER, new, subresource="all", validate=False, check_rv=False)

    def _collect(self, member: Member) -> dict[str, Any]:
        return {
            "kubernetesVersion": member.kubernetes_version,
            "apiEnablements": [
                {
                    "groupVersion": "v1",
                    "resources": [
                        {"name": "configmaps", "kind": "ConfigMap"},
                        {"name": "pods", "kind": "Pod"},
                        {"name": "secrets", "kind": "Secret"},
                    ],
                },
                {
                    "groupVersion": "argoproj.io/v1alpha1",
                    "resources": [{"name": "workflows", "kind": "Workflow"}],
                },
            ],
            "conditions": [
                {
                    "type": "CompleteAPIEnablements",
                    "status": "True",
                    "reason": "Complete",
                    "message": "collected complete APIs from member cluster",
                    "lastTransitionTime": self._since(member),
                }
            ],
            "nodeSummary": {"totalNum": len(member.nodes), "readyNum": len(member.nodes)},
            "resourceSummary": {
                "allocatable": quantity.fmt_map(member.capacity),
                "allocating": quantity.fmt_map(member.pending_requests()),
                "allocated": quantity.fmt_map(member.allocated),
            },
        }

    def _since(self, member: Member) -> str:
        cluster = self.store.find(CLUSTER, None, member.name) or {}
        for cond in (cluster.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "CompleteAPIEnablements":
                return str(cond.get("lastTransitionTime"))
        return now_iso()


def _taints_for(ready: str, taints: list[dict[str, Any]]) -> list[dict[str, Any]]:
    want = {"False": NOT_READY_KEY, "Unknown": UNREACHABLE_KEY}.get(ready)
    kept = [
        t
        for t in taints
        if t.get("key") not in (NOT_READY_KEY, UNREACHABLE_KEY) or t.get("key") == want
    ]
    if want and not any(t.get("key") == want for t in kept):
        kept.append({"key": want, "effect": "NoSchedule", "timeAdded": now_iso()})
    return kept
