"""Actions on a run: stop, retry, resume, resubmit, suspend, delete (``argo stop``,
``argo retry``, ``argo resume``, ``argo resubmit``, ``argo suspend``, ``argo delete``; HackSoft
style, keyword-only). Status and phase changes go through ``portal.state``, the one writer of
run and unit state."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from placement.parser import FieldError, WorkflowInvalid
from portal import state
from portal.choices import ACTIVE_RUN, RunStatus, UnitPhase, UnitTiming
from portal.models import RunEvent, UnitRun, WorkflowRun
from portal.quotas import priorities as quota_priorities
from portal.services.submission import enqueue_advance, run_submit

log = logging.getLogger(__name__)


class ActionRefused(Exception):
    """An action that the run's state does not allow (answered 409)."""


STOP_STRATEGIES = ("Stop", "Terminate")


def run_stop(*, run: WorkflowRun, user: Any, strategy: str = "Stop") -> WorkflowRun:
    """No new units start; running step workflows are asked to stop (``spec.shutdown``).
    ``Stop`` (``argo stop``) then runs the exit handler, ``Terminate`` (``argo terminate``)
    does not; the strategy is kept as the run's ``spec.shutdown``, as Argo keeps it."""
    if strategy not in STOP_STRATEGIES:
        raise WorkflowInvalid([FieldError("strategy", "must be 'Stop' or 'Terminate'")])
    with transaction.atomic():
        locked = WorkflowRun.objects.select_for_update().get(pk=run.pk)
        updated = state.run_move(
            run.pk, RunStatus.STOPPED, finished_at=timezone.now(), updated_at=timezone.now()
        )
        if not updated:
            raise ActionRefused(f"run is {run.status}; only pending or running runs stop")
        spec = {**(locked.compiled.get("spec") or {}), "shutdown": strategy}
        WorkflowRun.objects.filter(pk=run.pk).update(compiled={**locked.compiled, "spec": spec})
        RunEvent.objects.create(
            run=run,
            kind="stopped",
            message=f"Stopped by {user.get_username()}"
            + ("" if strategy == "Stop" else f" (strategy {strategy})"),
        )
        transaction.on_commit(lambda: enqueue_advance(run.pk))
    run.refresh_from_db()
    return run


def run_retry(*, run: WorkflowRun, user: Any) -> WorkflowRun:
    """Failed and errored units get a new attempt; units they blocked become pending again."""
    with transaction.atomic():
        locked = WorkflowRun.objects.select_for_update().get(pk=run.pk)
        if locked.status not in (RunStatus.FAILED, RunStatus.ERROR):
            raise ActionRefused(f"run is {locked.status}; only failed runs can be retried")
        failed = list(locked.units.filter(phase__in=[UnitPhase.FAILED, UnitPhase.ERROR]))
        if not failed:
            raise ActionRefused("no failed units to retry")
        for unit in failed:
            RunEvent.objects.create(
                run=run,
                unit=unit,
                kind="unit-retried",
                message=f"{unit.name}: attempt {unit.attempt} {unit.phase}; "
                f"retried as attempt {unit.attempt + 1}",
                data={"ended_attempt": unit.attempt_record(ended="retried", why=unit.message)},
            )
            state.units_move(
                UnitRun.objects.filter(pk=unit.pk),
                UnitPhase.PENDING,
                from_=[unit.phase],
                attempt=unit.attempt + 1,
                workflow_name="",
                submitted_at=None,
                started_at=None,
                finished_at=None,
                message="",
            )
            if unit.timing == UnitTiming.RUNTIME:  # placed again when it is created
                state.unit_place(
                    UnitRun.objects.filter(pk=unit.pk, attempt=unit.attempt + 1),
                    "",
                    from_sites=[unit.site],
                )
        state.units_move(locked.units.all(), UnitPhase.PENDING, from_=[UnitPhase.OMITTED])
        state.run_move(
            run.pk, RunStatus.RUNNING, from_=[locked.status], finished_at=None, message=""
        )
        RunEvent.objects.create(
            run=run,
            kind="retried",
            message=f"Retry by {user.get_username()}: {', '.join(u.name for u in failed)}",
        )
        transaction.on_commit(lambda: enqueue_advance(run.pk))
    run.refresh_from_db()
    return run


