"""Karmada refusing a Workflow, as upstream shows it: a cordoned cluster (`karmadactl cordon`'s
taint) fails scheduling with the scheduler's FitError text and `ScheduleBindingFailed` Events;
a Workflow already scheduled there stays (NoSchedule evicts nothing); a member that refuses
the copy leaves the Work `Applied=False` with its error, the binding `FullyApplied=False`, and
a `SyncFailed` Event on the Workflow."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from tests.fixtures_sandbox import SandboxServer
from tests.sandbox.conftest import NS, SITE_LABEL, Fleet, leaf, site_policy, unique, workflow

# pkg/apis/cluster/v1alpha1/well_known_constants.go (TaintClusterUnscheduler), as
# pkg/karmadactl/cordon/cordon.go adds it.
CORDON = {"key": "cluster.karmada.io/unschedulable", "effect": "NoSchedule"}


def cordon(custom: client.CustomObjectsApi, site: str, taints: list[dict[str, Any]]) -> None:
    custom.patch_cluster_custom_object(
        "cluster.karmada.io", "v1alpha1", "clusters", site, {"spec": {"taints": taints}}
    )


def condition(obj: dict[str, Any] | None, ctype: str) -> dict[str, Any] | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return dict(cond)
    return None


def events_of(core: client.CoreV1Api, name: str) -> list[tuple[str, str, str]]:
    items = core.list_namespaced_event(NS).items
    return [
        (e.type, e.reason, e.message)
        for e in items
        if e.involved_object.name == name and e.involved_object.kind == "Workflow"
    ]


def test_a_cordoned_cluster_fails_scheduling_as_karmadas_scheduler_says(
    sandbox: SandboxServer, fleet: Fleet, custom: client.CustomObjectsApi, core: client.CoreV1Api
) -> None:
    cordon(custom, "site-b", [CORDON])
    fleet.create_policy(site_policy("site-b"))
    name = unique("cordoned")
    fleet.create_workflow(workflow(name, [leaf("main")], labels={SITE_LABEL: "site-b"}))

    def unscheduled() -> dict[str, Any] | None:
        cond = condition(fleet.binding(name), "Scheduled")
        return cond if cond and cond["status"] == "False" else None

    cond = sandbox.wait_for(unscheduled, what="Scheduled=False")
    message = (
        "0/3 clusters are available: "
        "1 cluster(s) had untolerated taint {cluster.karmada.io/unschedulable:NoSchedule}, "
        "2 cluster(s) did not match the placement cluster affinity constraint."
    )
    assert (cond["reason"], cond["message"]) == ("NoClusterFit", message)
    failed = sandbox.wait_for(lambda: events_of(core, name), what="an Event on the Workflow")
    assert failed == [("Warning", "ScheduleBindingFailed", message)]

    # Uncordoned (karmadactl uncordon removes the taint): scheduled at once.
    cordon(custom, "site-b", [])
    assert fleet.scheduled_to(name) == "site-b"
    assert fleet.wait_phase(name)["phase"] == "Succeeded"
    assert (condition(fleet.binding(name), "Scheduled") or {}).get("reason") == "Success"


def test_a_workflow_already_scheduled_stays_on_a_cluster_cordoned_later(
    sandbox: SandboxServer, fleet: Fleet, custom: client.CustomObjectsApi
) -> None:
    """The TaintToleration filter skips clusters already in the result
    (pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go): only a NoExecute
    taint with the taint manager on evicts."""
    fleet.create_policy(site_policy("site-b"))
    name = unique("bound")
    fleet.create_workflow(
        workflow(name, [leaf("main", duration="1h")], labels={SITE_LABEL: "site-b"})
    )
    assert fleet.scheduled_to(name) == "site-b"
    cordon(custom, "site-b", [CORDON])
    # A later Workflow is refused: the scheduler has seen the taint.
    later = unique("later")
    fleet.create_workflow(workflow(later, [leaf("main")], labels={SITE_LABEL: "site-b"}))
    sandbox.wait_for(
        lambda: (condition(fleet.binding(later), "Scheduled") or {}).get("status") == "False",
        what="the later Workflow refused",
    )
    rb = fleet.binding(name)
    assert rb is not None and rb["spec"]["clusters"] == [{"name": "site-b", "replicas": 1}]
    assert (condition(rb, "Scheduled") or {}).get("status") == "True"
    assert fleet.live_status("site-b", name).get("phase") == "Running"


def test_a_member_refusing_the_copy_leaves_the_work_not_applied(
    sandbox: SandboxServer, fleet: Fleet, core: client.CoreV1Api
) -> None:
    fault = sandbox.fault("member-refuse", site="site-c", message="quota exceeded: workflows=5")
    fleet.create_policy(site_policy("site-c"))
    name = unique("refused")
    fleet.create_workflow(workflow(name, [leaf("main")], labels={SITE_LABEL: "site-c"}))

    def refused() -> dict[str, Any] | None:
        rb = fleet.binding(name)
        agg = ((rb or {}).get("status") or {}).get("aggregatedStatus") or []
        return rb if agg and agg[0].get("appliedMessage") else None

    rb = sandbox.wait_for(refused, what="the refusal in the binding")
    assert rb["status"]["aggregatedStatus"] == [
        {
            "clusterName": "site-c",
            "appliedMessage": "Failed to apply all manifests (0/1): quota exceeded: workflows=5",
            "health": "Unknown",
        }
    ]
    full = condition(rb, "FullyApplied") or {}
    assert (full.get("status"), full.get("reason")) == ("False", "FullyAppliedFailed")
    assert not any(w["metadata"]["name"] == name for w in sandbox.member_workflows("site-c"))
    assert (
        "Warning",
        "SyncFailed",
        f"Failed to create or update resource({NS}/{name}) in member cluster(site-c): "
        "quota exceeded: workflows=5",
    ) in events_of(core, name)

    # The member accepts it again: the execution controller's retry applies it.
    sandbox.clear_fault(fault["id"])
    assert fleet.wait_phase(name)["phase"] == "Succeeded"
    full = condition(fleet.binding(name), "FullyApplied") or {}
    assert full.get("status") == "True"
