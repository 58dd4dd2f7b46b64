"""Runtime decisions hold capacity, on the whole stack: the worker creates 24 step workflows
of 8 CPU on the sandbox's karmada-apiserver, which calls the webhook over HTTP for each, as
Karmada does; the watcher drains the decisions and folds the bindings meanwhile."""

from __future__ import annotations

import re
import time
from collections import Counter
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from portal import planning, services
from portal.choices import DecisionSource
from portal.models import PlacementDecision, WorkflowRun
from sandbox.fleet import DEMO_FLEET
from tests.fixtures_stack import Stack, wait_for
from tests.portal.helpers import FAN_OUT_CPU, fan_out

pytestmark = [pytest.mark.integration]

ITEMS = 24
STATUS_PERIOD_S = 11.0  # the sandbox's cluster-status-update-frequency (10 s), and a little
CPU = FAN_OUT_CPU / 1000


def _free_cpu(candidate: dict[str, Any]) -> float:
    """ "free 60 CPU, ..." when the item fits there, "busy: needs 8 CPU, 4 free" when not."""
    found = re.search(r"free (\d+(?:\.\d+)?) CPU|, (\d+(?:\.\d+)?) free", candidate["why"])
    assert found, candidate["why"]
    return float(found.group(1) or found.group(2))


def _idle_free_cpu() -> dict[str, float]:
    """Each demo site's free CPU with nothing of the portal's running: capacity less baseline."""
    sites = yaml.safe_load(DEMO_FLEET.read_text())["sites"]
    return {s["name"]: float(s["capacity"]["cpu"]) - float(s["baseline"]["cpu"]) for s in sites}


def _free_now() -> dict[str, float]:
    """Free CPU per site as every decider sees it now: the sites' figures less every hold
    (the database's and those the webhook and the worker keep in Redis)."""
    fleet = planning.planner_snapshot().fleet
    return {name: s.cpu_free / 1000 for name, s in fleet.site_by_name.items()}


def test_a_burst_of_runtime_items_spreads_over_the_demo_fleet_by_capacity(live: Stack) -> None:
    # The burst is judged against the fleet as it was when it began: what an earlier test's
    # steps held (on a member, or as a decider's hold) comes back only a while after they end.
    idle = _idle_free_cpu()
    # Idle for longer than a member's status period (10 s): a status posted before the
    # sandbox was reset for this module still carries the earlier module's steps.
    steady = {"since": time.monotonic()}

    def idle_and_steady() -> bool:
        if _free_now() != idle:
            steady["since"] = time.monotonic()
        return time.monotonic() - steady["since"] > STATUS_PERIOD_S

    wait_for(idle_and_steady, 120, f"the demo fleet idle ({idle} CPU free) for a status period")
    user = User.objects.get(username="scientist")
    api = APIClient()
    api.force_authenticate(user)
    # Long enough that no item ends (and frees its CPU) while the burst is decided.
    body = fan_out(ITEMS, seconds=1200)
    response = api.post("/api/v1/runs/?project=eo-demo", data=body, content_type="application/yaml")
    assert response.status_code == 201, response.content
    run_id = response.json()["id"]

    def decided() -> list[PlacementDecision]:
        rows = PlacementDecision.objects.filter(run_id=run_id, source=DecisionSource.WEBHOOK)
        # In the order they were taken: each decision that places is queued by the same Redis
        # script that holds its capacity, and the drain writes them in queue order.
        found = list(rows.order_by("id"))
        return found if len(found) >= ITEMS else []

    try:
        decisions = wait_for(decided, 90, "a webhook decision for every item")
    except AssertionError:
        raise AssertionError(f"{live.log('worker')}\n--- watcher\n{live.log('watcher')}") from None
    try:
        _check(decisions)
    finally:
        services.run_stop(user=user, run=WorkflowRun.objects.get(pk=run_id))


def _check(decisions: list[PlacementDecision]) -> None:
    assert len({d.unit_id for d in decisions}) == ITEMS
    start = {c["site"]: _free_cpu(c) for c in decisions[0].candidates}
    placed = Counter(d.site for d in decisions if d.site)
    # Spread by capacity: as many as fit where they fit when the burst began, none over (the
    # rest keep the fallback site the worker gave them, where the member queues them).
    assert placed == {s: int(free // CPU) for s, free in start.items() if free >= CPU}, (
        placed,
        start,
    )
    # Every decision saw the ones before it: the free CPU it gives for the site it chose is
    # what was free when the burst began less 8 for each item placed there before it; no
    # figure rises while the burst lasts.
    earlier: Counter[str] = Counter()
    for d in decisions:
        free = {c["site"]: _free_cpu(c) for c in d.candidates}
        assert all(free[site] <= start[site] for site in free), (free, start)
        if d.site:
            assert free[d.site] == start[d.site] - CPU * earlier[d.site], (d.site, free, start)
            earlier[d.site] += 1