def run_resume(*, run: WorkflowRun, user: Any, node: str | None = None) -> WorkflowRun:
    """Resume a suspended step (``node``: a unit's name) or the whole run, as ``argo resume``
    does: without a node, the run's ``spec.suspend`` is cleared (units start again) and every
    running step is resumed; the worker clears each step's ``spec.suspend`` and marks its
    suspended nodes."""
    from portal import tasks

    if run.status not in (RunStatus.PENDING, RunStatus.RUNNING):
        raise ActionRefused(f"run is {run.status}; only a running run has steps to resume")
    units = run.units.filter(phase=UnitPhase.RUNNING).exclude(workflow_name="")
    if node:
        if not run.units.filter(name=node).exists():
            raise WorkflowInvalid([FieldError("node", f"no step {node!r} in run {run.name}")])
        units = units.filter(name=node)
    targets = list(units.values_list("pk", "name"))
    by = user.get_username()
    held = not node and _run_unsuspend(run, by)
    if not targets and not held:
        raise ActionRefused(f"step {node} is not running" if node else "no running step")
    if targets:
        RunEvent.objects.create(
            run=run,
            kind="resume-requested",
            message=f"Resume of {', '.join(n for _, n in targets)} requested by {by}",
        )

    def enqueue() -> None:
        for pk, _name in targets:
            try:
                tasks.unit_resume.delay(pk, by)
            except Exception:  # noqa: BLE001 - broker down: the user sees no "resumed" event
                log.warning("could not enqueue the resume of unit %s", pk, exc_info=True)

    transaction.on_commit(enqueue)
    return run


def _run_unsuspend(run: WorkflowRun, by: str) -> bool:
    """Clear the run's ``spec.suspend`` (one conditional UPDATE of the stored spec, so two
    resumes clear it once) and advance it. False when it was not suspended."""
    with transaction.atomic():
        locked = WorkflowRun.objects.select_for_update().filter(pk=run.pk).first()
        if locked is None or not locked.suspended:
            return False
        spec = {k: v for k, v in locked.compiled["spec"].items() if k != "suspend"}
        locked.compiled = {**locked.compiled, "spec": spec}
        WorkflowRun.objects.filter(pk=run.pk).update(compiled=locked.compiled)
        run.compiled = locked.compiled
        RunEvent.objects.create(run=run, kind="resumed", message=f"Run resumed by {by}")
        transaction.on_commit(lambda: enqueue_advance(run.pk))
    return True


def run_resubmit(*, run: WorkflowRun, user: Any) -> WorkflowRun:
    """A new run of the same manifest and arguments."""
    return run_submit(
        user=user,
        body=run.manifest,
        project=run.project,
        arguments=run.arguments or None,
        resubmitted_from=run,
        priority_class=quota_priorities.run_priority(run)[0] or None,
    )


def run_suspend(*, run: WorkflowRun, user: Any) -> WorkflowRun:
    """Hold the run as ``argo suspend`` holds a workflow: its ``spec.suspend`` is set, so no
    further unit starts (``execution.gates``); steps already running go on, as Argo's pods
    do. ``run_resume`` clears it."""
    with transaction.atomic():
        locked = WorkflowRun.objects.select_for_update().get(pk=run.pk)
        if locked.status not in ACTIVE_RUN:
            raise ActionRefused(f"run is {locked.status}; only pending or running runs suspend")
        if not locked.suspended:
            spec = {**(locked.compiled.get("spec") or {}), "suspend": True}
            locked.compiled = {**locked.compiled, "spec": spec}
            WorkflowRun.objects.filter(pk=run.pk).update(compiled=locked.compiled)
            RunEvent.objects.create(
                run=run, kind="suspended", message=f"Run suspended by {user.get_username()}"
            )
    run.refresh_from_db()
    return run


def run_delete(*, run: WorkflowRun, user: Any) -> None:
    """Delete a run that has ended, with its units, decisions and events. Its step workflows
    still on karmada-apiserver (kept for ``PORTAL_KEEP_FINISHED_SECONDS``, or superseded ones
    not deleted yet) are deleted by the worker once this commits: nothing is left that the
    cleanup, which reads the units, could no longer find.

    A run still pending or running is refused: its worker may be creating step workflows at
    this moment, and those would outlive the rows that name them."""
    with transaction.atomic():
        locked = WorkflowRun.objects.select_for_update().get(pk=run.pk)
        if locked.status in ACTIVE_RUN:
            raise ActionRefused(
                f"run {locked.name} is {locked.status}; stop or terminate it before deleting it"
            )
        names: set[str] = set()
        for name, deleted, spec in UnitRun.objects.filter(run=locked).values_list(
            "workflow_name", "workflow_deleted_at", "spec"
        ):
            if name and deleted is None:
                names.add(name)
            names.update((spec or {}).get("superseded_workflows") or [])
        locked.delete()
        log.info("run %s deleted by %s", locked.name, user.get_username())
        if names:
            transaction.on_commit(lambda: _enqueue_delete(sorted(names)))


def _enqueue_delete(names: list[str]) -> None:
    from portal import tasks

    try:
        tasks.step_workflows_delete.delay(names)
    except Exception:  # noqa: BLE001 - broker down: the warning names what is left
        log.warning("could not enqueue the deletion of step workflows %s", names, exc_info=True)
