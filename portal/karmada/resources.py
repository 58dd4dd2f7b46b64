"""The kinds the portal reads and writes on karmada-apiserver, each named as the API serves it
(group, version, plural) with its scope: what a call needs to build its path."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool


CLUSTER = Resource("cluster.karmada.io", "v1alpha1", "clusters", "Cluster", False)
PROPAGATION_POLICY = Resource(
    "policy.karmada.io", "v1alpha1", "propagationpolicies", "PropagationPolicy", True
)
CLUSTER_PROPAGATION_POLICY = Resource(
    "policy.karmada.io", "v1alpha1", "clusterpropagationpolicies", "ClusterPropagationPolicy", False
)
OVERRIDE_POLICY = Resource(
    "policy.karmada.io", "v1alpha1", "overridepolicies", "OverridePolicy", True
)
RESOURCE_BINDING = Resource(
    "work.karmada.io", "v1alpha2", "resourcebindings", "ResourceBinding", True
)
WORKFLOW = Resource("argoproj.io", "v1alpha1", "workflows", "Workflow", True)
# The watcher's and beat's leader election (portal/leader.py).
LEASE = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)
BY_KIND = {
    r.kind: r
    for r in (
        CLUSTER,
        PROPAGATION_POLICY,
        CLUSTER_PROPAGATION_POLICY,
        OVERRIDE_POLICY,
        RESOURCE_BINDING,
        WORKFLOW,
    )
}
