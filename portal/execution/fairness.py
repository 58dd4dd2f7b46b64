"""Fairness between projects: the turns a big run still needs go through its project.

A turn that leaves work (``turns.CUT``: a fan-out bigger than one turn) does not ask for the
run's next turn straight away. The run joins its project's waiting set, and each project has
at most one such continuation queued or running at a time, its *holder*. When the holder's turn
ends, the project's run that has waited longest gets the next one. Projects take turns through
the queue's order, so a project with ten big runs holds one worker at a time, as a project
with one big run does; before, every run had a turn of its own and a project with many big
runs had as many turns.

What a user waits on (a submission's first advance, an advance because a unit ended) does not
go through here: it is enqueued at once, ahead of continuations and the periodic housekeeping
(the broker's priorities, ``portal.tasks``).

State lives in Redis next to the broker. A holder that never reports back (its worker killed
and the message lost) expires after ``HOLDER_TTL_S``; the resync dispatches projects left
without a holder. With no Redis (the embedded demo) a continuation is enqueued at once.
"""

from __future__ import annotations

import logging
import time
from typing import cast

import redis

from portal.execution.claims import redis_client as _redis
from portal.models import WorkflowRun

log = logging.getLogger(__name__)

WAITING = "portal:turns:waiting:%d"  # sorted set: run ids, by when they asked for a turn
HOLDER = "portal:turns:holder:%d"  # the run whose continuation is queued or running
PROJECTS = "portal:turns:projects"  # projects with runs waiting
# Longer than a continuation waits in the queue behind other projects' turns and lasts.
HOLDER_TTL_S = 600
NO_PROJECT = 0

# The next waiting run of a project becomes its holder, if it has none (atomic, so two
# workers ending turns at once never both dispatch).
_DISPATCH = """
if redis.call('exists', KEYS[1]) == 1 then return false end
local popped = redis.call('zpopmin', KEYS[2])
if #popped == 0 then redis.call('srem', KEYS[3], ARGV[2]); return false end
redis.call('set', KEYS[1], popped[1], 'EX', ARGV[1])
return popped[1]
"""
# A run asks for a turn, unless its continuation is queued already (it is the holder).
_WAIT = """
if redis.call('get', KEYS[1]) == ARGV[1] then return 0 end
redis.call('zadd', KEYS[2], 'NX', ARGV[2], ARGV[1])
redis.call('sadd', KEYS[3], ARGV[3])
return 1
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""

Turn = tuple[int, int]  # (project, run): a continuation to enqueue


def project_of(run_id: int) -> int:
    project = WorkflowRun.objects.filter(pk=run_id).values_list("project_id", flat=True).first()
    return int(project) if project else NO_PROJECT


def _dispatch(client: redis.Redis, project: int) -> list[Turn]:
    keys = [HOLDER % project, WAITING % project, PROJECTS]
    run = cast(
        bytes | None, client.eval(_DISPATCH, len(keys), *keys, str(HOLDER_TTL_S), str(project))
    )
    return [(project, int(run))] if run else []


def wait_turn(project: int, run_id: int) -> list[Turn]:
    """The run has work left after its turn: queue it behind its project's other big runs.
    Returns the continuations to enqueue now (this run's, when its project has none)."""
    client = _redis()
    if client is None:
        return [(project, run_id)]
    keys = [HOLDER % project, WAITING % project, PROJECTS]
    try:
        client.eval(_WAIT, len(keys), *keys, str(run_id), str(time.time()), str(project))
        return _dispatch(client, project)
    except redis.RedisError as exc:
        log.warning("run %s: next turn not ordered by project: %s", run_id, exc)
        return [(project, run_id)]


def release(project: int, run_id: int) -> list[Turn]:
    """The project's continuation (run ``run_id``) has ended: the next waiting run's turn."""
    client = _redis()
    if client is None:
        return []
    try:
        client.eval(_RELEASE, 1, HOLDER % project, str(run_id))
        return _dispatch(client, project)
    except redis.RedisError as exc:
        log.warning("project %s: turn of run %s not released: %s", project, run_id, exc)
        return []


def dispatch_all() -> list[Turn]:
    """For the resync: a continuation for every project with runs waiting and no holder (its
    holder's message lost, or Redis briefly away when a turn ended)."""
    client = _redis()
    if client is None:
        return []
    try:
        projects = sorted(int(p) for p in cast(set[bytes], client.smembers(PROJECTS)))
        return [turn for project in projects for turn in _dispatch(client, project)]
    except redis.RedisError as exc:
        log.warning("turns not dispatched: %s", exc)
        return []


def waiting_runs() -> set[int]:
    """Runs waiting for their project's turn, and the holders whose turn is queued: the
    resync leaves them to it. (A holder's continuation may wait in the queue longer than
    ``PORTAL_STALE_SECONDS`` behind other projects' turns; advancing it then as a stale run
    gave its project an extra turn each resync, ahead of everyone.) A project stays in
    ``PROJECTS`` while it has a holder or waiting runs."""
    client = _redis()
    if client is None:
        return set()
    try:
        projects = [int(p) for p in cast(set[bytes], client.smembers(PROJECTS))]
        runs = {
            int(r) for p in projects for r in cast(list[bytes], client.zrange(WAITING % p, 0, -1))
        }
        holders = cast(
            list[bytes | None], client.mget([HOLDER % p for p in projects]) if projects else []
        )
        return runs | {int(h) for h in holders if h}
    except redis.RedisError:
        return set()
