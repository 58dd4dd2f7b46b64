"""Celery tasks: thin wrappers that load by id and call a service.

Every task has Celery's soft and hard time limits (``CELERY_TASK_SOFT_TIME_LIMIT``,
``CELERY_TASK_TIME_LIMIT``): nothing a user submits can hold a worker process for good.
Only transient Karmada errors are retried (with exponential backoff and jitter); a worker that
dies mid-task leaves the message unacknowledged (``acks_late``) and another worker runs it
again, which the services make harmless.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import redis
from celery import shared_task
from django.utils import timezone

from portal import execution
from portal.admission import queue
from portal.execution import locks
from portal.karmada import client, errors, lists, resources

log = logging.getLogger(__name__)

RETRY: dict[str, Any] = {
    "autoretry_for": (errors.TransientError,),
    "retry_backoff": 1,
    "retry_backoff_max": 60,
    "retry_jitter": True,
    "max_retries": None,  # Karmada down for minutes must not lose a run
}


# The broker's priorities (Redis: one list per step of kombu's ``priority_steps``, 0 first):
# what a user waits on (a submission, a unit that ended, a resume) goes first; a big run's
# further turns and the periodic housekeeping, which can take seconds each on a big fleet,
# come after it, in their order. Before this a one-step run waited behind the resync's
# list of every binding and a fan-out's next turn for as long as they took.
PROMPT = 0
BULK = 6


def advance_request(run_id: int) -> None:
    """Ask for the run to be advanced: one task queued per run at most (a request while one
    waits is folded into it; see ``portal.execution.claims``), through its project's prompt
    lane (``portal.execution.fairness``): a project's many runs do not queue ahead of
    another project's."""
    if execution.claims.should_enqueue(run_id):
        project = execution.fairness.project_of(run_id)
        _prompt_enqueue(execution.fairness.prompt_request(project, run_id))


def _prompt_enqueue(turns: list[tuple[int, int]]) -> None:
    for project, run_id in turns:
        run_advance.apply_async((run_id,), {"project": project, "prompt": True}, priority=PROMPT)


def _turns_enqueue(turns: list[tuple[int, int]]) -> None:
    for project, run_id in turns:
        run_advance.apply_async((run_id,), {"project": project}, priority=BULK)


@shared_task(**RETRY)
def run_advance(run_id: int, project: int | None = None, prompt: bool = False) -> None:
    """One turn of the run's advance. ``project`` is given for an advance that holds one of
    its project's slots until it ends (``execution.fairness``): a prompt one (``prompt``: a
    first advance, a unit ended) or a continuation (a turn after a cut one)."""
    again = None
    lease = (
        execution.fairness.advance_lease(project, run_id, prompt=prompt)
        if project is not None
        else contextlib.nullcontext()
    )
    try:
        with lease:
            again = execution.run_advance_turn(run_id)
    finally:
        if project is not None and prompt:
            _prompt_enqueue(execution.fairness.prompt_done(project, run_id))
        elif project is not None:
            _turns_enqueue(execution.fairness.release(project, run_id))
    if again == execution.CUT:
        if project is None:
            project = execution.fairness.project_of(run_id)
        _turns_enqueue(execution.fairness.wait_turn(project, run_id))
    elif again == execution.AGAIN:
        advance_request(run_id)
    elif again is not None:
        run_advance.apply_async((run_id,), countdown=again, priority=PROMPT)


@shared_task(**RETRY)
def unit_resume(unit_id: int, by: str) -> None:
    from portal.execution.resume import unit_resume as resume
    from portal.models import UnitRun

    unit = UnitRun.objects.filter(pk=unit_id).first()
    if unit is not None:
        resume(unit, by=by)


@shared_task(**RETRY, priority=BULK)
def policies_sync() -> None:
    execution.policies_sync()


# A housekeeping task queued and not started yet: beat's next resync does not queue another
# (it would do the same work again). Under a flood of small runs the bulk queue held five
# resyncs' worth of them, each listing every binding, and a worker process busy with one is
# not free for what users wait on. The mark expires, so a lost message stops nothing for long.
HOUSEKEEPING_QUEUED = "portal:housekeeping:queued:%s"
_HOUSEKEEPING_MARK_S = 120


