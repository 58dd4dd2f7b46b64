"""The periodic safety net (Celery beat's ``resync``): what a lost watch event, a lost task or
a lost site would leave undone. Karmada calls here are one list per kind (in chunks of
``lists.LIST_CHUNK`` items), whatever the number of runs; everything else is the database.

The housekeeping that lists Karmada (Clusters, bindings, finished step workflows) runs as
tasks of its own behind what users wait on, one of each queued at a time: a housekeeping task
queued and not started yet is not queued again by the next resync (it would do the same work
again, and a worker process busy with it is not free for users' runs). The mark expires, so a
lost message stops nothing for long. A housekeeping task that took ``d`` seconds then rests
``d * (1 / PORTAL_HOUSEKEEPING_SHARE - 1)`` before it is queued again: its share of a worker
process stays bounded (5 % by default) however many objects the fleet's history holds (a list
of 20,000 bindings every 30 s kept one worker process listing without pause). A task done in
under ``HOUSEKEEPING_REST_AFTER_S`` does not rest: a small fleet's lists still run at every
resync.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Iterator

import redis
from django.conf import settings
from django.utils import timezone

from portal.controller import (
    bindings,
    cleanup,
    enqueue,
    failover,
    locks,
    refusals,
    sync,
    vanished,
    workqueue,
)
from portal.controller.workqueue import claims
from portal.karmada import client, lists, resources
from sites.models import Site

log = logging.getLogger(__name__)

SITES_SYNC = "portal.tasks.sites_sync"
BINDINGS_RESYNC = "portal.tasks.bindings_resync"
STEP_WORKFLOWS_CLEANUP = "portal.tasks.step_workflows_cleanup"
HOUSEKEEPING_QUEUED = "portal:housekeeping:queued:%s"
HOUSEKEEPING_MARK_S = 120
HOUSEKEEPING_RESTING = "portal:housekeeping:resting:%s"
HOUSEKEEPING_REST_AFTER_S = 1.0


def resync() -> None:
    """Queue the housekeeping, write the webhook's queued decisions (for when the watcher
    does not run), and ask for the runs nothing else would move on."""
    if client.configured():
        for name in (SITES_SYNC, BINDINGS_RESYNC, STEP_WORKFLOWS_CLEANUP):
            _housekeeping_enqueue(name)
    unreadable = bindings.decisions_written(wait=False)
    if unreadable is not None:
        log.warning("webhook decisions stay queued: %s", unreadable)
    for run_id in failover.failover_check():
        workqueue.add(run_id)
    # Steps Karmada refused (a cordon, a taint, an affinity, a member's refusal) for longer
    # than their site's grace are placed again elsewhere.
    for run_id in refusals.refusals_replace():
        workqueue.add(run_id)
    # Locks whose holder ended, vanished or passed its deadline are given to their waiters.
    for run_id in locks.sweep():
        workqueue.add(run_id)
    # Runs waiting for their project's turn are moved by it, not by the resync; a project
    # whose turn was lost gets one again here.
    waiting = workqueue.waiting_runs()
    for run_id in failover.stale_runs():
        if run_id not in waiting:
            workqueue.add(run_id)
    workqueue.dispatch_lost()


def sites_sync() -> None:
    """List the Clusters once and fold them into Sites, then the policies."""
    with _housekeeping(SITES_SYNC):
        items, _ = lists.list_objects(resources.CLUSTER)
        seen = set()
        for cluster in items:
            site, _changed = sync.cluster_observe(cluster)
            seen.add(site.name)
        for name in Site.objects.exclude(name__in=seen).values_list("name", flat=True):
            sync.cluster_deleted(name)
        sync.policies_sync()


def bindings_resync() -> None:
    """One list of the step workflows' bindings catches anything a watch missed. Read and
    folded a chunk at a time: a fan-out's ten thousand bindings in one answer held a few
    hundred MB in the worker, and more with every run. A unit in flight whose step workflow
    has no binding in the list and is gone too is run again or ended (``vanished``)."""
    ended: set[int] = set()
    with _housekeeping(BINDINGS_RESYNC):
        seen: set[str] = set()
        listed_at = timezone.now()
        for items, _ in lists.list_chunks(resources.RESOURCE_BINDING):
            ended |= bindings.bindings_observe(items)
            seen |= vanished.bound_names(items)
        ended |= set(vanished.vanished_check(seen, listed_at))
    for run_id in sorted(ended):
        workqueue.add(run_id)


def step_workflows_cleanup() -> None:
    """Finished step workflows leave karmada-apiserver after ``PORTAL_KEEP_FINISHED_SECONDS``."""
    with _housekeeping(STEP_WORKFLOWS_CLEANUP):
        cleanup.step_workflows_cleanup()


def _housekeeping_enqueue(name: str) -> None:
    client = claims.redis_client()
    if client is not None:
        try:
            if client.exists(HOUSEKEEPING_RESTING % name):
                return
            if not client.set(HOUSEKEEPING_QUEUED % name, "1", nx=True, ex=HOUSEKEEPING_MARK_S):
                return
        except redis.RedisError:
            pass  # a spare task is harmless
    try:
        enqueue.housekeeping(name)
    except Exception:
        _housekeeping_started(name)  # not queued after all: the next resync tries again
        raise


def _housekeeping_started(name: str) -> None:
    client = claims.redis_client()
    if client is not None:
        with contextlib.suppress(redis.RedisError):
            client.delete(HOUSEKEEPING_QUEUED % name)


@contextlib.contextmanager
def _housekeeping(name: str) -> Iterator[None]:
    """Run a housekeeping task, then let it rest in proportion to what it took (not after a
    failure: the next resync queues it again)."""
    _housekeeping_started(name)
    started = time.monotonic()
    yield
    housekeeping_rest(name, time.monotonic() - started)


def housekeeping_rest(name: str, took: float) -> float:
    """Mark ``name`` as resting for ``took`` times the share's complement; returns the rest
    in seconds (0 for a task done in under ``HOUSEKEEPING_REST_AFTER_S``)."""
    share = min(max(settings.PORTAL_HOUSEKEEPING_SHARE, 0.001), 1.0)
    rest = took * (1 / share - 1)
    client = claims.redis_client()
    if took < HOUSEKEEPING_REST_AFTER_S or rest < 1 or client is None:
        return 0.0
    with contextlib.suppress(redis.RedisError):
        client.set(HOUSEKEEPING_RESTING % name, "1", ex=math.ceil(rest))
    return rest
