"""What the portal reads back from Karmada: free capacity from a
Cluster's status, a member Workflow's nodes in any of Argo's formats."""

from __future__ import annotations

from typing import Any

import pytest

from portal.controller import sync
from portal.controller.bindings import binding_observe
from portal.controller.sync import cluster_note, cluster_observe
from portal.karmada import client, lists, resources
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
    site, _ = cluster_observe(_cluster("32", "10", "6500m"))
    assert site.cpu_free == 32000 - 10000 - 6500
    assert site.memory_free == (64 - 8 - 2) * 1024**3
    assert Site.objects.get(name="site-x").pods_allocated == 6


@pytest.mark.django_db
def test_the_watcher_notes_a_capacity_change_in_one_update_and_the_rest_in_full(
    django_assert_num_queries: Any,
) -> None:
    """A fan-out moves every Cluster's resourceSummary many times a second: the watcher writes
    such a change with one conditional UPDATE, and anything else through ``cluster_observe``
    (a new Site, readiness, labels, GPUs)."""
    cluster = _cluster("32", "10", "0")
    assert cluster_note(cluster) is True  # a new Site
    cluster["metadata"]["labels"] = {"region": "eu"}
    assert cluster_note(cluster) is False  # a label the Site lacks: the full path
    site = Site.objects.get(name="site-x")
    site.labels = {**site.labels, "owner": "ops"}  # added by an operator: kept
    site.save()

    busier = _cluster("32", "20", "4")
    busier["metadata"]["labels"] = {"region": "eu"}
    with django_assert_num_queries(1):
        assert cluster_note(busier) is False
    site = Site.objects.get(name="site-x")
    assert (site.cpu_allocated, site.labels) == (24000, {"region": "eu", "owner": "ops"})

    busier["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    assert cluster_note(busier) is True  # readiness: the full path says so
    site = Site.objects.get(name="site-x")
    assert site.ready is False and site.ready_changed_at is not None

    busier["status"]["resourceSummary"]["allocatable"]["nvidia.com/gpu"] = "2"
    assert cluster_note(busier) is False
    assert "gpu" in Site.objects.get(name="site-x").capabilities


def test_free_cpu_from_the_sandboxs_clusters_is_allocatable_less_allocated_and_allocating(
    sandbox: SandboxServer, db: Any, settings: Any
) -> None:
    settings.KARMADA_KUBECONFIG = str(sandbox.kubeconfig)
    client.reset()
    try:
        clusters, _ = lists.list_objects(resources.CLUSTER)
    finally:
        client.reset()
    assert clusters
    for cluster in clusters:
        site, _ = cluster_observe(cluster)
        summary = cluster["status"]["resourceSummary"]
        assert "allocating" in summary
        milli = {
            part: sync._quantity(summary[part].get("cpu"), milli=True)
            for part in ("allocatable", "allocated", "allocating")
        }
        assert site.cpu_free == max(
            milli["allocatable"] - milli["allocated"] - milli["allocating"], 0
        )


def _binding(name: str, member: dict[str, Any]) -> dict[str, Any]:
    return {
        "spec": {"resource": {"kind": "Workflow", "name": name}, "clusters": [{"name": "site-b"}]},
        "status": {"aggregatedStatus": [{"clusterName": "site-b", "status": member}]},
    }


def _finished_member(**status: Any) -> dict[str, Any]:
    return {
        "phase": "Succeeded",
        "startedAt": "2026-12-03T07:00:00Z",
        "finishedAt": "2026-12-03T07:05:00Z",
        **status,
    }


def _preprocess(scientist: Any) -> Any:
    from portal.models import UnitRun
    from tests.portal.helpers import make_run

    run = make_run(scientist)
    unit = run.units.get(name="preprocess")
    UnitRun.objects.filter(pk=unit.pk).update(workflow_name=f"r{run.pk}-preprocess")
    return run.units.get(name="preprocess")


def test_outputs_are_read_from_compressed_nodes(scientist: Any) -> None:
    import base64
    import gzip
    import json

    unit = _preprocess(scientist)
    nodes = {
        unit.workflow_name: {
            "id": unit.workflow_name,
            "outputs": {"parameters": [{"name": "tiles", "value": "42"}]},
        }
    }
    packed = base64.b64encode(gzip.compress(json.dumps(nodes).encode())).decode()
    binding_observe(_binding(unit.workflow_name, _finished_member(compressedNodes=packed)))
    unit.refresh_from_db()
    assert unit.phase == "Succeeded"
    assert unit.outputs["parameters"] == [{"name": "tiles", "value": "42"}]


def test_a_member_that_offloads_node_status_ends_the_unit_in_error_naming_it(
    scientist: Any,
) -> None:
    unit = _preprocess(scientist)
    member = _finished_member(offloadNodeStatusVersion="fnv:1234")
    binding_observe(_binding(unit.workflow_name, member))
    unit.refresh_from_db()
    assert unit.phase == "Error"
    assert "site-b" in unit.message
    assert "offloadNodeStatusVersion" in unit.message


@pytest.mark.django_db
def test_a_sites_zone_is_read_from_the_clusters_zones() -> None:
    """Karmada's Cluster has ``spec.zones`` (what ``karmadactl join --cluster-zones`` sets);
    ``spec.zone`` is deprecated and never set by Karmada's tools."""
    cluster = _cluster("32", "0", "0")
    cluster["spec"] = {"region": "eu-west", "zones": ["eu-west-1a", "eu-west-1b"]}
    site, _ = cluster_observe(cluster)
    assert site.zone == "eu-west-1a,eu-west-1b"
    # A cluster registered before `zones` existed still says where it is.
    cluster["spec"] = {"region": "eu-west", "zone": "eu-west-1c"}
    assert cluster_observe(cluster)[0].zone == "eu-west-1c"
    cluster["spec"] = {"region": "eu-west", "zones": ["eu-west-1a"], "zone": "stale"}
    assert cluster_observe(cluster)[0].zone == "eu-west-1a"


def test_the_sandboxs_clusters_carry_zones_as_karmadactl_join_writes_them(
    sandbox: SandboxServer,
) -> None:
    cluster = sandbox.request("GET", "/apis/cluster.karmada.io/v1alpha1/clusters/site-a")
    assert cluster["spec"]["zones"] == ["eu-west-1a"]
    assert "zone" not in cluster["spec"]
