"""A member's quota on pods, counted per Workflow: a pod past it is refused as kube-apiserver
refuses it, and Argo keeps the node Pending with that message and creates the pod once one of
the Workflow's pods ends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from sandbox.argo.expr import fnv32a
from sandbox.fleet import DEMO_FLEET, Site
from tests.fixtures_sandbox import SandboxServer, sandbox_on_fleet

QUOTA = 2


@pytest.fixture(scope="module")
def small_quota(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxServer]:
    fleet = yaml.safe_load(DEMO_FLEET.read_text())
    for site in fleet["sites"]:
        site["podsPerWorkflow"] = QUOTA
    with sandbox_on_fleet(tmp_path_factory.mktemp("quota"), fleet) as server:
        yield server


def fan_out(name: str, items: int, seconds: int) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {
                    "name": "main",
                    "steps": [[{"name": "s", "template": "work", "withItems": list(range(items))}]],
                },
                {
                    "name": "work",
                    "metadata": {
                        "annotations": {"portal.multisite.io/sandbox-duration": f"{seconds}s"}
                    },
                    "container": {"image": "alpine"},
                },
            ],
        },
    }


def leaves(server: SandboxServer, name: str) -> list[dict[str, Any]]:
    (wf,) = [w for w in server.member_workflows("site-b") if w["metadata"]["name"] == name]
    return [n for n in (wf.get("status") or {}).get("nodes", {}).values() if n["type"] == "Pod"]


def test_a_pod_past_the_quota_is_refused_and_created_when_one_ends(
    small_quota: SandboxServer,
) -> None:
    small_quota.request("POST", "/_sandbox/members/site-b/workflows", fan_out("quota-a", 3, 3000))

    def refused() -> dict[str, Any] | None:
        nodes = leaves(small_quota, "quota-a")
        running = [n for n in nodes if n["phase"] == "Running"]
        pending = [n for n in nodes if n["phase"] == "Pending" and n.get("message")]
        return pending[0] if len(running) == QUOTA and len(pending) == 1 else None

    waiting = small_quota.wait_for(refused, what="two pods running and one refused")
    # The pod's own name, as Argo's default (v2) names it: <workflow>-<template>-<hash>.
    pod = f"quota-a-{waiting['templateName']}-{fnv32a(waiting['name'])}"
    assert waiting["message"] == (
        f'pods "{pod}" is forbidden: exceeded quota: pods-per-workflow, '
        f"requested: pods=1, used: pods={QUOTA}, limited: pods={QUOTA}"
    )
    assert small_quota.state()["members"]["site-b"]["pods"] == QUOTA

    def done() -> list[dict[str, Any]] | None:
        nodes = leaves(small_quota, "quota-a")
        return nodes if nodes and all(n["phase"] == "Succeeded" for n in nodes) else None

    nodes = small_quota.wait_for(done, timeout=60, what="every pod to have run")
    assert len(nodes) == 3
    # The refused one ran once another had ended, and says nothing of the refusal any more.
    last = next(n for n in nodes if n["id"] == waiting["id"])
    assert "message" not in last
    assert last["startedAt"] >= min(n["finishedAt"] for n in nodes if n is not last)
    assert small_quota.state()["members"]["site-b"]["pods"] == 0


def test_the_quota_is_a_fleet_file_setting_per_site() -> None:
    assert Site.from_dict({"name": "x"}).pods_per_workflow == 100
    assert Site.from_dict({"name": "x", "podsPerWorkflow": 7}).pods_per_workflow == 7
    with pytest.raises(ValueError, match="podsPerWorkflow"):
        Site.from_dict({"name": "x", "podsPerWorkflow": 0})
