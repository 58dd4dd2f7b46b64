"""Quotas on the live stack: two projects share the demo fleet; eo-demo has 8 CPU at
site-b and may not borrow. Its fan-out of 1-CPU tiles never has more than 8 step workflows in
flight at site-b, every tile succeeds, and the other project's one-step run submitted meanwhile
starts at once. The stack runs without the periodic resync: queued tiles are admitted because
tiles end, not because a resync came by."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from django.db import close_old_connections

from portal import services
from portal.choices import FINAL_UNIT
from portal.models import UnitRun, WorkflowRun
from portal.quotas.models import Quota
from sites.models import Project, Site
from tests.fixtures_stack import Stack, wait_for
from tests.portal import helpers

pytestmark = [pytest.mark.integration]

DURATION = "portal.multisite.io/sandbox-duration"
TILES = 100


def workflow(name: str, task: str, items: int | None, seconds: int) -> str:
    step: dict[str, Any] = {"name": task, "template": "work"}
    if items is not None:
        step["withItems"] = list(range(items))
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": f"{name}-"},
            "spec": {
                "entrypoint": "main",
                "templates": [
                    {"name": "main", "dag": {"tasks": [step]}},
                    {
                        "name": "work",
                        "metadata": {"annotations": {DURATION: f"{seconds}s"}},
                        "container": {
                            "image": "alpine:3.19",
                            "command": ["true"],
                            "resources": {"requests": {"cpu": "1", "memory": "64Mi"}},
                        },
                    },
                ],
            },
        }
    )


def in_flight(run_id: int) -> int:
    """A run's units pushed to Karmada at site-b and not ended."""
    return (
        UnitRun.objects.filter(run_id=run_id, site="site-b")
        .exclude(workflow_name="")
        .exclude(phase__in=list(FINAL_UNIT))
        .count()
    )


def test_a_fan_out_stays_within_its_quota_and_another_project_starts_at_once(
    live_without_resync: Stack,
) -> None:
    user = User.objects.get(username="scientist")
    other = Project.objects.create(name="other")
    other.members.add(user)
    site_b = Site.objects.get(name="site-b")
    eo = Project.objects.get(name="eo-demo")
    Quota.objects.create(
        project=eo, site=site_b, cpu_millicores=8000, memory_bytes=2**34, borrow_cpu_millicores=0
    )
    Quota.objects.create(project=other, site=site_b, cpu_millicores=4000, memory_bytes=2**34)
    for task in ("tile", "hello"):
        helpers.pin(task, "site-b", prefix="quota-pin")
    fan = services.run_submit(user=user, body=workflow("fan", "tile", TILES, 2), project="eo-demo")

    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        try:
            while not stop.is_set():
                peak = max(peak, in_flight(fan.pk))
                time.sleep(0.1)
        finally:
            close_old_connections()

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        wait_for(lambda: in_flight(fan.pk) == 8, 120, "the fan-out to fill its quota")
        one = services.run_submit(
            user=user, body=workflow("one", "hello", None, 0), project="other"
        )
        unit = wait_for(
            lambda: UnitRun.objects.filter(run=one).exclude(workflow_name="").first(),
            60,
            "the other project's step workflow",
        )
        # It did not wait for the fan-out: tiles were still queued when it was pushed.
        queued = UnitRun.objects.filter(run=fan, workflow_name="", phase="Pending").count()
        assert queued > 0, "the fan-out had ended before the other project's step started"
        assert unit.site == "site-b"
        wait_for(
            lambda: WorkflowRun.objects.get(pk=fan.pk).status in ("Succeeded", "Failed", "Error"),
            300,
            "the fan-out to end",
        )
    finally:
        stop.set()
        sampler.join(5)
    assert WorkflowRun.objects.get(pk=fan.pk).status == "Succeeded"
    tiles = UnitRun.objects.filter(run=fan, spec__item_index__isnull=False)
    assert tiles.count() == TILES
    assert set(tiles.values_list("phase", flat=True)) == {"Succeeded"}
    assert peak == 8, f"at most 8 tiles in flight at site-b, saw {peak}"
    wait_for(
        lambda: WorkflowRun.objects.get(pk=one.pk).status == "Succeeded", 60, "the one-step run"
    )


def test_a_high_priority_run_starts_before_the_queued_fan_outs_next_tile(
    live_without_resync: Stack,
) -> None:
    from portal.quotas.models import PriorityClass

    user = User.objects.get(username="scientist")
    eo = Project.objects.get(name="eo-demo")
    Quota.objects.create(
        project=eo,
        site=Site.objects.get(name="site-b"),
        cpu_millicores=2000,
        memory_bytes=2**34,
        borrow_cpu_millicores=0,
    )
    PriorityClass.objects.create(name="urgent", value=1000)
    for task in ("tile", "hello"):
        helpers.pin(task, "site-b", prefix="quota-pin")
    fan = services.run_submit(user=user, body=workflow("fan", "tile", 12, 20), project="eo-demo")
    wait_for(lambda: in_flight(fan.pk) == 2, 120, "the fan-out to fill its quota")
    urgent = services.run_submit(
        user=user,
        body=workflow("urgent", "hello", None, 0),
        project="eo-demo",
        priority_class="urgent",
    )
    waiting = list(
        UnitRun.objects.filter(run=fan, workflow_name="", phase="Pending").values_list(
            "pk", flat=True
        )
    )
    assert waiting, "no tile was left queued"
    unit = wait_for(
        lambda: UnitRun.objects.filter(run=urgent, submitted_at__isnull=False).first(),
        300,
        "the urgent run's step workflow",
    )
    assert unit.submitted_at is not None
    assert unit.site == "site-b"
    overtaken = UnitRun.objects.filter(pk__in=waiting, submitted_at__lt=unit.submitted_at)
    assert not overtaken.exists(), f"{overtaken.count()} queued tiles started before it"
    assert WorkflowRun.objects.get(pk=urgent.pk).compiled["priority_class"]["name"] == "urgent"
    services.run_stop(run=fan, user=user, strategy="Terminate")
    wait_for(lambda: WorkflowRun.objects.get(pk=fan.pk).finished_at is not None, 120, "the stop")