def _housekeeping_enqueue(task: Any) -> None:
    client = execution.claims.redis_client()
    if client is not None:
        key = HOUSEKEEPING_QUEUED % task.name
        try:
            if not client.set(key, "1", nx=True, ex=_HOUSEKEEPING_MARK_S):
                return
        except redis.RedisError:
            pass  # a spare task is harmless
    try:
        task.delay()
    except Exception:
        _housekeeping_started(task.name)  # not queued after all: the next resync tries again
        raise


def _housekeeping_started(name: str) -> None:
    client = execution.claims.redis_client()
    if client is not None:
        with contextlib.suppress(redis.RedisError):
            client.delete(HOUSEKEEPING_QUEUED % name)


@shared_task(**RETRY, priority=BULK)
def sites_sync() -> None:
    """List the Clusters once and fold them into Sites, then the policies."""
    _housekeeping_started(sites_sync.name)
    items, _ = lists.list_objects(resources.CLUSTER)
    seen = set()
    for cluster in items:
        site, _changed = execution.cluster_observe(cluster)
        seen.add(site.name)
    from sites.models import Site

    for name in Site.objects.exclude(name__in=seen).values_list("name", flat=True):
        execution.cluster_deleted(name)
    execution.policies_sync()


@shared_task(**RETRY, priority=BULK)
def bindings_resync() -> None:
    """One list of the step workflows' bindings catches anything a watch missed. Read and
    folded a chunk at a time: a fan-out's ten thousand bindings in one answer held a few
    hundred MB in the worker, and more with every run. A unit in flight whose step workflow
    has no binding in the list and is gone too is run again or ended
    (``execution.vanished``)."""
    _housekeeping_started(bindings_resync.name)
    ended: set[int] = set()
    seen: set[str] = set()
    listed_at = timezone.now()
    for items, _ in lists.list_chunks(resources.RESOURCE_BINDING):
        ended |= execution.bindings_observe(items)
        seen |= execution.vanished.bound_names(items)
    ended |= set(execution.vanished.vanished_check(seen, listed_at))
    for run_id in sorted(ended):
        advance_request(run_id)


@shared_task(**RETRY, priority=BULK)
def step_workflows_cleanup() -> None:
    """Finished step workflows leave karmada-apiserver after ``PORTAL_KEEP_FINISHED_SECONDS``."""
    _housekeeping_started(step_workflows_cleanup.name)
    execution.step_workflows_cleanup()


@shared_task(priority=BULK)
def resync() -> None:
    """The periodic safety net (Celery beat): Karmada calls here are one list per kind
    (in chunks of ``lists.LIST_CHUNK`` items), whatever the number of runs; everything else
    is the database."""
    if client.configured():
        for task in (sites_sync, bindings_resync, step_workflows_cleanup):
            _housekeeping_enqueue(task)
    # The watcher writes the webhook's queued decisions every second; this is for when it
    # does not run.
    try:
        queue.decisions_flush()
    except queue.QueueUnavailable as exc:
        log.warning("webhook decisions stay queued: %s", exc)
    for run_id in execution.failover_check():
        advance_request(run_id)
    # Steps Karmada refused (a cordon, a taint, an affinity, a member's refusal) for longer
    # than their site's grace are placed again elsewhere.
    for run_id in execution.refusals_replace():
        advance_request(run_id)
    # Locks whose holder ended, vanished or passed its deadline are given to their waiters.
    for run_id in locks.sweep():
        advance_request(run_id)
    # Runs waiting for their project's turn are moved by it, not by the resync; a project
    # whose turn was lost gets one again here.
    waiting = execution.fairness.waiting_runs()
    for run_id in execution.stale_runs():
        if run_id not in waiting:
            advance_request(run_id)
    _turns_enqueue(execution.fairness.dispatch_all())
    _prompt_enqueue(execution.fairness.prompt_dispatch_all())


@shared_task(**RETRY, priority=BULK)
def step_workflows_delete(names: list[str]) -> None:
    """The step workflows of a deleted run (``run_services.run_delete``); a 404 counts as
    done, so a redelivered task is harmless."""
    for name in names:
        client.delete(resources.WORKFLOW, name)
