"""Karmada's cluster proxy as karmada-aggregated-apiserver serves it: pod logs and
Workflows at a member, resuming through it, following a log, pull-mode clusters and
unreachable ones (sandbox/karmada/proxy.py)."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_sandbox import SandboxHTTPError, SandboxServer, start_sandbox
from tests.sandbox.conftest import NS, PROXY, Fleet, leaf, proxied_workflow, unique, workflow

WF = ("argoproj.io", "v1alpha1")
RunOn = Callable[..., dict[str, Any]]


def pod_of(fleet: Fleet, name: str) -> str:
    nodes = fleet.member_status(name).get("nodes") or {}
    return next(n["id"] for n in nodes.values() if n["type"] == "Pod")


def test_pod_logs_and_workflows_through_the_cluster_proxy(
    sandbox: SandboxServer, fleet: Fleet, run_on: RunOn
) -> None:
    name = unique("logs")
    tmpl = leaf("main", annotations={sandbox.annotation("result"): "line one\nline two"})
    run_on("site-b", workflow(name, [tmpl]))
    assert fleet.wait_phase(name)["phase"] == "Succeeded"
    pod = pod_of(fleet, name)
    base = PROXY.format(cluster="site-b") + f"/api/v1/namespaces/{NS}/pods/{pod}/log"
    log = sandbox.request("GET", base + "?container=main")
    assert "line one\nline two\n" in log
    assert sandbox.request("GET", base + "?container=main&tailLines=1").count("\n") == 1
    with pytest.raises(SandboxHTTPError) as err:
        sandbox.request(
            "GET", PROXY.format(cluster="site-b") + f"/api/v1/namespaces/{NS}/pods/nope/log"
        )
    assert err.value.status == 404
    wf = proxied_workflow(sandbox, "site-b", name)
    assert wf is not None and wf["status"]["phase"] == "Succeeded"
    assert wf["metadata"]["labels"]["karmada.io/managed"] == "true"


def test_argo_resume_through_the_cluster_proxy_needs_the_version_it_read(
    sandbox: SandboxServer, fleet: Fleet, run_on: RunOn
) -> None:
    """A PUT as ``argo resume`` writes it (Suspend nodes marked Succeeded) resumes the node;
    one carrying a resourceVersion older than the member's is a 409, as any update is."""
    name = unique("gate")
    run_on("site-b", workflow(name, [{"name": "main", "suspend": {}}]))
    path = PROXY.format(cluster="site-b") + f"/apis/argoproj.io/v1alpha1/namespaces/{NS}/workflows/"

    def suspended() -> dict[str, Any] | None:
        wf = proxied_workflow(sandbox, "site-b", name)
        nodes = ((wf or {}).get("status") or {}).get("nodes") or {}
        running = [n for n in nodes.values() if n["type"] == "Suspend" and n["phase"] == "Running"]
        return wf if running else None

    def resumed(version: str | None = None) -> None:
        wf = sandbox.wait_for(suspended, what="the suspended node")
        for node in wf["status"]["nodes"].values():
            if node["type"] == "Suspend":
                node["phase"] = "Succeeded"
        if version is not None:
            wf["metadata"]["resourceVersion"] = version
        sandbox.request("PUT", path + name, wf)

    with pytest.raises(SandboxHTTPError) as err:
        resumed(version="0")
    assert err.value.status == 409
    assert suspended() is not None  # the refused update resumed nothing
    for _ in range(5):  # as ResumeWorkflow does: read again and retry on a conflict
        try:
            resumed()
            break
        except SandboxHTTPError as exc:
            assert exc.status == 409
    assert fleet.wait_phase(name)["phase"] == "Succeeded"


def test_following_a_pod_log_streams_until_the_pod_ends(
    sandbox: SandboxServer, fleet: Fleet, run_on: RunOn
) -> None:
    name = unique("follow")
    tmpl = leaf("main", duration="1500s", annotations={sandbox.annotation("result"): "done"})
    run_on("site-b", workflow(name, [tmpl]))  # 1.5 s here

    def running_pod() -> str | None:
        nodes = fleet.live_status("site-b", name).get("nodes") or {}
        return next(
            (n["id"] for n in nodes.values() if n["type"] == "Pod" and n["phase"] == "Running"),
            None,
        )

    pod = sandbox.wait_for(running_pod, what="a running pod")
    url = sandbox.url + PROXY.format(cluster="site-b")
    url += f"/api/v1/namespaces/{NS}/pods/{pod}/log?follow=true"
    started = time.monotonic()
    with urllib.request.urlopen(url, timeout=30) as resp:
        text = resp.read().decode()
    # The stream stays open while the pod runs and ends when it does, with what the pod
    # printed (a simulated pod prints its result) arriving on the same stream.
    assert text == "done\n"
    assert time.monotonic() - started > 0.2
    assert fleet.live_status("site-b", name)["phase"] == "Succeeded"


def test_a_pull_mode_cluster_reports_its_impersonator_and_is_proxied(
    sandbox: SandboxServer,
) -> None:
    """karmada-agent's default `--report-secrets` includes KubeImpersonator: the demo's
    pull-mode site-c is reachable through the cluster proxy like a push-mode one."""
    listed = sandbox.request(
        "GET",
        PROXY.format(cluster="site-c") + f"/apis/argoproj.io/v1alpha1/namespaces/{NS}/workflows",
    )
    assert listed["kind"] == "WorkflowList"
    with pytest.raises(SandboxHTTPError) as err:
        sandbox.request("GET", PROXY.format(cluster="site-z") + "/api/v1")
    assert err.value.status == 404


def test_a_pull_mode_cluster_registered_without_secrets_has_no_proxy(tmp_path: Path) -> None:
    """`--report-secrets=None` (fleet file: `reportSecrets: None`): no impersonatorSecretRef,
    and the proxy answers as karmada-aggregated-apiserver does."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "sites:\n  - name: site-p\n    syncMode: Pull\n    reportSecrets: None\n"
        "  - name: site-q\n    syncMode: Pull\n"
    )
    server = start_sandbox(tmp_path, extra_args=["--fleet", str(fleet)])
    try:
        with pytest.raises(SandboxHTTPError) as err:
            server.request(
                "GET", PROXY.format(cluster="site-p") + f"/api/v1/namespaces/{NS}/pods/x/log"
            )
        assert err.value.status == 500
        assert err.value.body["reason"] == "Unknown"
        assert err.value.body["message"] == "the impersonatorSecretRef of cluster site-p is nil"
        with pytest.raises(SandboxHTTPError) as err:
            server.request(
                "GET", PROXY.format(cluster="site-q") + f"/api/v1/namespaces/{NS}/pods/x/log"
            )
        assert err.value.status == 404  # proxied: the member has no such pod
    finally:
        server.stop()


def test_an_unreachable_push_cluster_cannot_be_proxied(sandbox: SandboxServer) -> None:
    sandbox.fault("site-unreachable", site="site-b")
    with pytest.raises(SandboxHTTPError) as err:
        sandbox.request(
            "GET",
            PROXY.format(cluster="site-b")
            + f"/apis/argoproj.io/v1alpha1/namespaces/{NS}/workflows",
        )
    assert err.value.status == 500 and "i/o timeout" in err.value.body["message"]
