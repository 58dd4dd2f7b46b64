"""Celery tasks: thin wrappers, each calling one function of the controller
(``portal.controller``).

Every task has Celery's soft and hard time limits (``CELERY_TASK_SOFT_TIME_LIMIT``,
``CELERY_TASK_TIME_LIMIT``): nothing a user submits can hold a worker process for good.
Only transient Karmada errors are retried (with exponential backoff and jitter); a worker that
dies mid-task leaves the message unacknowledged (``acks_late``) and another worker runs it
again, which the controller makes harmless. The controller queues these tasks by name
(``portal.controller.enqueue``), with the broker's priorities.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task

from portal.controller import cleanup, resume, sync, worker
from portal.controller import resync as controller_resync
from portal.controller.enqueue import BULK
from portal.karmada import errors

RETRY: dict[str, Any] = {
    "autoretry_for": (errors.TransientError,),
    "retry_backoff": 1,
    "retry_backoff_max": 60,
    "retry_jitter": True,
    "max_retries": None,  # Karmada down for minutes must not lose a run
}


@shared_task(**RETRY)
def run_advance(run_id: int, project: int | None = None, prompt: bool = False) -> None:
    """One item of the controller's workqueue: the run reconciled (``project``: it holds one
    of its project's slots; ``prompt``: a user waits on it)."""
    worker.process(run_id, project=project, prompt=prompt)


@shared_task(**RETRY)
def unit_resume(unit_id: int, by: str) -> None:
    resume.unit_resume_by_id(unit_id, by=by)


@shared_task(**RETRY, priority=BULK)
def policies_sync() -> None:
    sync.policies_sync()


@shared_task(**RETRY, priority=BULK)
def sites_sync() -> None:
    controller_resync.sites_sync()


@shared_task(**RETRY, priority=BULK)
def bindings_resync() -> None:
    controller_resync.bindings_resync()


@shared_task(**RETRY, priority=BULK)
def step_workflows_cleanup() -> None:
    controller_resync.step_workflows_cleanup()


@shared_task(priority=BULK)
def resync() -> None:
    controller_resync.resync()


@shared_task(**RETRY, priority=BULK)
def step_workflows_delete(names: list[str]) -> None:
    """The step workflows of a deleted run (``portal.services.runs.run_delete``)."""
    cleanup.step_workflows_delete(names)
