"""Argo semantics in the member clusters: order, outputs, failures, retries, shutdown."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from tests.fixtures_sandbox import SandboxServer
from tests.sandbox.conftest import DOMAIN, NS, Fleet, leaf, unique, workflow

RunOn = Callable[..., dict[str, Any]]


def diamond(duration: str) -> list[dict[str, Any]]:
    return [
        {
            "name": "main",
            "dag": {
                "tasks": [
                    {"name": "A", "template": "work"},
                    {"name": "B", "template": "work", "depends": "A"},
                    {"name": "C", "template": "work", "depends": "A"},
                    {"name": "D", "template": "work", "depends": "B && C"},
                ]
            },
        },
        leaf("work", duration=duration),
    ]


def test_dag_runs_in_dependency_order_with_parallel_branches(
    sandbox: SandboxServer, fleet: Fleet, run_on: RunOn
) -> None:
    name = unique("order")
    # 300 simulated seconds per task: long enough to observe each phase between polls.
    run_on("site-b", workflow(name, diamond(f"{0.3 * sandbox.time_scale:.0f}s")))
    snapshots: list[dict[str, str]] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = fleet.live_status("site-b", name)
        phases = {
            n["displayName"]: n["phase"]
            for n in (status.get("nodes") or {}).values()
            if n["type"] == "Pod"
        }
        snapshots.append(phases)
        if status.get("phase") == "Succeeded":
            break
        time.sleep(0.03)
    assert snapshots[-1] == dict.fromkeys("ABCD", "Succeeded")
    for snap in snapshots:
        if "B" in snap or "C" in snap:
            assert snap["A"] == "Succeeded", snap
        if "D" in snap:
            assert snap["B"] == snap["C"] == "Succeeded", snap
    assert any(s.get("B") == "Running" and s.get("C") == "Running" for s in snapshots), (
        "B and C never ran at the same time"
    )


def test_status_is_shaped_like_argo(fleet: Fleet, run_on: RunOn) -> None:
    name = unique("shape")
    run_on("site-b", workflow(name, diamond("1s")))
    status = fleet.wait_phase(name)
    assert status["phase"] == "Succeeded" and status["progress"] == "4/4"
    assert status["startedAt"] and status["finishedAt"]
    nodes = status["nodes"]
    root = nodes[name]
    assert root["type"] == "DAG" and root["templateName"] == "main"
    by_name = fleet.nodes_by_display(status)
    assert root["children"] == [by_name["A"]["id"]]
    assert set(by_name["A"]["children"]) == {by_name["B"]["id"], by_name["C"]["id"]}
    assert by_name["B"]["children"] == [by_name["D"]["id"]]
    for task in "ABCD":
        node = by_name[task]
        assert node["name"] == f"{name}.{task}" and node["id"] == nodes[node["id"]]["id"]
        assert node["type"] == "Pod" and node["templateName"] == "work"
        assert node["boundaryID"] == name and node["hostNodeName"].startswith("site-b-node-")
        assert node["startedAt"] and node["finishedAt"]


def _produce_and_consume() -> list[dict[str, Any]]:
    """A steps template whose second step takes the first one's output parameters (one
    given by annotation, one by its default) and artifact."""
    return [
        {
            "name": "main",
            "steps": [
                [{"name": "produce", "template": "produce"}],
                [
                    {
                        "name": "consume",
                        "template": "consume",
                        "arguments": {
                            "parameters": [
                                {
                                    "name": "given",
                                    "value": "{{steps.produce.outputs.parameters.given}}",
                                },
                                {
                                    "name": "fallback",
                                    "value": "{{steps.produce.outputs.parameters.fallback}}",
                                },
                            ],
                            "artifacts": [
                                {"name": "data", "from": "{{steps.produce.outputs.artifacts.data}}"}
                            ],
                        },
                    }
                ],
            ],
        },
        leaf(
            "produce",
            annotations={
                f"{DOMAIN}/sandbox-outputs": json.dumps({"given": "42"}),
            },
            outputs={
                "parameters": [
                    {"name": "given", "valueFrom": {"path": "/tmp/given"}},
                    {"name": "fallback", "valueFrom": {"path": "/tmp/x", "default": "dflt"}},
                ],
                "artifacts": [{"name": "data", "path": "/tmp/data"}],
            },
        ),
        leaf(
            "consume",
            inputs={
                "parameters": [{"name": "given"}, {"name": "fallback"}],
                "artifacts": [{"name": "data", "path": "/in"}],
            },
        ),
    ]


def test_outputs_flow_between_steps(fleet: Fleet, run_on: RunOn) -> None:
    name = unique("outs")
    templates = _produce_and_consume()
    run_on("site-c", workflow(name, templates))
    status = fleet.wait_phase(name)
    assert status["phase"] == "Succeeded"
    nodes = fleet.nodes_by_display(status)
    produced = nodes["produce"]["outputs"]
    assert produced["parameters"] == [
        {"name": "given", "value": "42"},
        {"name": "fallback", "value": "dflt"},
    ]
    art = produced["artifacts"][0]
    # As the executing path and Argo >= 3 record it: a key-only location, no bucket, no
    # endpoint, no size.
    assert set(art) == {"name", "path", "s3"} and set(art["s3"]) == {"key"}
    assert art["s3"]["key"].startswith(f"{name}/")
    consumed = nodes["consume"]["inputs"]
    assert consumed["parameters"] == [
        {"name": "given", "value": "42"},
        {"name": "fallback", "value": "dflt"},
    ]
    assert consumed["artifacts"][0]["s3"]["key"] == art["s3"]["key"]


def test_a_failing_leaf_fails_the_workflow_and_omits_dependents(
    fleet: Fleet, run_on: RunOn
) -> None:
    name = unique("fail")
    templates = diamond("1s")
    templates.append(leaf("bad", annotations={f"{DOMAIN}/sandbox-fail": "true"}))
    templates[0]["dag"]["tasks"][1]["template"] = "bad"
    run_on("site-b", workflow(name, templates))
    status = fleet.wait_phase(name)
    assert status["phase"] == "Failed"
    nodes = fleet.nodes_by_display(status)
    assert nodes["B"]["phase"] == "Failed" and nodes["B"]["outputs"]["exitCode"] == "1"
    assert nodes["C"]["phase"] == "Succeeded"
    assert nodes["D"]["phase"] == "Omitted"
    assert status["progress"] == "2/3"


def test_retry_strategy_limit_is_honoured(fleet: Fleet, run_on: RunOn) -> None:
    flaky = unique("retry-ok")
    flaky_leaf = leaf(
        "main", annotations={f"{DOMAIN}/sandbox-fail-attempts": "2"}, retryStrategy={"limit": "3"}
    )
    run_on("site-b", workflow(flaky, [flaky_leaf]))
    status = fleet.wait_phase(flaky)
    assert status["phase"] == "Succeeded"
    root = status["nodes"][flaky]
    assert root["type"] == "Retry" and len(root["children"]) == 3
    assert [status["nodes"][c]["phase"] for c in root["children"]] == [
        "Failed",
        "Failed",
        "Succeeded",
    ]

    hopeless = unique("retry-no")
    bad_leaf = leaf(
        "main", annotations={f"{DOMAIN}/sandbox-fail": "true"}, retryStrategy={"limit": 1}
    )
    run_on("site-b", workflow(hopeless, [bad_leaf]))
    status = fleet.wait_phase(hopeless)
    assert status["phase"] == "Failed"
    assert len(status["nodes"][hopeless]["children"]) == 2


def test_when_conditions_skip_steps(fleet: Fleet, run_on: RunOn) -> None:
    name = unique("when")
    templates = [
        {
            "name": "main",
            "steps": [
                [{"name": "flip", "template": "flip"}],
                [
                    {
                        "name": "heads",
                        "template": "work",
                        "when": "{{steps.flip.outputs.result}} == heads",
                    },
                    {
                        "name": "tails",
                        "template": "work",
                        "when": "{{steps.flip.outputs.result}} == tails",
                    },
                ],
            ],
        },
        {
            "name": "flip",
            "metadata": {"annotations": {f"{DOMAIN}/sandbox-result": "tails"}},
            "script": {"image": "python", "source": "print('tails')"},
        },
        leaf("work"),
    ]
    run_on("site-b", workflow(name, templates))
    status = fleet.wait_phase(name)
    assert status["phase"] == "Succeeded"
    nodes = fleet.nodes_by_display(status)
    assert nodes["heads"]["phase"] == "Skipped"
    assert nodes["tails"]["phase"] == "Succeeded"
    assert nodes["flip"]["outputs"]["result"] == "tails"


def test_leaves_wait_pending_while_the_cluster_is_full(
    sandbox: SandboxServer, fleet: Fleet, run_on: RunOn
) -> None:
    summary = fleet.cluster("site-a")["status"]["resourceSummary"]
    free = int(summary["allocatable"]["cpu"]) - int(summary["allocated"]["cpu"])
    name = unique("queue")
    templates = [
        {
            "name": "main",
            "dag": {
                "tasks": [{"name": "one", "template": "hog"}, {"name": "two", "template": "hog"}]
            },
        },
        leaf("hog", cpu=str(free), duration="1h"),
    ]
    run_on("site-a", workflow(name, templates))

    def one_running_one_pending() -> dict[str, Any] | None:
        nodes = fleet.nodes_by_display(fleet.live_status("site-a", name))
        phases = sorted(nodes[t]["phase"] for t in ("one", "two") if t in nodes)
        return nodes if phases == ["Pending", "Running"] else None

    nodes = sandbox.wait_for(one_running_one_pending, what="one Running, one Pending")
    pending = next(n for n in nodes.values() if n["phase"] == "Pending")
    assert "Insufficient cpu" in pending["message"]
    # The Cluster shows the queued request as allocating (it is written a tick later).
    sandbox.wait_for(
        lambda: fleet.cluster("site-a")["status"]["resourceSummary"]["allocating"].get("cpu")
        == str(free),
        what="allocating cpu on site-a",
    )


def test_a_pod_too_big_for_the_cluster_does_not_hold_the_others(
    sandbox: SandboxServer, fleet: Fleet, run_on: RunOn
) -> None:
    # kube-scheduler sets an unschedulable pod aside and schedules the next: a step that can
    # never fit a site (a failover's, a stopped run's left over) must not block every later
    # step there.
    # More than the whole site: it can never be scheduled, whatever else runs there.
    whole = int(fleet.cluster("site-a")["status"]["resourceSummary"]["allocatable"]["cpu"])
    big, small = unique("big"), unique("small")
    run_on("site-a", workflow(big, [leaf("main", cpu=str(whole + 1), duration="1h")]))

    def refused() -> bool:
        node = fleet.nodes_by_display(fleet.live_status("site-a", big)).get(big) or {}
        return "Insufficient cpu" in str(node.get("message"))

    sandbox.wait_for(refused, what="the big step refused for cpu")
    # No CPU asked: it fits whatever an earlier test of the session still holds at site-a.
    run_on("site-a", workflow(small, [leaf("main")]))
    assert fleet.wait_phase(small)["phase"] == "Succeeded"
    nodes = fleet.nodes_by_display(fleet.live_status("site-a", big))
    assert nodes[big]["phase"] == "Pending"


def test_terminate_stops_running_work(
    fleet: Fleet, custom: client.CustomObjectsApi, sandbox: SandboxServer, run_on: RunOn
) -> None:
    name = unique("term")
    run_on(
        "site-b", workflow(name, [leaf("main", duration="1h"), leaf("cleanup")], onExit="cleanup")
    )
    sandbox.wait_for(
        lambda: fleet.nodes_by_display(fleet.live_status("site-b", name)).get(name, {}).get("phase")
        == "Running",
        what="running",
    )
    custom.patch_namespaced_custom_object(
        "argoproj.io", "v1alpha1", NS, "workflows", name, {"spec": {"shutdown": "Terminate"}}
    )
    status = fleet.wait_phase(name)
    assert status["phase"] == "Failed"
    assert status["message"] == "Stopped with strategy 'Terminate'"
    assert status["nodes"][name]["phase"] == "Failed"
    assert f"{name}.onExit" not in {n["name"] for n in status["nodes"].values()}


def test_stop_runs_the_exit_handler(
    fleet: Fleet, custom: client.CustomObjectsApi, sandbox: SandboxServer, run_on: RunOn
) -> None:
    name = unique("stop")
    run_on(
        "site-b", workflow(name, [leaf("main", duration="1h"), leaf("cleanup")], onExit="cleanup")
    )
    sandbox.wait_for(
        lambda: fleet.nodes_by_display(fleet.live_status("site-b", name)).get(name, {}).get("phase")
        == "Running",
        what="running",
    )
    custom.patch_namespaced_custom_object(
        "argoproj.io", "v1alpha1", NS, "workflows", name, {"spec": {"shutdown": "Stop"}}
    )
    status = fleet.wait_phase(name)
    assert status["phase"] == "Failed"
    assert status["message"] == "Stopped with strategy 'Stop'"
    exit_node = next(n for n in status["nodes"].values() if n["name"] == f"{name}.onExit")
    assert exit_node["phase"] == "Succeeded"


def test_suspend_waits_for_resume(sandbox: SandboxServer, fleet: Fleet, run_on: RunOn) -> None:
    name = unique("susp")
    templates = [
        {
            "name": "main",
            "steps": [
                [{"name": "approve", "template": "approve"}],
                [{"name": "after", "template": "work"}],
            ],
        },
        {"name": "approve", "suspend": {}},
        leaf("work"),
    ]
    run_on("site-b", workflow(name, templates))
    sandbox.wait_for(
        lambda: fleet.nodes_by_display(fleet.member_status(name)).get("approve", {}).get("phase")
        == "Running",
        what="suspended",
    )
    assert fleet.member_status(name)["phase"] == "Running"
    assert "after" not in fleet.nodes_by_display(fleet.member_status(name))
    assert sandbox.resume(NS, name) >= 1
    assert fleet.wait_phase(name)["phase"] == "Succeeded"


def test_active_deadline_fails_a_workflow_that_runs_too_long(
    sandbox: SandboxServer, fleet: Fleet, run_on: RunOn
) -> None:
    name = unique("deadline")
    run_on("site-b", workflow(name, [leaf("main", duration="1h")], activeDeadlineSeconds=30))
    status = fleet.wait_phase(name)
    assert status["phase"] == "Failed"
    assert status["message"] == "Max duration limit exceeded"
    assert status["nodes"][name]["message"] == "Step exceeded its deadline"


def test_label_changes_reach_the_member_copy(
    sandbox: SandboxServer, fleet: Fleet, custom: client.CustomObjectsApi, run_on: RunOn
) -> None:
    name = unique("relabel")
    run_on("site-b", workflow(name, [leaf("main")]))
    fleet.scheduled_to(name)
    custom.patch_namespaced_custom_object(
        "argoproj.io", "v1alpha1", NS, "workflows", name, {"metadata": {"labels": {"extra": "yes"}}}
    )

    def relabelled() -> bool:
        return any(
            w["metadata"]["name"] == name and w["metadata"]["labels"].get("extra") == "yes"
            for w in sandbox.member_workflows("site-b")
        )

    sandbox.wait_for(relabelled, what="label on the member copy")
