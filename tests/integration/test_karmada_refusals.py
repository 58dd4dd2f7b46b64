"""Karmada refusing a step reaches the unit, end to end: submitted over HTTP with an API key,
run by the portal (PostgreSQL, Redis, a Celery worker with beat, the watcher) on a sandbox that
really runs the steps. A step decided for a site that is then cordoned (`karmadactl cordon`'s
taint), claimed by a policy whose affinity no cluster matches, or refused by the member: its
unit says why as soon as the binding shows it, the run has an event, and after the site's
grace it is placed again where it can run, with a decision saying why."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from django.conf import settings
from django.contrib.auth.models import User
from kubernetes import client

from placement.models import PlacementRule
from tests.fixtures_stack import Stack, wait_for

pytestmark = [pytest.mark.integration]

CORDON = {"key": "cluster.karmada.io/unschedulable", "effect": "NoSchedule"}
DOMAIN = "portal.multisite.io"


@dataclass
class Member:
    """The demo's scientist over HTTP with an API key."""

    url: str
    key: str

    def call(
        self, method: str, path: str, body: str | None = None, kind: str = "application/yaml"
    ) -> Any:
        request = urllib.request.Request(
            f"{self.url}{path}",
            data=body.encode() if body is not None else None,
            method=method,
            headers={"Authorization": f"Token {self.key}", "Content-Type": kind},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)

    def unit(self, run_id: int, name: str) -> dict[str, Any]:
        return dict(self.call("GET", f"/api/v1/runs/{run_id}/units/{name}/"))


@pytest.fixture
def member(live_executing: Stack, api_key_for: Callable[[User], str]) -> Member:
    user = User.objects.get(username="scientist")
    portal = live_executing.env["PORTAL_WEBHOOK_URL"].split("/webhooks/")[0]
    return Member(portal, api_key_for(user))


@pytest.fixture
def custom(live_executing: Stack) -> Iterator[client.CustomObjectsApi]:
    """Karmada as an operator reaches it; every cluster uncordoned after the test (the stack's
    sandbox outlives it)."""
    api = client.CustomObjectsApi(live_executing.sandbox.api_client())
    yield api
    for site in ("site-a", "site-b", "site-c"):
        api.patch_cluster_custom_object(
            "cluster.karmada.io", "v1alpha1", "clusters", site, {"spec": {"taints": []}}
        )


def two_steps() -> str:
    """``a`` (at site-c, suspended until the test resumes it) then ``b`` (site-a or site-b,
    decided at submission): ``b``'s step workflow is created only once ``a`` ends."""
    for name, task, sites in (("pin-a", "a", ["site-c"]), ("pin-b", "b", ["site-a", "site-b"])):
        PlacementRule.objects.update_or_create(
            name=name,
            defaults={
                "order": 1,
                "selector": {"task": task},
                "timing": "submit",
                "effect": "pin",
                "parameters": {"sites": sites},
            },
        )
    step = {"image": "alpine:3.19", "command": ["sh", "-c"]}
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "refused-"},
            "spec": {
                "entrypoint": "main",
                "templates": [
                    {
                        "name": "main",
                        "dag": {
                            "tasks": [
                                {"name": "a", "template": "slow"},
                                {"name": "b", "template": "quick", "depends": "a"},
                            ]
                        },
                    },
                    {"name": "slow", "suspend": {}},
                    {"name": "quick", "container": {**step, "args": ["echo b"]}},
                ],
            },
        }
    )


def submit(member: Member) -> tuple[int, str]:
    run = member.call("POST", "/api/v1/runs/?project=eo-demo", two_steps())
    run_id = int(run["id"])
    site = member.unit(run_id, "b")["site"]
    assert site in ("site-a", "site-b"), site
    wait_for(lambda: member.unit(run_id, "a")["phase"] == "Running", 120, "a suspended")
    return run_id, site


def resume_a(member: Member, run_id: int) -> None:
    member.call("POST", f"/api/v1/runs/{run_id}/resume/", '{"node": "a"}', "application/json")


def refused(member: Member, run_id: int, words: str) -> dict[str, Any]:
    def says() -> dict[str, Any] | None:
        unit = member.unit(run_id, "b")
        return unit if words in unit["message"] else None

    return wait_for(says, 120, f"b's message to say {words!r}")


