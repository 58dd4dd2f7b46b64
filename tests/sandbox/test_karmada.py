"""Karmada semantics: policy choice, scheduling, bindings, overrides, capacity."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client

from sandbox.resources import RESOURCE_BINDING
from sandbox.schema import SchemaRegistry
from tests.fixtures_sandbox import KARMADA_CRDS, SandboxServer, start_sandbox
from tests.sandbox.conftest import NS, SITE_LABEL, Fleet, leaf, site_policy, unique, workflow


def any_workflow_policy(name: str, priority: int | None = None, **placement: Any) -> dict[str, Any]:
    body = site_policy("x", name=name, priority=priority, **placement)
    body["spec"]["resourceSelectors"] = [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow"}]
    return body


def test_explicit_priority_wins_over_precision(fleet: Fleet) -> None:
    name = unique("prio")
    by_name = site_policy("site-a", name="by-name", priority=1)
    by_name["spec"]["resourceSelectors"] = [
        {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": name}
    ]
    fleet.create_policy(by_name)
    fleet.create_policy(
        any_workflow_policy(
            "catch-all-high", priority=10, clusterAffinity={"clusterNames": ["site-c"]}
        )
    )
    fleet.create_workflow(workflow(name, [leaf("main")]))
    assert fleet.scheduled_to(name) == "site-c"
    rb = fleet.binding(name)
    assert rb is not None
    assert rb["metadata"]["annotations"]["propagationpolicy.karmada.io/name"] == "catch-all-high"


def test_the_more_precise_selector_wins_at_equal_priority(fleet: Fleet) -> None:
    name = unique("prec")
    fleet.create_policy(
        any_workflow_policy("aaa-any", clusterAffinity={"clusterNames": ["site-a"]})
    )
    fleet.create_policy(site_policy("site-c", name="zzz-labelled"))
    named = site_policy("site-b", name="zzz-named")
    named["spec"]["resourceSelectors"] = [
        {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": name}
    ]
    fleet.create_policy(named)
    fleet.create_workflow(workflow(name, [leaf("main")], labels={SITE_LABEL: "site-c"}))
    assert fleet.scheduled_to(name) == "site-b"
    other = unique("prec2")
    fleet.create_workflow(workflow(other, [leaf("main")], labels={SITE_LABEL: "site-c"}))
    assert fleet.scheduled_to(other) == "site-c"


def test_a_namespaced_policy_wins_over_a_cluster_policy(fleet: Fleet) -> None:
    cpp = any_workflow_policy(
        "cluster-wide", priority=100, clusterAffinity={"clusterNames": ["site-c"]}
    )
    fleet.create_cluster_policy(cpp)
    fleet.create_policy(any_workflow_policy("local", clusterAffinity={"clusterNames": ["site-a"]}))
    name = unique("nsfirst")
    fleet.create_workflow(workflow(name, [leaf("main")]))
    assert fleet.scheduled_to(name) == "site-a"


def test_an_unmatched_workflow_gets_no_binding(sandbox: SandboxServer, fleet: Fleet) -> None:
    fleet.create_policy(site_policy("site-b"))
    name = unique("nomatch")
    fleet.create_workflow(workflow(name, [leaf("main")], labels={SITE_LABEL: "site-a"}))
    other = unique("match")
    fleet.create_workflow(workflow(other, [leaf("main")], labels={SITE_LABEL: "site-b"}))
    fleet.scheduled_to(other)  # the controller has run since the first was created
    assert fleet.binding(name) is None


def test_spread_constraints_choose_exactly_one_ready_untainted_cluster(
    sandbox: SandboxServer, fleet: Fleet, custom: client.CustomObjectsApi
) -> None:
    custom.patch_cluster_custom_object(
        "cluster.karmada.io",
        "v1alpha1",
        "clusters",
        "site-b",
        {"spec": {"taints": [{"key": "maintenance", "effect": "NoSchedule"}]}},
    )
    sandbox.fault("site-not-ready", site="site-c")
    sandbox.wait_for(
        lambda: fleet.cluster("site-c")["status"]["conditions"][0]["status"] == "False",
        what="site-c NotReady",
    )
    fleet.create_policy(
        any_workflow_policy(
            "spread",
            spreadConstraints=[{"spreadByField": "cluster", "maxGroups": 1, "minGroups": 1}],
        )
    )
    name = unique("spread")
    fleet.create_workflow(workflow(name, [leaf("main")]))
    assert fleet.scheduled_to(name) == "site-a"
    rb = fleet.binding(name)
    assert rb is not None and len(rb["spec"]["clusters"]) == 1


def test_a_tolerated_taint_does_not_exclude(fleet: Fleet, custom: client.CustomObjectsApi) -> None:
    custom.patch_cluster_custom_object(
        "cluster.karmada.io",
        "v1alpha1",
        "clusters",
        "site-b",
        {"spec": {"taints": [{"key": "maintenance", "effect": "NoSchedule"}]}},
    )
    fleet.create_policy(
        site_policy(
            "site-b",
            clusterAffinity={"clusterNames": ["site-b"]},
            clusterTolerations=[{"key": "maintenance", "operator": "Exists"}],
        )
    )
    name = unique("tol")
    fleet.create_workflow(workflow(name, [leaf("main")], labels={SITE_LABEL: "site-b"}))
    assert fleet.scheduled_to(name) == "site-b"


def free_cpu(fleet: Fleet, site: str) -> int:
    summary = fleet.cluster(site)["status"]["resourceSummary"]
    return int(summary["allocatable"]["cpu"]) - int(summary["allocated"]["cpu"])


def test_capacity_is_not_checked_affinity_groups_are_tried_in_order(
    sandbox: SandboxServer, fleet: Fleet
) -> None:
    """A Workflow has no replica requirements for Karmada: a full site still gets it."""
    fleet.create_policy(
        any_workflow_policy(
            "a-then-c",
            clusterAffinities=[
                {"affinityName": "data-site", "clusterNames": ["site-a"]},
                {"affinityName": "gpu-site", "clusterNames": ["site-c"]},
            ],
        )
    )
    big = unique("big")
    fleet.create_workflow(workflow(big, [leaf("main", cpu=str(free_cpu(fleet, "site-a") + 1))]))
    assert fleet.scheduled_to(big) == "site-a"
    rb = fleet.binding(big) or {}
    assert "resourceRequest" not in (rb["spec"].get("replicaRequirements") or {})
    sandbox.fault("site-not-ready", site="site-a")
    sandbox.wait_for(lambda: fleet.cluster("site-a")["spec"].get("taints"), what="tainted")
    later = unique("later")
    fleet.create_workflow(workflow(later, [leaf("main")]))
    assert fleet.scheduled_to(later) == "site-c"


def test_a_full_site_queues_the_pods_at_the_member(
    sandbox: SandboxServer, fleet: Fleet, run_on: Callable[..., dict[str, Any]]
) -> None:
    free = free_cpu(fleet, "site-a")
    holder = unique("hold")
    run_on("site-a", workflow(holder, [leaf("main", cpu=str(free), duration="1h")]))
    sandbox.wait_for(
        lambda: fleet.live_status("site-a", holder).get("phase") == "Running", what="holder"
    )
    queued = unique("queued")
    run_on("site-a", workflow(queued, [leaf("main", cpu="2", duration="1s")]))
    assert fleet.scheduled_to(queued) == "site-a"

    def pending_message() -> str | None:
        node = fleet.member_status(queued).get("nodes", {}).get(queued) or {}
        return node.get("message") if node.get("phase") == "Pending" else None

    message = sandbox.wait_for(pending_message, what="the pod queued at the member")
    assert message.startswith("Unschedulable: 0/2 nodes are available: Insufficient cpu")
    summary = fleet.cluster("site-a")["status"]["resourceSummary"]
    assert summary["allocating"]["cpu"] == "2"
    fleet.custom.patch_namespaced_custom_object(
        "argoproj.io", "v1alpha1", NS, "workflows", holder, {"spec": {"shutdown": "Terminate"}}
    )
    assert fleet.wait_phase(queued)["phase"] == "Succeeded"


def test_an_impossible_affinity_leaves_the_binding_unscheduled(
    sandbox: SandboxServer, fleet: Fleet
) -> None:
    fleet.create_policy(site_policy("site-a", clusterAffinity={"clusterNames": ["site-z"]}))
    name = unique("nofit")
    fleet.create_workflow(workflow(name, [leaf("main")], labels={SITE_LABEL: "site-a"}))

    def unscheduled() -> dict[str, Any] | None:
        rb = fleet.binding(name) or {}
        cond = next(
            (
                c
                for c in (rb.get("status") or {}).get("conditions") or []
                if c["type"] == "Scheduled"
            ),
            None,
        )
        return cond if cond and cond["status"] == "False" else None

    cond = sandbox.wait_for(unscheduled, what="Scheduled=False")
    assert cond["reason"] == "NoClusterFit"
    assert cond["message"] == (
        "0/3 clusters are available: "
        "3 cluster(s) did not match the placement cluster affinity constraint."
    )
    assert not (fleet.binding(name) or {})["spec"].get("clusters")


def test_without_spread_constraints_every_matching_cluster_gets_a_copy(
    sandbox: SandboxServer, fleet: Fleet
) -> None:
    """Duplicated placement: each feasible cluster runs the Workflow."""
    fleet.create_policy(
        any_workflow_policy("dup", clusterAffinity={"clusterNames": ["site-a", "site-b"]})
    )
    name = unique("dup")
    fleet.create_workflow(workflow(name, [leaf("main")]))
    rb = sandbox.wait_for(
        lambda: (fleet.binding(name) or {}).get("spec", {}).get("clusters"), what="scheduled"
    )
    assert sorted(c["name"] for c in rb) == ["site-a", "site-b"]

    def both_done() -> list[dict[str, Any]] | None:
        agg = ((fleet.binding(name) or {}).get("status") or {}).get("aggregatedStatus") or []
        done = [a for a in agg if (a.get("status") or {}).get("phase") == "Succeeded"]
        return agg if len(done) == 2 else None

    agg = sandbox.wait_for(both_done, what="both copies succeeded")
    assert sorted(a["clusterName"] for a in agg) == ["site-a", "site-b"]


def test_binding_records_site_and_member_status_and_validates(
    fleet: Fleet, run_on: Callable[..., dict[str, Any]]
) -> None:
    name = unique("rb")
    run_on("site-b", workflow(name, [leaf("main")]))
    status = fleet.wait_phase(name)
    assert status["phase"] == "Succeeded"
    rb = fleet.binding(name)
    assert rb is not None
    assert rb["spec"]["clusters"] == [{"name": "site-b", "replicas": 1}]
    assert rb["spec"]["resource"]["name"] == name
    conds = {c["type"]: c["status"] for c in rb["status"]["conditions"]}
    assert conds == {"Scheduled": "True", "FullyApplied": "True"}
    agg = rb["status"]["aggregatedStatus"]
    assert [(a["clusterName"], a["applied"], a["health"]) for a in agg] == [
        ("site-b", True, "Healthy")
    ]
    assert agg[0]["status"]["nodes"][name]["phase"] == "Succeeded"
    schemas = SchemaRegistry()
    schemas.load([Path(KARMADA_CRDS)])
    schemas.validate(RESOURCE_BINDING, rb)  # raises ApiError if it would not validate


def test_deleting_the_workflow_removes_member_copy_and_binding(
    sandbox: SandboxServer,
    fleet: Fleet,
    custom: client.CustomObjectsApi,
    run_on: Callable[..., dict[str, Any]],
) -> None:
    name = unique("del")
    run_on("site-b", workflow(name, [leaf("main", duration="1h")]))
    sandbox.wait_for(
        lambda: fleet.live_status("site-b", name).get("phase") == "Running",
        what="running in site-b",
    )
    custom.delete_namespaced_custom_object("argoproj.io", "v1alpha1", NS, "workflows", name)
    sandbox.wait_for(
        lambda: not any(w["metadata"]["name"] == name for w in sandbox.member_workflows("site-b")),
        what="member copy gone",
    )
    sandbox.wait_for(lambda: fleet.binding(name) is None, what="binding gone")


def test_cluster_resource_summary_follows_running_work(
    sandbox: SandboxServer,
    fleet: Fleet,
    custom: client.CustomObjectsApi,
    run_on: Callable[..., dict[str, Any]],
) -> None:
    before = fleet.cluster("site-b")["status"]["resourceSummary"]
    assert before["allocatable"]["cpu"] == "64"
    idle = int(before["allocated"]["cpu"])
    name = unique("cap")
    run_on("site-b", workflow(name, [leaf("main", cpu="8", duration="1h")]))
    sandbox.wait_for(
        lambda: fleet.cluster("site-b")["status"]["resourceSummary"]["allocated"]["cpu"]
        == str(idle + 8),
        what="8 CPUs allocated",
    )
    custom.patch_namespaced_custom_object(
        "argoproj.io", "v1alpha1", NS, "workflows", name, {"spec": {"shutdown": "Terminate"}}
    )
    sandbox.wait_for(
        lambda: fleet.cluster("site-b")["status"]["resourceSummary"]["allocated"]["cpu"]
        == str(idle),
        what="CPUs released",
    )
    summary = fleet.cluster("site-b")["status"]["nodeSummary"]
    assert summary == {"totalNum": 8, "readyNum": 8}


def _site_overrides() -> dict[str, Any]:
    """An OverridePolicy giving site-b's copies a ServiceAccount and an image mirror, and
    site-c's another ServiceAccount."""
    return {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "OverridePolicy",
        "metadata": {"name": "site-b-overrides"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow"}],
            "overrideRules": [
                {
                    "targetCluster": {"clusterNames": ["site-b"]},
                    "overriders": {
                        "plaintext": [
                            {
                                "path": "/spec/serviceAccountName",
                                "operator": "add",
                                "value": "site-b-runner",
                            }
                        ],
                        "imageOverrider": [
                            {
                                "component": "Registry",
                                "operator": "replace",
                                "value": "mirror.site-b.example",
                            }
                        ],
                    },
                },
                {
                    "targetCluster": {"clusterNames": ["site-c"]},
                    "overriders": {
                        "plaintext": [
                            {
                                "path": "/spec/serviceAccountName",
                                "operator": "add",
                                "value": "wrong",
                            }
                        ]
                    },
                },
            ],
        },
    }


