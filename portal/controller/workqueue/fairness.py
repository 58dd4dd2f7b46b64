"""Fairness between projects: the turns a big run still needs go through its project.

A turn that leaves work (``Result(requeue=True)``: a fan-out bigger than one turn) does not
ask for the run's next turn straight away. The run joins its project's waiting set, and each
project has at most one such continuation queued or running at a time, its *holder*. When the
holder's turn ends, the project's run that has waited longest gets the next one. Projects take
turns through the queue's order, so a project with ten big runs holds one worker at a time, as
a project with one big run does.

What a user waits on (a submission's first advance, an advance because a unit ended) goes
ahead of continuations and the periodic housekeeping (the broker's priorities,
``portal.controller.enqueue``), and through a *prompt lane* per project: a project has at most
``PORTAL_PROJECT_ADVANCES`` such advances queued or running at a time, and its further requests
wait in the project's own set, oldest first, until one of them ends: another project's
one-step run waits behind at most ``PORTAL_PROJECT_ADVANCES`` advances of each other project,
whatever they submit (a thousand small runs each ending a unit every second included). A run
already in the lane (waiting, or its advance queued or running) is not added twice: a request
that comes while its advance runs waits until it ends.

State lives in Redis next to the broker. A holder (or a prompt slot) whose message is lost
expires after ``HOLDER_TTL_S`` (a prompt slot after ``PROMPT_SLOT_TTL_S``). Once its advance
has started, the slot or holder is a *lease* (``advance_lease``): ``RUNNING_TTL_S`` long and
renewed every ``RENEW_S`` by the process running the advance, as a Kubernetes controller
renews its Lease. A worker killed mid-advance (SIGKILL, OOM, the hard time limit) stops
renewing, so its slot is free ``RUNNING_TTL_S`` later however long an advance may take; the
resync dispatches projects left without one. With no Redis (the embedded demo) everything is
enqueued at once.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import cast

import redis
from django.conf import settings

from portal.controller.workqueue.claims import redis_client
from portal.models import WorkflowRun

log = logging.getLogger(__name__)

WAITING = "portal:turns:waiting:%d"  # sorted set: run ids, by when they asked for a turn
HOLDER = "portal:turns:holder:%d"  # the run whose continuation is queued or running
PROJECTS = "portal:turns:projects"  # projects with runs waiting
# Longer than a continuation waits in the queue behind other projects' turns and lasts.
HOLDER_TTL_S = 600
# A prompt advance is one turn (``PORTAL_ADVANCE_TURN_SECONDS``) behind at most each project's
# ``PORTAL_PROJECT_ADVANCES``: a slot lost with a killed worker stalls its run no longer than
# a lost queued mark does (``claims``); a slot that outlives it only lets one more through.
PROMPT_SLOT_TTL_S = 120
# Once its advance has started, a slot (or a holder) is a lease the running advance renews
# every RENEW_S: a worker killed in the middle of it gives the slot back this long after,
# whatever a turn lasts. Several renewals fit in it, so one late renewal on a loaded host
# (a thread of the worker process, a Redis round trip) does not lose a live advance's slot.
RUNNING_TTL_S = 10
RENEW_S = 2.0
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
    client = redis_client()
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
    client = redis_client()
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
    client = redis_client()
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
    client = redis_client()
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


# -- the prompt lane: first advances and advances because a unit ended ----------------------
PROMPT_WAITING = "portal:prompt:waiting:%d"  # sorted set: run ids, by when they asked
PROMPT_SLOTS = "portal:prompt:slots:%d"  # sorted set: run ids in flight, by when they expire
PROMPT_PROJECTS = "portal:prompt:projects"  # projects with runs waiting or in flight

# Expired slots go; then the oldest waiting runs not in flight already take the free slots.
# A run whose advance runs keeps its place in the waiting set until that advance ends (its
# request came after the advance read the units, so it needs one more).
_PROMPT_DISPATCH = """
redis.call('zremrangebyscore', KEYS[1], '-inf', ARGV[1])
local free = tonumber(ARGV[3]) - redis.call('zcard', KEYS[1])
local out = {}
if free > 0 then
  local candidates = redis.call('zrange', KEYS[2], 0, free + redis.call('zcard', KEYS[1]))
  for _, run in ipairs(candidates) do
    if free <= 0 then break end
    if not redis.call('zscore', KEYS[1], run) then
      redis.call('zrem', KEYS[2], run)
      redis.call('zadd', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[2]), run)
      table.insert(out, run)
      free = free - 1
    end
  end
end
if redis.call('zcard', KEYS[1]) == 0 and redis.call('zcard', KEYS[2]) == 0 then
  redis.call('srem', KEYS[3], ARGV[4])
else
  redis.call('sadd', KEYS[3], ARGV[4])
