"""A step workflow created while its unit moved on (stopped, failed over, ended) is never
claimed by any advance: it is deleted on karmada-apiserver, not left running at its site. One
that a redelivered task's twin claimed stays."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from portal import services, state
from portal.choices import UnitPhase
from portal.controller import submit
from portal.karmada import client, errors, resources
from portal.models import UnitRun, WorkflowRun
from portal.selectors import upstream_outputs
from tests.fixtures_sandbox import SandboxServer
from tests.portal.helpers import EO_PIPELINE

pytestmark = [pytest.mark.integration]


def _ingest(run: WorkflowRun) -> tuple[UnitRun, list[UnitRun]]:
    units = list(run.units.order_by("position", "id"))
    return next(u for u in units if u.name == "ingest"), units


def _exists(name: str) -> bool:
    try:
        client.get(resources.WORKFLOW, name)
    except errors.NotFound:
        return False
    return True


def test_a_step_workflow_created_for_a_unit_stopped_meanwhile_is_deleted(
    demo_fleet: SandboxServer,
) -> None:
    user = get_user_model().objects.get(username="scientist")
    run = services.run_submit(user=user, body=EO_PIPELINE.read_text())
    ingest, units = _ingest(run)
    creates = submit.creates_start(run, [ingest], units, None, upstream_outputs(units))
    name = creates.bodies[0][1]["metadata"]["name"]
    # The run is stopped while the create is in flight: the unit is omitted, unclaimed.
    state.unit_move(UnitRun.objects.get(pk=ingest.pk), UnitPhase.OMITTED, message="stopped")
    assert submit.creates_finish(run, creates) == 0
    assert not _exists(name)
    assert UnitRun.objects.get(pk=ingest.pk).workflow_name == ""


def test_a_step_workflow_its_unit_holds_is_left(demo_fleet: SandboxServer, settings: Any) -> None:
    """Two deliveries of one advance create the same name; the first claims it."""
    settings.PORTAL_CREATE_CONCURRENCY = 1
    user = get_user_model().objects.get(username="scientist")
    run = services.run_submit(user=user, body=EO_PIPELINE.read_text())
    ingest, units = _ingest(run)
    twin = UnitRun.objects.get(pk=ingest.pk)
    outputs = upstream_outputs(units)
    assert submit.submit_units(run, [ingest], units, None, outputs) == 1
    assert submit.submit_units(run, [twin], units, None, outputs) == 0
    name = UnitRun.objects.get(pk=ingest.pk).workflow_name
    assert name and _exists(name)
