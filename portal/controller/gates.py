"""Run-level controls the portal holds across units: what Argo's
controller decides for one workflow, decided here for the run whose units are step workflows
at several sites. Each advance asks ``gate`` once per pass before it starts units.

* ``spec.parallelism`` and the entrypoint template's ``parallelism`` bound the units running
  at once. Argo's ``checkParallelism`` (``workflow/controller/operator.go``) refuses a new node
  while ``activePods >= spec.parallelism``, and a DAG/steps template's new child while its
  active children reach ``tmpl.parallelism``; the portal counts units (each step workflow keeps
  ``spec.parallelism`` for the pods inside it).
* ``failFast`` on the entrypoint template (default false, ``Template.IsFailFast``): once a
  child failed, ``checkParallelism`` refuses every new child ("template has failed or errored
  children and failFast enabled"). Units that will never start are omitted with why; the run
  then fails with Argo's message (``outcome``). ``dag.failFast`` (default true) is not a
  scheduling gate in the controller: ``executeDAG`` (``workflow/controller/dag.go``) creates
  every task whose dependencies allow before ``assessDAGPhase`` reads it, and the walk stays
  Running while any node it reaches runs, so the flag only decides the DAG's verdict
  (``placement.phase``); the portal starts those tasks too.
* ``spec.suspend``: nothing starts until the run is resumed (``argo resume`` clears it).
* ``spec.activeDeadlineSeconds`` is the run's deadline: past it no unit starts (those left
  fail, as Argo fails the nodes it did not finish), and each step workflow gets only the time
  left (``placement.manifests.runlevel``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from placement import phase
from portal import state
from portal.choices import ACTIVE_RUN, FINAL_UNIT, RunStatus, UnitKind, UnitPhase
from portal.controller import locks
from portal.controller.common import event
from portal.models import BULK_ROWS, UnitRun, WorkflowRun


@dataclass(frozen=True)
class Gate:
    """What may start now. ``room``: how many more units (None: no limit). ``hold``: why
    nothing starts for now (units stay Pending). ``end``: why pending units will never start,
    and the phase they end in."""

    room: int | None = None
    hold: str | None = None
    end: tuple[str, str] | None = None


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def entry_template(run: WorkflowRun) -> Mapping[str, Any]:
    templates = run.compiled.get("templates") or {}
    found = templates.get(run.compiled.get("entrypoint") or "")
    return found if isinstance(found, Mapping) else {}


def parallelism_limit(spec: Mapping[str, Any], entry: Mapping[str, Any]) -> int | None:
    """The lower of ``spec.parallelism`` and the entrypoint template's ``parallelism``
    (a template's 0 or less means none, as ``Template.HasParallelism``)."""
    limits = []
    wf = _int(spec.get("parallelism"))
    if wf is not None:
        limits.append(max(wf, 0))
    tmpl = _int(entry.get("parallelism"))
    if tmpl is not None and tmpl > 0:
        limits.append(tmpl)
    return min(limits) if limits else None


def fail_fast(entry: Mapping[str, Any]) -> bool:
    """Whether the entrypoint template stops starting children after one failed: its own
    ``failFast`` (a steps or DAG template), never ``dag.failFast`` (see the module's note)."""
    return entry.get("failFast") is True and ("dag" in entry or "steps" in entry)


def _counts(unit: UnitRun) -> bool:
    """A unit that is one of the entrypoint's children (not a fan-out's group row, not the
    exit handler)."""
    return not unit.expanded and unit.kind != UnitKind.EXIT


def active(units: Sequence[UnitRun]) -> int:
    return sum(1 for u in units if _counts(u) and u.workflow_name and u.phase not in FINAL_UNIT)


def deadline_left(run: WorkflowRun, now: datetime | None = None) -> float | None:
    """Seconds left of the run's ``spec.activeDeadlineSeconds`` (counted from submission, as
    Argo counts from the workflow's start), None without one."""
    seconds = _int((run.compiled.get("spec") or {}).get("activeDeadlineSeconds"))
    if seconds is None:
        return None
    elapsed = ((now or timezone.now()) - run.created_at).total_seconds()
    return seconds - elapsed


def gate(run: WorkflowRun, units: Sequence[UnitRun]) -> Gate:
    spec = run.compiled.get("spec") or {}
    left = deadline_left(run)
    if left is not None and left <= 0:
        return Gate(
            room=0,
            end=(
                UnitPhase.FAILED,
                f"the run's activeDeadlineSeconds ({spec.get('activeDeadlineSeconds')}) "
                "passed before it started",
            ),
        )
    if run.suspended:
        return Gate(room=0, hold="the run is suspended (spec.suspend); resume it to go on")
    entry = entry_template(run)
    if fail_fast(entry):
        # Every failed or errored child counts, continueOn or not
        # (getUnsuccessfulChildrenCounter, workflow/controller/node_counters.go).
        failed = [u for u in units if _counts(u) and u.phase in (UnitPhase.FAILED, UnitPhase.ERROR)]
        if failed:
            return Gate(
                room=0,
                end=(
                    UnitPhase.OMITTED,
                    f"{phase.FAIL_FAST_MESSAGE} (not started after {failed[0].name} failed)",
                ),
            )
    limit = parallelism_limit(spec, entry)
    if limit is None:
        return Gate()
    return Gate(room=max(limit - active(units), 0))


def end_pending(units: Sequence[UnitRun], phase: str, why: str) -> bool:
    """Pending units that never started end (``phase``, with why), in one UPDATE per
    ``BULK_ROWS`` and one event: a fan-out's thousands end in a few statements. True when one
    moved."""
    pending = [
        u
        for u in units
        if u.phase == UnitPhase.PENDING
        and not u.workflow_name
        and not u.expanded
        and u.kind != UnitKind.EXIT
    ]
    now = timezone.now()
    moved = 0
    for start in range(0, len(pending), BULK_ROWS):
        chunk = pending[start : start + BULK_ROWS]
        moved += state.units_move(
            UnitRun.objects.filter(pk__in=[u.pk for u in chunk], workflow_name=""),
            phase,
            from_=[UnitPhase.PENDING],
            message=why,
            finished_at=now,
            updated_at=now,
        )
    if not moved:
        return False
    for u in pending:
        u.phase, u.message, u.finished_at = phase, why, now
    names = ", ".join(u.name for u in pending[:5]) + (", ..." if len(pending) > 5 else "")
    event(pending[0].run_id, "units-ended", f"{moved} unit(s) {phase.lower()} ({names}): {why}")
    return True


SHUTDOWN_STRATEGIES = ("Stop", "Terminate")


def shutdown_strategy(run: WorkflowRun) -> str:
    """How a stopped run stops: its ``spec.shutdown`` as submitted or as the stop action set
    it (``argo stop`` / ``argo terminate`` set the same field); ``Stop`` by default."""
    strategy = (run.compiled.get("spec") or {}).get("shutdown")
    return str(strategy) if strategy in SHUTDOWN_STRATEGIES else "Stop"


def shutdown_requested(run: WorkflowRun) -> bool:
    """A run submitted with ``spec.shutdown`` (Stop or Terminate) starts nothing: Argo's
    controller, seeing the strategy, runs no new node and ends the workflow ("Stopped with
    strategy '<s>'", ``workflow/controller/operator.go``). The portal stops the run as its
    own Stop does (True when it moved the run now)."""
    strategy = (run.compiled.get("spec") or {}).get("shutdown")
    if strategy not in SHUTDOWN_STRATEGIES:
        return False
    now = timezone.now()
    message = f"Stopped with strategy '{strategy}' (spec.shutdown)"
    if state.run_move(run.pk, RunStatus.STOPPED, finished_at=now, updated_at=now, message=message):
        event(run.pk, "stopped", message)
        return True
    return False


def admit(
    run: WorkflowRun, units: Sequence[UnitRun], ready: list[UnitRun]
) -> tuple[list[UnitRun], bool]:
    """The ready units the run-level controls let start now, and whether units that will
    never start were ended. Locks (``locks``) are taken last, for the units that would start."""
    # The exit handler starts once everything else has ended, past a failure or the deadline
    # too (Argo runs onExit then), and counts toward no parallelism.
    exits = [u for u in ready if u.kind == UnitKind.EXIT]
    ready = [u for u in ready if u.kind != UnitKind.EXIT]
    g = gate(run, units)
    moved = False
    if g.end is not None:
        ready, moved = [], end_pending(units, *g.end)
    elif g.room is not None:
        ready = ready[: g.room]
    ready += exits
    if not ready or not locks.synchronized(run):
        return ready, moved
    try:
        waiting = locks.acquire(run, locks.RUN_SCOPE, locks.run_locks(run))
    except locks.LockInvalid as exc:
        return [], end_pending(units, UnitPhase.ERROR, str(exc)) or moved
    if waiting is not None:
        _say_waiting(ready, waiting)
        return [], moved
    admitted: list[UnitRun] = []
    # Units asking for the same locks queue behind the first that waits: a fan-out's
    # thousands of items are not each tried (and queued) on every advance.
    blocked: dict[tuple[str, ...], str] = {}
    told: dict[str, list[UnitRun]] = {}
    for unit in ready:
        wanted = locks.unit_locks(run, unit)
        names = tuple(lock.key for lock in wanted)
        if names in blocked:
            told[blocked[names]].append(unit)
            continue
        try:
            waiting = locks.acquire(run, unit.name, wanted)
        except locks.LockInvalid as exc:
            moved |= state.unit_move(unit, UnitPhase.ERROR, message=str(exc))
            continue
        if waiting is None:
            admitted.append(unit)
        else:
            blocked[names] = waiting
            told.setdefault(waiting, []).append(unit)
    for why, waiters in told.items():
        _say_waiting(waiters, why)
    return admitted, moved


def _say_waiting(units: Sequence[UnitRun], why: str) -> None:
    """A pending unit's message says which lock it waits for (written when it changes)."""
    text = f"waiting: {why}"[:2000]
    changed = [u.pk for u in units if u.message != text]
    if changed:
        UnitRun.objects.filter(pk__in=changed, phase=UnitPhase.PENDING).update(message=text)
        for u in units:
            u.message = text


def after(run: WorkflowRun, units: Sequence[UnitRun]) -> None:
    """After an advance: the holds of units that ended end, and the run's once it ended."""
    if not locks.synchronized(run):
        return
    status = WorkflowRun.objects.filter(pk=run.pk).values_list("status", flat=True).first()
    locks.release(run, units, run_ended=status not in ACTIVE_RUN)
