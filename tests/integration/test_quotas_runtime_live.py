"""Quotas hold back units placed at run time, on the live stack: eo-demo has 16 CPU
over the group of sites in eu-west (site-a and site-b, by their region label) and none at
site-c. Its burst of 8-CPU items (60 s each, 3 s at the sandbox's time scale) that the demo's
rule leaves to the webhook never has more than two items in flight, never lands at site-c,
waits Queued with the group's reason, and every item succeeds. The stack runs without the
periodic resync: queued items are admitted because items end (the webhook placed them), not
because a resync came by."""

from __future__ import annotations

import threading
import time

import pytest
from django.contrib.auth.models import User
from django.db import close_old_connections

from portal import services
from portal.choices import FINAL_UNIT, UnitTiming
from portal.models import UnitRun, WorkflowRun
from portal.quotas.models import Quota, Workload
from sites.models import Project, Site
from tests.fixtures_stack import Stack, wait_for
from tests.portal.helpers import fan_out

pytestmark = [pytest.mark.integration]

ITEMS = 6
EU_WEST = {"topology.kubernetes.io/region": "eu-west"}


def in_flight(run_id: int) -> list[str]:
    """The sites of a run's items pushed to Karmada and not ended ("" not placed yet)."""
    return list(
        UnitRun.objects.filter(run_id=run_id, timing=UnitTiming.RUNTIME)
        .exclude(workflow_name="")
        .exclude(phase__in=list(FINAL_UNIT))
        .values_list("site", flat=True)
    )


def eu_west_quota_only(eo: Project) -> None:
    """16 CPU for eo-demo over the eu-west sites together, none at site-c."""
    Quota.objects.create(
        project=eo,
        site_selector=EU_WEST,
        cpu_millicores=16000,
        memory_bytes=2**36,
        borrow_cpu_millicores=0,
    )
    Quota.objects.create(
        project=eo, site=Site.objects.get(name="site-c"), cpu_millicores=0, borrow_cpu_millicores=0
    )


class InFlight:
    """Samples a run's items in flight every 0.1 s, on its own thread: the most at once, and
    the sites they ran at."""

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        self.peak = 0
        self.sites: set[str] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def sample(self) -> None:
        try:
            while not self.stop.is_set():
                now = in_flight(self.run_id)
                self.peak = max(self.peak, len(now))
                self.sites.update(s for s in now if s)
                time.sleep(0.1)
        finally:
            close_old_connections()


def test_runtime_items_wait_for_their_group_quota_and_are_woken_by_ends(
    live_without_resync: Stack,
) -> None:
    user = User.objects.get(username="scientist")
    eu_west_quota_only(Project.objects.get(name="eo-demo"))
    run = services.run_submit(user=user, body=fan_out(ITEMS, seconds=60), project="eo-demo")

    flight = InFlight(run.pk)
    flight.thread.start()
    try:
        queued = wait_for(
            lambda: Workload.objects.filter(run_id=run.pk, admitted_at__isnull=True).first(),
            120,
            "an item queued for quota",
        )
        assert queued is not None
        assert queued.reason == (
            "eo-demo uses 16 of 16 CPU at sites topology.kubernetes.io/region=eu-west; "
            "waiting for quota"
        )
        wait_for(
            lambda: WorkflowRun.objects.get(pk=run.pk).status in ("Succeeded", "Failed", "Error"),
            300,
            "the burst to end",
        )
    except AssertionError:
        raise AssertionError(
            f"{live_without_resync.log('worker')}\n--- watcher\n"
            f"{live_without_resync.log('watcher')}"
        ) from None
    finally:
        flight.stop.set()
        flight.thread.join(5)
    assert WorkflowRun.objects.get(pk=run.pk).status == "Succeeded"
    items = UnitRun.objects.filter(run=run, timing=UnitTiming.RUNTIME)
    assert items.count() == ITEMS
    assert set(items.values_list("phase", flat=True)) == {"Succeeded"}
    assert set(items.values_list("site", flat=True)) <= {"site-a", "site-b"}
    assert flight.sites <= {"site-a", "site-b"}, flight.sites
    assert flight.peak == 2, f"at most 2 items of 8 CPU in flight over eu-west, saw {flight.peak}"
    assert Workload.objects.filter(run_id=run.pk, admitted_at__isnull=False).count() == ITEMS
