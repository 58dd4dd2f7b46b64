"""Faults on demand, over HTTP and through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from tests.fixtures_sandbox import REPO_ROOT, SandboxHTTPError, SandboxServer
from tests.sandbox.conftest import SITE_LABEL, Fleet, leaf, site_policy, unique, workflow

RunOn = Callable[..., dict[str, Any]]


def ready(fleet: Fleet, site: str) -> str:
    cond = next(c for c in fleet.cluster(site)["status"]["conditions"] if c["type"] == "Ready")
    return str(cond["status"])


def test_a_not_ready_site_is_reported_and_not_scheduled_to(
    sandbox: SandboxServer, fleet: Fleet
) -> None:
    fault = sandbox.fault("site-not-ready", site="site-b")
    sandbox.wait_for(lambda: ready(fleet, "site-b") == "False", what="site-b NotReady")
    taints = fleet.cluster("site-b")["spec"]["taints"]
    assert [t["key"] for t in taints] == ["cluster.karmada.io/not-ready"]
    fleet.create_policy(site_policy("site-b"))
    name = unique("nr")
    fleet.create_workflow(workflow(name, [leaf("main")], labels={SITE_LABEL: "site-b"}))
    rb = sandbox.wait_for(lambda: (fleet.binding(name) or {}).get("status"), what="binding")
    assert not (fleet.binding(name) or {})["spec"].get("clusters")
    # Karmada filters by the taint the cluster controller added, not by the condition.
    assert (
        "1 cluster(s) had untolerated taint {cluster.karmada.io/not-ready:NoSchedule}"
        in rb["conditions"][0]["message"]
    )
    sandbox.clear_fault(fault["id"])
    sandbox.wait_for(lambda: ready(fleet, "site-b") == "True", what="site-b Ready again")
    assert not fleet.cluster("site-b")["spec"].get("taints")
    assert fleet.scheduled_to(name) == "site-b"


def test_an_unreachable_pull_site_goes_unknown_and_stops_reporting(
    sandbox: SandboxServer, fleet: Fleet, run_on: RunOn
) -> None:
    """site-c is a pull-mode cluster: its agent stops posting status, and after the grace
    period the cluster controller sets Ready=Unknown and the unreachable taint."""
    name = unique("unr")
    run_on("site-c", workflow(name, [leaf("main", duration="300s")]))
    sandbox.wait_for(lambda: fleet.member_status(name).get("phase") == "Running", what="running")
    sandbox.fault("site-unreachable", site="site-c")
    sandbox.wait_for(lambda: ready(fleet, "site-c") == "Unknown", what="site-c Unknown")
    cluster = fleet.cluster("site-c")
    cond = next(c for c in cluster["status"]["conditions"] if c["type"] == "Ready")
    assert cond["reason"] == "ClusterStatusUnknown"
    assert [(t["key"], t["effect"]) for t in cluster["spec"]["taints"]] == [
        ("cluster.karmada.io/unreachable", "NoSchedule")
    ]
    frozen_rv = cluster["metadata"]["resourceVersion"]
    # The member finishes the work, but nothing of it reaches the control plane.
    sandbox.wait_for(
        lambda: fleet.live_status("site-c", name).get("phase") == "Succeeded",
        what="member finished",
    )
    assert fleet.member_status(name)["phase"] == "Running"
    assert fleet.cluster("site-c")["metadata"]["resourceVersion"] == frozen_rv
    sandbox.clear_faults()
    assert fleet.wait_phase(name)["phase"] == "Succeeded"
    sandbox.wait_for(lambda: not fleet.cluster("site-c")["spec"].get("taints"), what="untainted")


def test_an_unreachable_push_site_is_not_ready(sandbox: SandboxServer, fleet: Fleet) -> None:
    """site-b is push-mode: the control plane probes it and reports it not reachable."""
    sandbox.fault("site-unreachable", site="site-b")
    sandbox.wait_for(lambda: ready(fleet, "site-b") == "False", what="site-b NotReady")
    cluster = fleet.cluster("site-b")
    cond = next(c for c in cluster["status"]["conditions"] if c["type"] == "Ready")
    assert (cond["reason"], cond["message"]) == ("ClusterNotReachable", "cluster is not reachable")
    assert [t["key"] for t in cluster["spec"]["taints"]] == ["cluster.karmada.io/not-ready"]


def test_the_api_answers_500_for_a_number_of_requests(
    sandbox: SandboxServer, core: client.CoreV1Api
) -> None:
    sandbox.fault("api-error", status=500, count=2)
    for _ in range(2):
        with pytest.raises(client.ApiException) as err:
            core.list_namespace()
        assert err.value.status == 500
        assert json.loads(err.value.body)["reason"] == "InternalError"
    assert core.list_namespace().items


def test_the_api_answers_slowly_for_a_while(sandbox: SandboxServer, core: client.CoreV1Api) -> None:
    sandbox.fault("api-slow", delay=0.5, duration=30)
    started = time.monotonic()
    core.list_namespace()
    assert time.monotonic() - started >= 0.5
    sandbox.clear_faults()
    assert sandbox.faults() == []


def test_a_named_workflow_fails(sandbox: SandboxServer, fleet: Fleet, run_on: RunOn) -> None:
    doomed, fine = unique("doomed"), unique("fine")
    sandbox.fault("workflow-fail", workflow=doomed, message="disk full")
    run_on("site-b", workflow(doomed, [leaf("main")]))
    run_on("site-b", workflow(fine, [leaf("main")]))
    failed = fleet.wait_phase(doomed)
    assert failed["phase"] == "Failed"
    assert failed["nodes"][doomed]["message"] == "disk full"
    assert fleet.wait_phase(fine)["phase"] == "Succeeded"


def test_unknown_faults_are_rejected(sandbox: SandboxServer) -> None:
    with pytest.raises(SandboxHTTPError) as err:
        sandbox.fault("meteor-strike")
    assert err.value.status == 400
    with pytest.raises(SandboxHTTPError) as err:
        sandbox.fault("site-not-ready")
    assert err.value.status == 400 and "site" in err.value.body["message"]


def test_the_cli_injects_lists_and_clears_faults(sandbox: SandboxServer) -> None:
    def cli(*args: str) -> Any:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "sandbox",
                "fault",
                "--kubeconfig",
                str(sandbox.kubeconfig),
                *args,
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return json.loads(out.stdout)

    added = cli("site-unreachable", "--site", "site-a", "--duration", "60")
    assert added["type"] == "site-unreachable" and added["site"] == "site-a"
    assert [f["id"] for f in sandbox.faults()] == [added["id"]]
    cli("clear")
    assert sandbox.faults() == []
