"""Site figures read from Karmada's Cluster status (issue #17, items 8 and 9)."""

from __future__ import annotations

from typing import Any

import pytest

from portal import execution, gateway
from sites.models import Site
from tests.fixtures_sandbox import SandboxServer


def _cluster(allocatable: str, allocated: str, allocating: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "site-x"},
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "resourceSummary": {
                "allocatable": {"cpu": allocatable, "memory": "64Gi", "pods": "110"},
                "allocated": {"cpu": allocated, "memory": "8Gi", "pods": "4"},
                "allocating": {"cpu": allocating, "memory": "2Gi", "pods": "2"},
            },
        },
    }


@pytest.mark.django_db
def test_it_counts_pods_being_scheduled_as_taken() -> None:
    site, _ = execution.cluster_observe(_cluster("32", "10", "6500m"))
    assert site.cpu_free == 32000 - 10000 - 6500
    assert site.memory_free == (64 - 8 - 2) * 1024**3
    assert Site.objects.get(name="site-x").pods_allocated == 6


def test_free_cpu_from_the_sandboxs_clusters_is_allocatable_less_allocated_and_allocating(
    sandbox: SandboxServer, db: Any, settings: Any
) -> None:
    settings.KARMADA_KUBECONFIG = str(sandbox.kubeconfig)
    gateway.reset()
    try:
        clusters, _ = gateway.list_objects(gateway.CLUSTER)
    finally:
        gateway.reset()
    assert clusters
    for cluster in clusters:
        site, _ = execution.cluster_observe(cluster)
        summary = cluster["status"]["resourceSummary"]
        assert "allocating" in summary
        milli = {
            part: execution.sync._quantity(summary[part].get("cpu"), milli=True)
            for part in ("allocatable", "allocated", "allocating")
        }
        assert site.cpu_free == max(
            milli["allocatable"] - milli["allocated"] - milli["allocating"], 0
        )
