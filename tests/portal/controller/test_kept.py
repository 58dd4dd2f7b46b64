"""A big run's units kept between turns (portal.controller.kept): a turn gets what a full read
would give, re-reading only the rows that changed, were added, or that the last turn changed
in memory. On real PostgreSQL, outside a test transaction (row versions are per transaction)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction

from portal.controller import advance, kept
from portal.controller.common import units_of
from portal.models import UnitRun, WorkflowRun
from tests.factories import UnitRunFactory
from tests.portal.helpers import fan_out_run

UNITS = 60


@pytest.fixture
def run(transactional_db: Any, settings: Any) -> WorkflowRun:
    settings.PORTAL_ADVANCE_KEEP_UNITS = 10
    kept.forget()
    owner = get_user_model().objects.create(username="kept")
    yield fan_out_run(owner, UNITS)
    kept.forget()


def state(units: list[UnitRun]) -> list[tuple[Any, ...]]:
    """What the advance reads of each unit, in order."""
    return [
        (u.pk, u.name, u.phase, u.site, u.workflow_name, u.attempt, u.outputs, u.upstream, u.spec)
        for u in units
    ]


def test_a_turn_with_nothing_changed_reads_only_the_row_versions(
    run: WorkflowRun, django_assert_num_queries: Any
) -> None:
    first = kept.kept_units_of(run)
    assert state(first) == state(units_of(run))
    with django_assert_num_queries(1):
        again = kept.kept_units_of(run)
    assert all(a is b for a, b in zip(again, first, strict=True))


def test_rows_written_elsewhere_are_read_again_and_only_they(
    run: WorkflowRun, django_assert_num_queries: Any
) -> None:
    first = {u.pk: u for u in kept.kept_units_of(run)}
    running = UnitRun.objects.filter(run=run, phase="Running").order_by("position")[:3]
    changed = [u.pk for u in running]
    # As the watcher would, in another process: a conditional UPDATE, no instance involved.
    UnitRun.objects.filter(pk__in=changed).update(phase="Succeeded", outputs={"result": "7"})
    with django_assert_num_queries(3):  # versions, the changed rows, their outputs
        again = kept.kept_units_of(run)
    assert state(again) == state(units_of(run))
    for unit in again:
        assert (unit is first[unit.pk]) == (unit.pk not in changed)
    assert [u.outputs for u in again if u.pk in changed] == [{"result": "7"}] * len(changed)


def test_an_instance_changed_in_memory_is_read_again(run: WorkflowRun) -> None:
    """A turn assigns to an instance when it writes the row; a write rolled back leaves the
    instance changed and the row as it was."""
    units = kept.kept_units_of(run)
    pending = next(u for u in units if u.phase == "Pending" and not u.site)
    with transaction.atomic():
        UnitRun.objects.filter(pk=pending.pk).update(site="site-b")
        pending.site = "site-b"
        transaction.set_rollback(True)
    again = {u.pk: u for u in kept.kept_units_of(run)}
    assert again[pending.pk].site == ""
    assert again[pending.pk] is not pending


def test_rows_added_take_their_place_in_order(run: WorkflowRun) -> None:
    kept.kept_units_of(run)
    UnitRunFactory(run=run, name="exit-handler", position=0)
    assert state(kept.kept_units_of(run)) == state(units_of(run))


def test_inside_a_transaction_everything_is_read(run: WorkflowRun) -> None:
    first = kept.kept_units_of(run)
    with transaction.atomic():
        again = kept.kept_units_of(run)
    assert state(again) == state(first)
    assert not any(a is b for a, b in zip(again, first, strict=True))


def test_a_small_run_is_not_kept(run: WorkflowRun, settings: Any) -> None:
    settings.PORTAL_ADVANCE_KEEP_UNITS = UNITS + 1
    first = kept.kept_units_of(run)
    assert not any(a is b for a, b in zip(kept.kept_units_of(run), first, strict=True))


def test_the_advance_keeps_a_run_only_while_it_has_step_workflows_to_create(
    run: WorkflowRun,
) -> None:
    """Its next advance comes when units end, maybe much later: a worker's memory stays what
    its turns need."""
    kept.kept_units_of(run)
    assert kept.kept(run)
    run.status = "Succeeded"
    run.save(update_fields=["status"])
    advance.run_advance(run.pk)
    assert not kept.kept(run)


def test_a_run_bigger_than_what_a_thread_keeps_is_read_whole(
    run: WorkflowRun, monkeypatch: Any
) -> None:
    monkeypatch.setattr(kept, "KEPT_UNITS", UNITS - 1)
    first = kept.kept_units_of(run)
    assert not kept.kept(run)
    assert not any(a is b for a, b in zip(kept.kept_units_of(run), first, strict=True))
