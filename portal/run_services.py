"""Writes for runs that ``portal.services`` does not hold yet: suspending a whole run and
deleting a finished one (``argo suspend`` and ``argo delete``; HackSoft style, keyword-only).
Status changes stay with ``portal.state``; neither of these changes a status."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from portal.choices import ACTIVE_RUN
from portal.models import RunEvent, UnitRun, WorkflowRun
from portal.services import ActionRefused

log = logging.getLogger(__name__)


def run_suspend(*, run: WorkflowRun, user: Any) -> WorkflowRun:
    """Hold the run as ``argo suspend`` holds a workflow: its ``spec.suspend`` is set, so no
    further unit starts (``controller.gates``); steps already running go on, as Argo's pods
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
