"""Stop ends the work nested inside a unit at once: a run whose one unit is a fan-out of
fan-outs of sleeping steps, on the executing sandbox through the portal, stopped over REST by
an ordinary project member: the member's pods are killed and none is created after."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from portal.models import UnitRun, WorkflowRun
from tests.fixtures_stack import Stack, wait_for

pytestmark = [pytest.mark.integration]

# Divided by the sandbox's time scale, still far longer than any test: only a kill ends it.
SLEEP = "3600017"


def nested_sleepers() -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "nested-stop-"},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {"name": "main", "dag": {"tasks": [{"name": "fan", "template": "outer"}]}},
                {
                    "name": "outer",
                    "steps": [[{"name": "o", "template": "inner", "withItems": [0, 1]}]],
                },
                {
                    "name": "inner",
                    "steps": [[{"name": "i", "template": "sleep", "withSequence": {"count": "3"}}]],
                },
                {
                    "name": "sleep",
                    "container": {"image": "alpine:3.23", "command": ["sleep", SLEEP]},
                },
            ],
        },
    }


def sleepers_alive() -> int:
    """The steps' own processes (the sandbox's time-scaled ``sleep``), not the bubblewrap
    processes whose command lines carry them."""
    count = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        count += args[-2:] == [SLEEP.encode(), b""] and args[-3].endswith(b"/sleep")
    return count


def pods(stack: Stack) -> int:
    return sum(m["pods"] for m in stack.sandbox.state()["members"].values())


def test_stop_kills_a_units_nested_fan_out_at_once(live_executing: Stack) -> None:
    api = APIClient()
    api.force_authenticate(User.objects.get(username="scientist"))
    response = api.post(
        "/api/v1/runs/", {"manifest": nested_sleepers(), "project": "eo-demo"}, format="json"
    )
    assert response.status_code == 201, response.content
    run_id = response.json()["id"]
    (unit,) = UnitRun.objects.filter(run_id=run_id)
    assert unit.name == "fan"

    wait_for(lambda: pods(live_executing) == 6, 120, "the unit's six pods to run")
    wait_for(lambda: sleepers_alive() == 6, 60, "six sleeping processes")

    response = api.post(f"/api/v1/runs/{run_id}/stop/", {"strategy": "Terminate"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "Stopped"

    wait_for(lambda: pods(live_executing) == 0, 60, "the member's pods to be gone")
    assert sleepers_alive() == 0
    unit.refresh_from_db()
    (step,) = [
        w
        for site in ("site-a", "site-b", "site-c")
        for w in live_executing.sandbox.member_workflows(site)
        if w["metadata"]["name"] == unit.workflow_name
    ]
    status = step["status"]
    assert status["phase"] == "Failed"
    assert status["message"] == "Stopped with strategy 'Terminate'"
    leaves = [n for n in status["nodes"].values() if n["type"] == "Pod"]
    assert len(leaves) == 6  # none created after the stop
    assert all(n["phase"] == "Failed" for n in leaves)
    assert WorkflowRun.objects.get(pk=run_id).status == "Stopped"
