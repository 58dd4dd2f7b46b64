"""Karmada's control plane, simulated: admission webhooks, policy matching, scheduling,
ResourceBindings and Works, overrides, propagation to members, status, the cluster proxy.

Modules: `admission` (Karmada's own policy webhooks), `webhooks` (user-registered mutating
webhooks), `policy` (which policy claims a Workflow), `scheduling`, `overrides`, `clusters`
(Cluster status and taints), `events`, `controller` (detector, binding, execution and status
controllers), `proxy` (the aggregated apiserver's cluster proxy)."""

from sandbox.karmada.controller import Karmada
from sandbox.karmada.overrides import apply_overriders, override_image
from sandbox.karmada.policy import choose_policy, policy_precision
from sandbox.karmada.scheduling import affinity_matches, cluster_ready, tolerated
from sandbox.karmada.webhooks import Webhooks

__all__ = [
    "Karmada",
    "Webhooks",
    "affinity_matches",
    "apply_overriders",
    "choose_policy",
    "cluster_ready",
    "override_image",
    "policy_precision",
    "tolerated",
]
