"""Big fan-outs with every real part: created in turns, other runs
served in between, nothing lost or duplicated when the worker is killed mid fan-out, and a
Karmada outage said on the run."""

from __future__ import annotations

import signal
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User

from portal import services
from portal.models import RunEvent, UnitRun, WorkflowRun
from tests.fixtures_stack import Stack, wait_for

pytestmark = [pytest.mark.integration]

DURATION = "portal.multisite.io/sandbox-duration"


def fan_out_workflow(items: int, seconds: int) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "fan-"},
            "spec": {
                "entrypoint": "main",
                "templates": [
                    {
                        "name": "main",
                        "dag": {
                            "tasks": [
                                {
                                    "name": "tile",
                                    "template": "work",
                                    "arguments": {
                                        "parameters": [{"name": "n", "value": "{{item}}"}]
                                    },
                                    "withItems": list(range(items)),
                                }
                            ]
                        },
                    },
                    {
                        "name": "work",
                        "metadata": {"annotations": {DURATION: f"{seconds}s"}},
                        "inputs": {"parameters": [{"name": "n"}]},
                        "container": {"image": "alpine:3.19", "command": ["true"]},
                    },
                ],
            },
        }
    )


ONE_STEP = yaml.safe_dump(
    {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "one-"},
        "spec": {
            "entrypoint": "hello",
            "templates": [
                {
                    "name": "hello",
                    "metadata": {"annotations": {DURATION: "0s"}},
                    "container": {"image": "alpine:3.19", "command": ["true"]},
                }
            ],
        },
    }
)


@pytest.fixture
def user(live: Stack) -> User:
    return User.objects.get(username="scientist")


def _created(run_id: int) -> int:
    return UnitRun.objects.filter(run_id=run_id).exclude(workflow_name="").count()


def _status(run_id: int) -> str:
    return WorkflowRun.objects.values_list("status", flat=True).get(pk=run_id)


def _each_item_created_once(live: Stack, run: WorkflowRun, items: int) -> None:
    """Every item's step workflow exists on Karmada once, claimed by its unit once."""
    wait_for(lambda: _created(run.pk) == items, 300, "every item's step workflow")
    names = list(
        UnitRun.objects.filter(run=run)
        .filter(expanded=False)
        .values_list("workflow_name", flat=True)
    )
    on_karmada = [w["metadata"]["name"] for w in live.workflows(run.pk)]
    assert len(names) == items and "" not in names
    assert sorted(on_karmada) == sorted(set(on_karmada)) == sorted(names)
    assert not UnitRun.objects.filter(run=run, phase="Error").exists()
    submitted = RunEvent.objects.filter(run=run, kind="unit-submitted").count()
    assert submitted == items  # one claim, hence one event, per unit


def test_a_unit_pending_during_a_karmada_outage_says_why(live: Stack, user: User) -> None:
    fault = live.sandbox.fault("api-error", status=500, duration=600)
    run = services.run_submit(user=user, body=ONE_STEP, project="eo-demo")
    unit = wait_for(
        lambda: UnitRun.objects.filter(run=run, message__startswith="waiting for Karmada").first(),
        60,
        "the unit to say it waits for Karmada",
    )
    assert unit.phase == "Pending"
    assert "500" in unit.message or "unreachable" in unit.message.lower()
    assert RunEvent.objects.filter(run=run, kind="karmada-unavailable").exists()
    live.sandbox.clear_fault(fault["id"])
    wait_for(lambda: _status(run.pk) == "Succeeded", 120, "the run to succeed after the outage")
    assert UnitRun.objects.get(pk=unit.pk).message == ""


def test_a_fan_out_interrupted_by_a_worker_kill_loses_and_duplicates_nothing(
    live: Stack, user: User, settings: Any
) -> None:
    items = 600
    run = services.run_submit(user=user, body=fan_out_workflow(items, 3600), project="eo-demo")
    wait_for(lambda: _created(run.pk) >= 50, 120, "the fan-out to start")
    live.kill("worker", signal.SIGKILL)
    assert _created(run.pk) < items, "the kill came too late to interrupt anything"
    live.start("worker")
    _each_item_created_once(live, run, items)