end
return out
"""


def _prompt_keys(project: int) -> list[str]:
    return [PROMPT_SLOTS % project, PROMPT_WAITING % project, PROMPT_PROJECTS]


def _prompt_dispatch(client: redis.Redis, project: int) -> list[Turn]:
    keys = _prompt_keys(project)
    slots = max(1, int(settings.PORTAL_PROJECT_ADVANCES))
    runs = cast(
        list[bytes],
        client.eval(
            _PROMPT_DISPATCH,
            len(keys),
            *keys,
            str(time.time()),
            str(PROMPT_SLOT_TTL_S),
            str(slots),
            str(project),
        ),
    )
    return [(project, int(run)) for run in runs or []]


def prompt_request(project: int, run_id: int) -> list[Turn]:
    """A user waits on the run's advance (its first, or a unit ended): it joins its
    project's prompt lane. Returns the advances to enqueue now (at most the project's free
    slots; none while the project has ``PORTAL_PROJECT_ADVANCES`` in flight)."""
    client = redis_client()
    if client is None:
        return [(project, run_id)]
    try:
        client.zadd(PROMPT_WAITING % project, {str(run_id): time.time()}, nx=True)
        return _prompt_dispatch(client, project)
    except redis.RedisError as exc:
        log.warning("run %s: advance not ordered by project: %s", run_id, exc)
        return [(project, run_id)]


# A holder is renewed only while it is still this run (a released holder stays released).
_HOLDER_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('expire', KEYS[1], ARGV[2]) end
return 0
"""


def _renew(client: redis.Redis, project: int, run_id: int, prompt: bool) -> None:
    if prompt:
        # XX: a slot already handed back (or expired and given away) is not taken again.
        client.zadd(PROMPT_SLOTS % project, {str(run_id): time.time() + RUNNING_TTL_S}, xx=True)
    else:
        client.eval(_HOLDER_RENEW, 1, HOLDER % project, str(run_id), str(RUNNING_TTL_S))


def lease_renew(project: int, run_id: int, *, prompt: bool) -> None:
    """The run's advance has started, or is still running: its slot (``prompt``) or its
    project's holder lasts ``RUNNING_TTL_S`` from now."""
    client = redis_client()
    if client is None:
        return
    try:
        _renew(client, project, run_id, prompt)
    except redis.RedisError as exc:
        log.warning("project %s: lease of run %s not renewed: %s", project, run_id, exc)


@contextlib.contextmanager
def advance_lease(project: int, run_id: int, *, prompt: bool) -> Iterator[None]:
    """Hold the advance's slot (or holder) for as long as the block runs, and no longer than
    ``RUNNING_TTL_S`` once the process running it is gone."""
    if redis_client() is None:
        yield
        return
    lease_renew(project, run_id, prompt=prompt)
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(RENEW_S):
            lease_renew(project, run_id, prompt=prompt)

    thread = threading.Thread(target=renew, name=f"lease-{run_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=RENEW_S)


def prompt_done(project: int, run_id: int) -> list[Turn]:
    """The run's prompt advance has ended: its slot goes to the project's next waiting run."""
    client = redis_client()
    if client is None:
        return []
    try:
        client.zrem(PROMPT_SLOTS % project, str(run_id))
        return _prompt_dispatch(client, project)
    except redis.RedisError as exc:
        log.warning("project %s: slot of run %s not released: %s", project, run_id, exc)
        return []


def prompt_dispatch_all() -> list[Turn]:
    """For the resync: the waiting runs of projects whose slots expired or were never
    handed on (Redis briefly away when an advance ended)."""
    client = redis_client()
    if client is None:
        return []
    try:
        projects = sorted(int(p) for p in cast(set[bytes], client.smembers(PROMPT_PROJECTS)))
        return [turn for project in projects for turn in _prompt_dispatch(client, project)]
    except redis.RedisError as exc:
        log.warning("prompt advances not dispatched: %s", exc)
        return []


def nobody_waits(project: int) -> bool:
    """Whether a continuation of ``project`` (its holder's turn) may go on past its budget:
    no other project has a run waiting or a turn queued or running, no other run of the
    project waits, and no prompt advance of any project is waiting or in flight (a prompt
    advance goes ahead of turns, and a worker busy with a long turn may be the one it needs).
    False without Redis, or when Redis cannot say."""
    client = redis_client()
    if client is None:
        return False
    try:
        pipe = client.pipeline(transaction=False)
        pipe.smembers(PROJECTS)
        pipe.zcard(WAITING % project)
        pipe.scard(PROMPT_PROJECTS)
        projects, waiting, prompt = pipe.execute()
    except redis.RedisError:
        return False
    others = {int(p) for p in cast(set[bytes], projects)} - {project}
    return not others and not waiting and not prompt
