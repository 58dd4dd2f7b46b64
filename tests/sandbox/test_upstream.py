"""Karmada v1.19 where it is unkind, over HTTP with the official client: policy
admission, Workflows without a status subresource, deletion that follows the Work, re-creation
of what a member deletes, cluster status, and the fleet's syncMode (the cluster proxy:
test_proxy.py)."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from sandbox.fleet import load_fleet
from tests.fixtures_sandbox import SandboxServer
from tests.sandbox.conftest import (
    NS,
    PROXY,
    Fleet,
    leaf,
    proxied_workflow,
    site_policy,
    unique,
    workflow,
)

PP = ("policy.karmada.io", "v1alpha1")
WF = ("argoproj.io", "v1alpha1")
PP_ID = "propagationpolicy.karmada.io/permanent-id"
CPP_ID = "clusterpropagationpolicy.karmada.io/permanent-id"
RunOn = Callable[..., dict[str, Any]]


def forbidden(exc: pytest.ExceptionInfo[client.ApiException]) -> str:
    assert exc.value.status == 403, exc.value.body
    body = json.loads(exc.value.body)
    assert body["reason"] == "Forbidden"
    return str(body["message"])


# -- 1. policy admission ---------------------------------------------------------------------
def test_a_created_policy_gets_permanent_id_finalizer_namespace_and_defaults(
    fleet: Fleet,
) -> None:
    created = fleet.create_policy(site_policy("site-a", name=unique("adm")))
    meta = created["metadata"]
    assert len(meta["labels"][PP_ID]) == 36  # a UUID
    assert meta["finalizers"] == ["karmada.io/propagation-policy-controller"]
    spec = created["spec"]
    assert spec["resourceSelectors"][0]["namespace"] == NS
    assert spec["conflictResolution"] == "Abort"
    assert spec["preemption"] == "Never"
    assert spec["schedulerName"] == "default-scheduler"
    assert spec["priority"] == 0
    other = fleet.create_policy(site_policy("site-b", name=unique("adm")))
    assert other["metadata"]["labels"][PP_ID] != meta["labels"][PP_ID]


def test_a_cluster_policy_gets_its_own_label_and_finalizer(fleet: Fleet) -> None:
    created = fleet.create_cluster_policy(
        site_policy("site-a", name=unique("cpp"), spreadConstraints=[{"maxGroups": 1}])
    )
    meta = created["metadata"]
    assert len(meta["labels"][CPP_ID]) == 36
    assert meta["finalizers"] == ["karmada.io/cluster-propagation-policy-controller"]
    assert "namespace" not in created["spec"]["resourceSelectors"][0]
    # helper.SetDefaultSpreadConstraints
    assert created["spec"]["placement"]["spreadConstraints"] == [
        {"maxGroups": 1, "minGroups": 1, "spreadByField": "cluster"}
    ]


def test_an_update_may_not_drop_or_change_the_label_nor_the_scheduler(
    fleet: Fleet, custom: client.CustomObjectsApi
) -> None:
    name = unique("upd")
    created = fleet.create_policy(site_policy("site-a", name=name))
    dropped = copy.deepcopy(created)
    del dropped["metadata"]["labels"][PP_ID]
    with pytest.raises(client.ApiException) as err:
        custom.replace_namespaced_custom_object(*PP, NS, "propagationpolicies", name, dropped)
    assert forbidden(err) == (
        'admission webhook "propagationpolicy.karmada.io" denied the request: label '
        f"{PP_ID} is immutable, it can only be set by the system during creation"
    )
    with pytest.raises(client.ApiException) as err:
        custom.patch_namespaced_custom_object(
            *PP, NS, "propagationpolicies", name, {"metadata": {"labels": {PP_ID: "mine"}}}
        )
    assert "is immutable" in forbidden(err)
    with pytest.raises(client.ApiException) as err:
        custom.patch_namespaced_custom_object(
            *PP, NS, "propagationpolicies", name, {"spec": {"schedulerName": "other"}}
        )
    assert forbidden(err).endswith("denied the request: the schedulerName should not be updated")
    # A read-modify-write that keeps what it does not own is fine.
    kept = custom.get_namespaced_custom_object(*PP, NS, "propagationpolicies", name)
    kept["spec"]["priority"] = 5
    done = custom.replace_namespaced_custom_object(*PP, NS, "propagationpolicies", name, kept)
    assert done["spec"]["priority"] == 5
    assert done["metadata"]["labels"][PP_ID] == created["metadata"]["labels"][PP_ID]


def test_an_override_policy_gets_the_namespace_and_no_label(
    custom: client.CustomObjectsApi,
) -> None:
    body = {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "OverridePolicy",
        "metadata": {"name": unique("op")},
        "spec": {
            "resourceSelectors": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow"}],
            "overrideRules": [],
        },
    }
    created = custom.create_namespaced_custom_object(*PP, NS, "overridepolicies", body)
    assert created["spec"]["resourceSelectors"][0]["namespace"] == NS
    assert not created["metadata"].get("labels") and not created["metadata"].get("finalizers")


def test_the_claim_uses_the_permanent_id_and_a_deleted_policy_releases_it(
    sandbox: SandboxServer, fleet: Fleet, custom: client.CustomObjectsApi, run_on: RunOn
) -> None:
    name = unique("claim")
    run_on("site-b", workflow(name, [leaf("main", duration="1h")]))
    assert fleet.scheduled_to(name) == "site-b"
    policy = custom.get_namespaced_custom_object(
        *PP, NS, "propagationpolicies", "portal-site-site-b"
    )
    policy_id = policy["metadata"]["labels"][PP_ID]
    wf = custom.get_namespaced_custom_object(*WF, NS, "workflows", name)
    assert wf["metadata"]["labels"][PP_ID] == policy_id
    assert wf["metadata"]["annotations"]["propagationpolicy.karmada.io/name"] == (
        "portal-site-site-b"
    )
    rb = fleet.binding(name) or {}
    assert rb["metadata"]["labels"][PP_ID] == policy_id
    custom.delete_namespaced_custom_object(*PP, NS, "propagationpolicies", "portal-site-site-b")

    def gone() -> bool:
        try:
            custom.get_namespaced_custom_object(
                *PP, NS, "propagationpolicies", "portal-site-site-b"
            )
        except client.ApiException as exc:
            return exc.status == 404
        return False

    sandbox.wait_for(gone, what="policy released and deleted")
    wf = custom.get_namespaced_custom_object(*WF, NS, "workflows", name)
    assert PP_ID not in wf["metadata"]["labels"]
    # The binding and what it propagated stay.
    assert fleet.binding(name) is not None
    assert fleet.live_status("site-b", name).get("phase") == "Running"


# -- 2. no status subresource on Workflows -----------------------------------------------------
def interpreter(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "config.karmada.io/v1alpha1",
        "kind": "ResourceInterpreterCustomization",
        "metadata": {"name": name},
        "spec": {
            "target": {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow"},
            "customizations": {
                "statusAggregation": {
                    "luaScript": "function AggregateStatus(d, s) return d end",
                }
            },
        },
    }


def events_for(core: client.CoreV1Api, name: str) -> list[client.CoreV1Event]:
    items: list[client.CoreV1Event] = core.list_namespaced_event(NS).items
    return [e for e in items if e.involved_object.name == name]


def test_status_aggregation_fails_for_workflows_and_says_so(
    sandbox: SandboxServer,
    fleet: Fleet,
    custom: client.CustomObjectsApi,
    core: client.CoreV1Api,
    run_on: RunOn,
) -> None:
    plain = unique("plain")
    run_on("site-b", workflow(plain, [leaf("main")]))
    assert fleet.wait_phase(plain)["phase"] == "Succeeded"
    # Karmada's shipped Workflow interpreter has no statusAggregation: nothing is attempted.
    assert events_for(core, plain) == []
    custom.create_cluster_custom_object(
        "config.karmada.io",
        "v1alpha1",
        "resourceinterpretercustomizations",
        interpreter(unique("ric")),
    )
    name = unique("agg")
    run_on("site-b", workflow(name, [leaf("main")]))
    assert fleet.wait_phase(name)["phase"] == "Succeeded"
    event = sandbox.wait_for(lambda: events_for(core, name), what="an event")[0]
    assert (event.type, event.reason) == ("Warning", "AggregateStatusFailed")
    assert event.message == "the server could not find the requested resource"
    assert event.involved_object.kind == "Workflow"
    # Only the binding carries the member's status.
    wf = custom.get_namespaced_custom_object(*WF, NS, "workflows", name)
    assert not wf.get("status")
    assert (fleet.binding(name) or {})["status"]["aggregatedStatus"][0]["status"]["phase"] == (
        "Succeeded"
    )


# -- 4. deletion follows the Work --------------------------------------------------------------
def work_of(custom: client.CustomObjectsApi, cluster: str, name: str) -> dict[str, Any] | None:
    works = custom.list_namespaced_custom_object(
        "work.karmada.io", "v1alpha1", f"karmada-es-{cluster}", "works"
    )["items"]
    for work in works:
        manifest = work["spec"]["workload"]["manifests"][0]
        if manifest["metadata"]["name"] == name:
            result: dict[str, Any] = work
            return result
    return None


def on_member(sandbox: SandboxServer, cluster: str, name: str) -> bool:
    return any(w["metadata"]["name"] == name for w in sandbox.member_workflows(cluster))


def test_a_work_holds_the_member_copy_and_goes_with_the_workflow(
    sandbox: SandboxServer, fleet: Fleet, custom: client.CustomObjectsApi, run_on: RunOn
) -> None:
    name = unique("work")
    run_on("site-b", workflow(name, [leaf("main", duration="1h")]))
    work = sandbox.wait_for(lambda: work_of(custom, "site-b", name), what="the Work")
    assert work["metadata"]["finalizers"] == ["karmada.io/execution-controller"]
    manifest = work["spec"]["workload"]["manifests"][0]
    assert manifest["metadata"]["labels"]["karmada.io/managed"] == "true"
    applied = sandbox.wait_for(
        lambda: (work_of(custom, "site-b", name) or {}).get("status", {}).get("manifestStatuses"),
        what="status reflected into the Work",
    )
    assert applied[0]["identifier"]["kind"] == "Workflow"
    custom.delete_namespaced_custom_object(*WF, NS, "workflows", name)
    sandbox.wait_for(lambda: work_of(custom, "site-b", name) is None, what="Work gone")
    assert not on_member(sandbox, "site-b", name)
    assert fleet.binding(name) is None


def test_deletion_waits_for_a_not_ready_member_so_a_step_runs_twice(
    sandbox: SandboxServer, fleet: Fleet, custom: client.CustomObjectsApi, run_on: RunOn
) -> None:
    first = unique("lost")
    run_on("site-a", workflow(first, [leaf("main", duration="1h")]))
    sandbox.wait_for(
        lambda: fleet.live_status("site-a", first).get("phase") == "Running", what="running"
    )
    fault = sandbox.fault("site-not-ready", site="site-a")
    sandbox.wait_for(lambda: fleet.cluster("site-a")["spec"].get("taints"), what="site-a tainted")
    # The portal gives up on site-a: deletes the step and runs it again elsewhere.
    custom.delete_namespaced_custom_object(*WF, NS, "workflows", first)
    sandbox.wait_for(lambda: fleet.binding(first) is None, what="binding gone")
    again = unique("again")
    run_on("site-b", workflow(again, [leaf("main", duration="1h")]))
    sandbox.wait_for(
        lambda: fleet.live_status("site-b", again).get("phase") == "Running", what="rerun"
    )
    # The Work waits for the cluster; the copy at site-a keeps running meanwhile.
    work = work_of(custom, "site-a", first)
    assert work is not None and work["metadata"]["deletionTimestamp"]
    time.sleep(0.5)
    assert fleet.live_status("site-a", first).get("phase") == "Running"
    sandbox.clear_fault(fault["id"])
    sandbox.wait_for(lambda: not on_member(sandbox, "site-a", first), what="copy deleted at last")
    sandbox.wait_for(lambda: work_of(custom, "site-a", first) is None, what="Work gone")


# -- 5. Karmada re-creates what a member deletes -------------------------------------------
def test_a_copy_deleted_at_the_member_is_re_created_and_runs_again(
    sandbox: SandboxServer, fleet: Fleet, run_on: RunOn
) -> None:
    name = unique("argodel")
    run_on("site-b", workflow(name, [leaf("main", duration="1h")]))
    before = sandbox.wait_for(lambda: proxied_workflow(sandbox, "site-b", name), what="copy")
    path = PROXY.format(cluster="site-b") + f"/apis/argoproj.io/v1alpha1/namespaces/{NS}/workflows/"
    sandbox.request("DELETE", path + name)  # `argo delete` at the site

    def recreated() -> dict[str, Any] | None:
        wf = proxied_workflow(sandbox, "site-b", name)
        return wf if wf and wf["metadata"]["uid"] != before["metadata"]["uid"] else None

    again = sandbox.wait_for(recreated, what="re-created from the Work")
    assert again["status"]["phase"] in ("Pending", "Running")


def test_members_honour_ttl_strategy_and_karmada_brings_the_workflow_back(
    sandbox: SandboxServer, fleet: Fleet, run_on: RunOn
) -> None:
    name = unique("ttl")
    # 100 simulated seconds after completion (0.1 s at the tests' time scale).
    run_on(
        "site-b",
        workflow(name, [leaf("main", duration="1s")], ttlStrategy={"secondsAfterCompletion": 100}),
    )
    uids: set[str] = set()

    def runs() -> bool:
        wf = proxied_workflow(sandbox, "site-b", name)
        if wf is not None:
            uids.add(wf["metadata"]["uid"])
        return len(uids) >= 3

    # Deleted by the member's TTL, re-created by Karmada, run again, and again.
    sandbox.wait_for(runs, interval=0.01, what="the step running over and over")


# -- 6. cluster status ---------------------------------------------------------------------
def test_cluster_status_as_upstream_reports_it(fleet: Fleet) -> None:
    cluster = fleet.cluster("site-a")
    status = cluster["status"]
    ready = status["conditions"][0]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "ClusterReady")
    summary = status["resourceSummary"]
    assert set(summary) == {"allocatable", "allocated", "allocating"}
    assert summary["allocatable"]["cpu"] == "16"
    assert summary["allocated"]["cpu"] == "12"  # other tenants' baseline
    assert status["nodeSummary"] == {"totalNum": 2, "readyNum": 2}
    assert any(e["groupVersion"] == "argoproj.io/v1alpha1" for e in status["apiEnablements"])
    assert not cluster["spec"].get("taints")


# -- 8. syncMode in the fleet file -----------------------------------------------------------
def test_the_fleet_file_sets_each_sites_sync_mode(fleet: Fleet, tmp_path: Path) -> None:
    assert fleet.cluster("site-b")["spec"]["syncMode"] == "Push"
    assert fleet.cluster("site-b")["spec"]["impersonatorSecretRef"]["namespace"] == (
        "karmada-cluster"
    )
    assert fleet.cluster("site-c")["spec"]["syncMode"] == "Pull"
    assert fleet.cluster("site-c")["spec"]["impersonatorSecretRef"] == {
        "namespace": "karmada-cluster",
        "name": "site-c-impersonator",
    }
    bad = tmp_path / "fleet.yaml"
    bad.write_text("sites:\n  - name: x\n    syncMode: Sideways\n")
    with pytest.raises(ValueError, match="syncMode must be Push or Pull"):
        load_fleet(bad)
    bad.write_text("sites:\n  - name: x\n    syncMode: Pull\n    reportSecrets: [Tokens]\n")
    with pytest.raises(ValueError, match="x: reportSecrets must be"):
        load_fleet(bad)
    bad.write_text("sites:\n  - name: x\n    reportSecrets: None\n")
    with pytest.raises(ValueError, match="applies to syncMode Pull only"):
        load_fleet(bad)
    bad.write_text("sites:\n  - name: x\n    syncMode: Pull\n    reportSecrets: KubeCredentials\n")
    assert "impersonatorSecretRef" not in load_fleet(bad)[0].cluster_object()["spec"]


def test_a_deleted_binding_is_built_again(
    sandbox: SandboxServer, fleet: Fleet, custom: client.CustomObjectsApi, run_on: RunOn
) -> None:
    name = unique("rbdel")
    run_on("site-b", workflow(name, [leaf("main", duration="1h")]))
    first = sandbox.wait_for(lambda: fleet.binding(name), what="binding")
    assert first["metadata"]["finalizers"] == ["karmada.io/binding-controller"]
    custom.delete_namespaced_custom_object(
        "work.karmada.io", "v1alpha2", NS, "resourcebindings", f"{name}-workflow"
    )

    def rebuilt() -> dict[str, Any] | None:
        rb = fleet.binding(name)
        ok = rb and rb["metadata"]["uid"] != first["metadata"]["uid"] and rb["spec"].get("clusters")
        return rb if ok else None

    assert sandbox.wait_for(rebuilt, what="a new binding")["spec"]["clusters"][0]["name"] == (
        "site-b"
    )