def test_a_one_step_run_behind_a_5000_unit_run_finishes_while_it_fans_out(
    live: Stack, user: User, settings: Any
) -> None:
    """Before: every worker advanced the big run at once and the small one waited minutes.
    Now the big run is created in turns with other runs' advances in between."""
    items = settings.PORTAL_MAX_UNITS
    big = services.run_submit(user=user, body=fan_out_workflow(items, 3600), project="eo-demo")
    small = services.run_submit(user=user, body=ONE_STEP, project="eo-demo")
    wait_for(lambda: _status(small.pk) == "Succeeded", 300, "the one-step run to succeed")
    # Measured in work, not in seconds: the big run was still being created meanwhile.
    assert _created(big.pk) < items
    assert _status(big.pk) in ("Pending", "Running")


def test_a_project_with_several_fan_outs_takes_one_turn_at_a_time(live: Stack, user: User) -> None:
    """Before: every run had a turn of its own, so a project with three fan-outs had three
    turns for another project's one, and the other's finished last. Now each project has one
    continuation at a time: the other project's fan-out is created while the first project's
    are still far from done. Turns of 50 so that each run needs several."""
    from sites.models import Project

    other = Project.objects.create(name="other")
    other.members.add(user)
    items = 240
    live.env["PORTAL_ADVANCE_BATCH"] = "50"
    live.kill("worker", signal.SIGTERM)
    live.start("worker")
    try:
        mine = [
            services.run_submit(user=user, body=fan_out_workflow(items, 3600), project="eo-demo")
            for _ in range(3)
        ]
        theirs = services.run_submit(user=user, body=fan_out_workflow(items, 3600), project="other")
        # Counted from here: what eo-demo created before the other's run existed is not a
        # turn the other waited for (on a busy machine that was up to a few turns' worth).
        before = sum(_created(r.pk) for r in mine)
        wait_for(lambda: _created(theirs.pk) == items, 300, "the other project's fan-out")
        done = sum(_created(r.pk) for r in mine) - before
        # Fair between runs only, the three had as many turns as the other's four: 3 x 240.
        assert done < 2 * items, (
            f"{done} of eo-demo's {3 * items} created meanwhile ({before} before it was submitted)"
        )
    finally:
        live.env.pop("PORTAL_ADVANCE_BATCH")
        # Hour-long fan-outs never end: stopped (Terminate: no exit handler), so no worker or
        # watcher still writes their rows when the database is flushed after the test.
        started = [r.pk for r in [*mine, theirs]] if "theirs" in locals() else []
        for run in WorkflowRun.objects.filter(pk__in=started, finished_at__isnull=True):
            services.run_stop(run=run, user=user, strategy="Terminate")
        live.kill("worker", signal.SIGTERM)
        live.start("worker")
        wait_for(
            lambda: not WorkflowRun.objects.filter(
                pk__in=started, finished_at__isnull=True
            ).exists(),
            300,
            "the fan-outs stopped",
        )


def test_a_karmada_outage_in_the_middle_of_a_fan_out_loses_and_duplicates_nothing(
    live: Stack, user: User
) -> None:
    """Chunks are created while the next chunk's bodies are built: an outage that fails the
    creates of one chunk while another is in flight still leaves every created step workflow
    claimed once, and the rest created after it. Last in the module: its items hold the demo
    fleet's capacity for an hour, and the one-step run above needs a free slot."""
    items = 600
    run = services.run_submit(user=user, body=fan_out_workflow(items, 3600), project="eo-demo")
    wait_for(lambda: _created(run.pk) >= 100, 120, "the fan-out to start")
    fault = live.sandbox.fault("api-error", status=500, duration=600)
    wait_for(
        lambda: UnitRun.objects.filter(run=run, message__startswith="waiting for Karmada").exists(),
        120,
        "a unit to say it waits for Karmada",
    )
    assert _created(run.pk) < items, "the outage came too late to interrupt anything"
    live.sandbox.clear_fault(fault["id"])
    _each_item_created_once(live, run, items)