def test_override_policies_change_the_member_copy(
    sandbox: SandboxServer,
    fleet: Fleet,
    custom: client.CustomObjectsApi,
    run_on: Callable[..., dict[str, Any]],
) -> None:
    custom.create_namespaced_custom_object(
        "policy.karmada.io", "v1alpha1", NS, "overridepolicies", _site_overrides()
    )
    name = unique("ovr")
    run_on("site-b", workflow(name, [leaf("main")]))
    fleet.scheduled_to(name)

    def member_copy() -> dict[str, Any] | None:
        return next(
            (w for w in sandbox.member_workflows("site-b") if w["metadata"]["name"] == name), None
        )

    copy = sandbox.wait_for(member_copy, what="member copy")
    assert copy["spec"]["serviceAccountName"] == "site-b-runner"
    assert copy["spec"]["templates"][0]["container"]["image"] == "mirror.site-b.example/busybox"
    original = custom.get_namespaced_custom_object("argoproj.io", "v1alpha1", NS, "workflows", name)
    assert "serviceAccountName" not in original["spec"]


def test_a_ready_clusters_summary_is_posted_at_the_status_update_frequency(
    tmp_path: Path,
) -> None:
    """karmada-controller-manager posts a cluster's status every
    ``--cluster-status-update-frequency`` (10 s), not on every change: steps that start and
    end in between show in the next post. At time scale 5 the sandbox posts every 2 s."""
    server = start_sandbox(tmp_path, time_scale=5.0)
    api = server.api_client()
    try:
        fleet = Fleet(server, client.CustomObjectsApi(api))
        fleet.create_policy(site_policy("site-b"))
        versions = {fleet.cluster("site-b")["metadata"]["resourceVersion"]}
        names = []
        started = time.monotonic()
        for i in range(8):  # each holds 8 CPUs for 0.2 s (1 s scaled), one after another
            body = workflow(unique(f"blip{i}"), [leaf("main", cpu="8", duration="1s")])
            body["metadata"].setdefault("labels", {})[SITE_LABEL] = "site-b"
            names.append(fleet.create_workflow(body)["metadata"]["name"])
            until = time.monotonic() + 0.3
            while time.monotonic() < until:
                versions.add(fleet.cluster("site-b")["metadata"]["resourceVersion"])
                time.sleep(0.01)
        for name in names:  # the changes did happen: every step ran at site-b
            assert fleet.wait_phase(name)["phase"] == "Succeeded"
        versions.add(fleet.cluster("site-b")["metadata"]["resourceVersion"])
        window = time.monotonic() - started
    finally:
        api.close()
        server.stop()
    # Sixteen changes of allocated CPU; at most one post per 2 s of them (plus the first).
    assert len(versions) <= window / 2.0 + 2, (len(versions), window)