def replaced(stack: Stack, member: Member, run_id: int, first: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        run = member.call("GET", f"/api/v1/runs/{run_id}/")
        return run if run["finished_at"] else None

    try:
        run = wait_for(done, 180, "the run to finish")
    except AssertionError:
        raise AssertionError(
            f"{member.unit(run_id, 'b')}\n--- worker\n{stack.log('worker')}"
        ) from None
    assert run["status"] == "Succeeded", run
    unit = member.unit(run_id, "b")
    assert unit["site"] != first and unit["attempt"] == 2, unit
    assert unit["message"] == "" and unit["waiting_for"] == ""
    assert [a["site"] for a in unit["attempts"]] == [first, unit["site"]]
    return unit


def decisions_of_b(member: Member, run_id: int) -> list[tuple[int, str, str]]:
    rows = member.call("GET", f"/api/v1/runs/{run_id}/decisions/")
    return [(d["attempt"], d["site"], d["reason"]) for d in rows if d["unit"] == "b"]


def events_of_b(member: Member, run_id: int, kind: str) -> list[str]:
    rows = member.call("GET", f"/api/v1/runs/{run_id}/events/")
    return [e["message"] for e in rows if e["unit"] == "b" and e["kind"] == kind]


def test_a_step_decided_for_a_cordoned_site_says_so_and_is_placed_again(
    live_executing: Stack, member: Member, custom: client.CustomObjectsApi
) -> None:
    run_id, site = submit(member)
    # karmadactl cordon site (pkg/karmadactl/cordon/cordon.go): the taint, nothing else.
    custom.patch_cluster_custom_object(
        "cluster.karmada.io", "v1alpha1", "clusters", site, {"spec": {"taints": [CORDON]}}
    )
    resume_a(member, run_id)
    unit = refused(member, run_id, "is cordoned")
    assert unit["phase"] == "Pending" and unit["site"] == site and unit["attempt"] == 1
    assert unit["message"].startswith(
        f"{site} is cordoned (cluster.karmada.io/unschedulable). "
        "Karmada: Scheduled=False, NoClusterFit: 0/3 clusters are available: "
        "1 cluster(s) had untolerated taint {cluster.karmada.io/unschedulable:NoSchedule}"
    ), unit["message"]
    assert f"{site} is cordoned (cluster.karmada.io/unschedulable)" in unit["waiting_for"]
    assert "image pulls" not in unit["waiting_for"]
    assert events_of_b(member, run_id, "karmada-refused") == [f"b: {unit['message']}"]

    placed = replaced(live_executing, member, run_id, site)
    decisions = decisions_of_b(member, run_id)
    assert [(a, s) for a, s, _ in decisions] == [(1, site), (2, placed["site"])]
    assert decisions[1][2].startswith(
        f"re-placed: Karmada could not schedule to {site}: cordoned; "
    ), decisions
    # Said once, re-placed once, whatever the number of watch events and resyncs.
    assert len(events_of_b(member, run_id, "karmada-refused")) == 1
    assert len(events_of_b(member, run_id, "failover")) == 1


def test_a_step_whose_policy_matches_no_cluster_says_so_and_is_placed_again(
    live_executing: Stack, member: Member, custom: client.CustomObjectsApi
) -> None:
    run_id, site = submit(member)
    ns = settings.KARMADA_NAMESPACE
    # An operator's policy, above the portal's, claiming b's step workflow for gold clusters,
    # of which the fleet has none.
    custom.create_namespaced_custom_object(
        "policy.karmada.io",
        "v1alpha1",
        ns,
        "propagationpolicies",
        {
            "apiVersion": "policy.karmada.io/v1alpha1",
            "kind": "PropagationPolicy",
            "metadata": {"name": f"gold-only-{run_id}"},
            "spec": {
                "priority": 1000,
                "resourceSelectors": [
                    {
                        "apiVersion": "argoproj.io/v1alpha1",
                        "kind": "Workflow",
                        "labelSelector": {
                            "matchLabels": {f"{DOMAIN}/run": str(run_id), f"{DOMAIN}/site": site}
                        },
                    }
                ],
                "placement": {
                    "clusterAffinity": {"labelSelector": {"matchLabels": {"tier": "gold"}}}
                },
            },
        },
    )
    try:
        resume_a(member, run_id)
        unit = refused(member, run_id, "no cluster matches the affinity")
        assert unit["message"].startswith(
            f"no cluster matches the affinity (labels tier=gold) of PropagationPolicy "
            f"{ns}/gold-only-{run_id}. Karmada: Scheduled=False, NoClusterFit: "
            "0/3 clusters are available: "
            "3 cluster(s) did not match the placement cluster affinity constraint."
        ), unit["message"]
        assert "no cluster matches the affinity" in unit["waiting_for"]
        replaced(live_executing, member, run_id, site)
        reason = decisions_of_b(member, run_id)[-1][2]
        assert reason.startswith(
            f"re-placed: Karmada could not schedule to {site}: no cluster matches the affinity; "
        ), reason
    finally:
        custom.delete_namespaced_custom_object(
            "policy.karmada.io", "v1alpha1", ns, "propagationpolicies", f"gold-only-{run_id}"
        )


def test_a_work_the_member_refuses_shows_the_members_message(
    live_executing: Stack, member: Member
) -> None:
    run_id, site = submit(member)
    said = "exceeded quota: workflows-per-namespace, requested: workflows=1, limited: workflows=0"
    live_executing.sandbox.fault("member-refuse", site=site, message=said)
    resume_a(member, run_id)
    unit = refused(member, run_id, said)
    assert unit["message"] == (
        f"{site} refused the Work: Failed to apply all manifests (0/1): {said}"
    ), unit["message"]
    assert unit["phase"] == "Pending"
    assert f"{site} refused the Work" in unit["waiting_for"]
    replaced(live_executing, member, run_id, site)
    reason = decisions_of_b(member, run_id)[-1][2]
    assert reason.startswith(f"re-placed: {site} refused the Work: "), reason
