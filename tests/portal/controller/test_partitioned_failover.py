"""Failover with a partitioned site, against the sandbox over HTTP: the
old attempt is deleted at the control plane, its copy keeps running at the lost site and is
removed there when the site returns; whatever it reports is ignored; the run shows both
attempts."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from portal.choices import UnitPhase
from portal.controller.advance import run_advance
from portal.controller.bindings import binding_observe, bindings_observe
from portal.controller.failover import failover_check
from portal.karmada import client, errors, lists, resources
from portal.models import PlacementDecision, UnitRun
from sites.models import Site
from tests.portal.controller.test_step_lifecycle import fleet, submit  # noqa: F401 - the fixture


def member_names(sandbox: Any, site: str) -> set[str]:
    return {
        str(w.get("metadata", {}).get("name") or w.get("name"))
        for w in sandbox.member_workflows(site)
    }


def test_the_old_attempt_finishing_after_the_site_returns_is_ignored_and_deleted(
    fleet,  # noqa: F811
) -> None:
    # A step long enough to still run when its site is lost (simulated hours).
    run = submit(fleet, duration="3h")
    run_advance(run.pk)
    unit = run.units.get()
    old_name, lost = unit.workflow_name, unit.site

    def running() -> UnitRun | None:
        bindings_observe(lists.list_objects(resources.RESOURCE_BINDING)[0])
        u = UnitRun.objects.get(pk=unit.pk)
        return u if u.phase == UnitPhase.RUNNING else None

    fleet.wait_for(running, what="the first attempt running")

    fault = fleet.fault("site-not-ready", site=lost)
    Site.objects.filter(name=lost).update(
        ready=False, ready_changed_at=timezone.now() - timedelta(hours=1)
    )
    assert failover_check() == [run.pk]
    unit.refresh_from_db()
    assert unit.attempt == 2 and unit.site != lost
    with pytest.raises(errors.NotFound):
        client.get(resources.WORKFLOW, old_name)  # deleted at the control plane at once
    assert old_name in member_names(fleet, lost)  # the partitioned member still runs it

    # What the old attempt reports (had its binding survived) changes nothing.
    late = {
        "spec": {"resource": {"kind": "Workflow", "name": old_name}, "clusters": [{"name": lost}]},
        "status": {
            "aggregatedStatus": [
                {
                    "clusterName": lost,
                    "status": {
                        "phase": "Succeeded",
                        "startedAt": "2026-12-03T07:00:00Z",
                        "finishedAt": "2026-12-03T08:00:00Z",
                        "nodes": {old_name: {"outputs": {"result": "stale"}}},
                    },
                }
            ]
        },
    }
    assert binding_observe(late) is None
    unit.refresh_from_db()
    assert unit.attempt == 2 and unit.phase == UnitPhase.PENDING and unit.outputs == {}

    # The site returns: Karmada deletes the member's copy with the Work.
    fleet.clear_fault(fault["id"])
    fleet.wait_for(lambda: old_name not in member_names(fleet, lost), what="the old copy deleted")
    attempts = sorted(PlacementDecision.objects.filter(unit=unit).values_list("attempt", "site"))
    assert [a for a, _ in attempts] == [1, 2]
    assert attempts[0][1] == lost
