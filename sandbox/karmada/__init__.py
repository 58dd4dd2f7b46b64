"""Karmada's control plane, simulated: admission webhooks, policy matching, scheduling,
ResourceBindings and Works, overrides, propagation to members, status, the cluster proxy.

Modules: `admission` (Karmada's own policy webhooks), `webhooks` (user-registered mutating
webhooks), `policy` (which policy claims a Workflow), `scheduling`, `overrides`, `clusters`
(Cluster status and taints), `events`, `controller` (detector, binding, execution and status
controllers), `proxy` (the aggregated apiserver's cluster proxy)."""
