"""Celery tasks: thin wrappers that load by id and call a service.

Every task has Celery's soft and hard time limits (``CELERY_TASK_SOFT_TIME_LIMIT``,
``CELERY_TASK_TIME_LIMIT``): nothing a user submits can hold a worker process for good.
Only transient Karmada errors are retried (with exponential backoff and jitter); a worker that
dies mid-task leaves the message unacknowledged (``acks_late``) and another worker runs it
again, which the services make harmless.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task

from portal import execution, gateway
from portal.admission import queue

log = logging.getLogger(__name__)

RETRY: dict[str, Any] = {
    "autoretry_for": (gateway.TransientError,),
    "retry_backoff": 1,
    "retry_backoff_max": 60,
    "retry_jitter": True,
    "max_retries": None,  # Karmada down for minutes must not lose a run
}


def advance_request(run_id: int) -> None:
    """Ask for the run to be advanced: one task queued per run at most (a request while one
    waits is folded into it; see ``portal.execution.claims``)."""
    if execution.claims.should_enqueue(run_id):
        run_advance.delay(run_id)


@shared_task(**RETRY)
def run_advance(run_id: int) -> None:
    """One turn of the run's advance; another request at the tail of the queue when work is
    left (so other runs get a worker in between) or when asked for meanwhile."""
    again = execution.run_advance_turn(run_id)
    if again == execution.AGAIN:
        advance_request(run_id)
    elif again is not None:
        run_advance.apply_async((run_id,), countdown=again)


@shared_task(**RETRY)
def unit_resume(unit_id: int, by: str) -> None:
    from portal.execution.resume import unit_resume as resume
    from portal.models import UnitRun

    unit = UnitRun.objects.filter(pk=unit_id).first()
    if unit is not None:
        resume(unit, by=by)


@shared_task(**RETRY)
def policies_sync() -> None:
    execution.policies_sync()


@shared_task(**RETRY)
def sites_sync() -> None:
    """List the Clusters once and fold them into Sites, then the policies."""
    items, _ = gateway.list_objects(gateway.CLUSTER)
    seen = set()
    for cluster in items:
        site, _changed = execution.cluster_observe(cluster)
        seen.add(site.name)
    from sites.models import Site

    for name in Site.objects.exclude(name__in=seen).values_list("name", flat=True):
        execution.cluster_deleted(name)
    execution.policies_sync()


@shared_task(**RETRY)
def bindings_resync() -> None:
    """One list of the step workflows' bindings catches anything a watch missed."""
    items, _ = gateway.list_objects(gateway.RESOURCE_BINDING)
    for run_id in sorted(execution.bindings_observe(items)):
        advance_request(run_id)


@shared_task(**RETRY)
def step_workflows_cleanup() -> None:
    """Finished step workflows leave karmada-apiserver after ``PORTAL_KEEP_FINISHED_SECONDS``."""
    execution.step_workflows_cleanup()


@shared_task
def resync() -> None:
    """The periodic safety net (Celery beat): Karmada calls here are one list per kind,
    whatever the number of runs; everything else is the database."""
    if gateway.configured():
        sites_sync.delay()
        bindings_resync.delay()
        step_workflows_cleanup.delay()
    # The watcher writes the webhook's queued decisions every second; this is for when it
    # does not run.
    try:
        queue.decisions_flush()
    except queue.QueueUnavailable as exc:
        log.warning("webhook decisions stay queued: %s", exc)
    for run_id in execution.failover_check():
        advance_request(run_id)
    for run_id in execution.stale_runs():
        advance_request(run_id)
