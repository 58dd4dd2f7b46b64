"""Celery tasks: thin wrappers that load by id and call a service.

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


@shared_task(**RETRY)
def run_advance(run_id: int) -> None:
    execution.run_advance(run_id)


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
        run_advance.delay(run_id)


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
        run_advance.delay(run_id)
    for run_id in execution.stale_runs():
        run_advance.delay(run_id)
