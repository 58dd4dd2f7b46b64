"""A run's status from its units, and a stopped run's steps stopped."""

from __future__ import annotations

import contextlib

from django.utils import timezone

from portal import state
from portal.choices import ACTIVE_RUN, FINAL_UNIT, RunStatus, UnitKind, UnitPhase
from portal.controller import gates, outcome
from portal.controller.common import event
from portal.controller.exit_handler import exit_pending
from portal.karmada import client, errors, resources
from portal.models import UnitRun, WorkflowRun


def settle_groups(units: list[UnitRun]) -> None:
    """An expanded unit ends when all its items have ended."""
    by_name = {u.name: u for u in units}
    for u in units:
        if not u.expanded or u.phase in FINAL_UNIT:
            continue
        items = u.item_names
        rows = [by_name[n] for n in items if n in by_name]
        if len(rows) < len(items) or any(r.phase not in FINAL_UNIT for r in rows):
            continue
        ok = all(r.phase in (UnitPhase.SUCCEEDED, UnitPhase.SKIPPED) for r in rows)
        state.unit_move(u, UnitPhase.SUCCEEDED if ok else UnitPhase.FAILED)


def mark_running(run_id: int) -> bool:
    now = timezone.now()
    return state.run_move(
        run_id, RunStatus.RUNNING, from_=[RunStatus.PENDING], started_at=now, updated_at=now
    )


def run_refresh_status(run_id: int) -> str:
    """Derive the run's status from its units (conditional: never leaves Stopped).

    All units ended: the entrypoint's DAG or steps template as Argo assesses it
    (``outcome.decide``), Failed if the exit handler failed. Otherwise Running once a unit
    was submitted.
    """
    run = WorkflowRun.objects.get(pk=run_id)
    if run.status not in ACTIVE_RUN:
        return run.status
    units = list(run.units.all())
    now = timezone.now()
    if units and all(u.phase in FINAL_UNIT for u in units) and not exit_pending(run, units):
        decided = outcome.decide(run, units)
        new, extra = decided.status, []
        exit_unit = next((u for u in units if u.kind == UnitKind.EXIT), None)
        if exit_unit is not None and exit_unit.phase in (UnitPhase.FAILED, UnitPhase.ERROR):
            new = RunStatus.FAILED if new == RunStatus.SUCCEEDED else new
            extra.append(exit_unit)
        message = outcome.message(decided, extra)
        changed = state.run_move(
            run.pk, new, from_=[run.status], finished_at=now, updated_at=now, message=message
        )
        if changed:
            event(
                run.pk, "run-finished", f"Run {new.lower()}" + (f": {message}" if message else "")
            )
        return new if changed else run.status
    if run.status == RunStatus.PENDING and any(u.workflow_name for u in units):
        mark_running(run.pk)
        return RunStatus.RUNNING
    return run.status


def shutdown(run: WorkflowRun) -> None:
    """A stopped run: running step workflows get its ``spec.shutdown`` (``Stop`` unless the
    user asked to terminate); units that never started are omitted. The exit handler is not
    stopped: Argo's ``Stop`` runs it (``exit_after_stop``)."""
    strategy = gates.shutdown_strategy(run)
    for unit in run.units.filter(phase__in=[UnitPhase.PENDING, UnitPhase.RUNNING]):
        if unit.kind == UnitKind.EXIT:
            continue
        if unit.workflow_name:
            if not unit.shutdown_sent:
                with contextlib.suppress(errors.NotFound):
                    client.patch(
                        resources.WORKFLOW, unit.workflow_name, {"spec": {"shutdown": strategy}}
                    )
                UnitRun.objects.filter(pk=unit.pk).update(shutdown_sent=True)
        elif not unit.expanded:
            state.unit_move(unit, UnitPhase.OMITTED, message="run stopped")
