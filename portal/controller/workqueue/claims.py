"""One reconcile per run at a time, and requests for it coalesced: the workqueue's
"processing" and "dirty" sets, as a Kubernetes workqueue keeps them per key.

Every unit that ends asks for its run to be reconciled. Unbounded, a big run would put a
message per unit in the queue, every worker process would reconcile the same run at once
(each walking every unit and racing to create the same objects), and other users' runs would
wait behind them. Two things bound it:

* **A lock per run**: a PostgreSQL session advisory lock (``pg_try_advisory_lock``), taken
  without waiting. The database drops it when the session ends, so a worker killed while it
  holds it (SIGKILL, OOM, a hard time limit) frees it at once; nothing expires on a guess.
* **Coalescing** (Redis, next to the broker): ``QUEUED`` marks a run that has a task in the
  queue that has not started; further requests add nothing. A task clears the mark as it
  starts, so a request that comes after it reads the units enqueues a new task. A task that
  finds the run locked sets ``AGAIN``; the holder looks at it after unlocking and enqueues
  one more reconcile (at the tail of the queue, behind other runs' work).

A run has therefore at most one task queued and one running, and a big run's advance is cut
into turns (``PORTAL_ADVANCE_BATCH`` creations or ``PORTAL_ADVANCE_TURN_SECONDS``), each
followed by a request at the tail of the queue: every run with work gets a turn in order.

With no Redis (the embedded demo, every process on one machine) the ``QUEUED`` mark is a file
in ``PORTAL_VAR_DIR/advance-queued/``, created with ``O_EXCL`` (as Redis's ``SET NX``), so a
fan-out does not leave a reconcile per unit change queued in front of the next run. The lock
is then an ``flock`` on a file beside it, and a locked run is tried again a second later
(there is nobody to ask for one more reconcile).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis
from django.conf import settings
from django.db import connection

log = logging.getLogger(__name__)

# The advisory lock's first key: the portal's own lock space (two int4 keys: this, run id).
_LOCK_SPACE = 0x50524E  # "PRN"
QUEUED = "portal:advance:queued:%d"
AGAIN = "portal:advance:again:%d"
# A mark outlives no lost message by long: a queued task that never runs (the broker lost
# it) must not keep the run from being enqueued again after this.
_MARK_TTL_S = 120
_REDIS_TIMEOUT_S = 2.0

_client: redis.Redis | None = None
_client_url = ""


def redis_client() -> redis.Redis | None:
    """The Redis next to the broker (None without one): the marks here, the workqueue's
    lanes and the housekeeping marks."""
    global _client, _client_url
    url = settings.REDIS_URL
    if not url:
        return None
    if _client is None or _client_url != url:
        _client = redis.Redis.from_url(
            url, socket_timeout=_REDIS_TIMEOUT_S, socket_connect_timeout=_REDIS_TIMEOUT_S
        )
        _client_url = url
    return _client


def _mark_file(run_id: int) -> Path:
    return Path(settings.VAR_DIR) / "advance-queued" / str(run_id)


def _file_mark_set(run_id: int) -> bool:
    """The ``QUEUED`` mark without Redis: True when this call set it."""
    path = _mark_file(run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(3):
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return True
        except FileExistsError:
            pass
        try:
            age = time.time() - path.stat().st_mtime
        except FileNotFoundError:
            continue  # its task started meanwhile: this request needs a task of its own
        if age > _MARK_TTL_S:
            # As the Redis key's expiry: a mark whose task never ran must not block the run.
            path.touch()
            return True
        return False
    return True  # cannot tell: a spare task is harmless


def should_enqueue(run_id: int) -> bool:
    """Mark the run as having a queued advance; False when one is queued already (this
    request is folded into it). Redis unreachable: True (a spare task is harmless)."""
    client = redis_client()
    if client is None:
        try:
            return _file_mark_set(run_id)
        except OSError as exc:
            log.warning("advance of run %s not coalesced: %s", run_id, exc)
            return True
    try:
        return bool(client.set(QUEUED % run_id, "1", nx=True, ex=_MARK_TTL_S))
    except redis.RedisError as exc:
        log.warning("advance of run %s not coalesced: %s", run_id, exc)
        return True


def started(run_id: int) -> None:
    """The queued advance has started: requests from now on need a task of their own."""
    client = redis_client()
    if client is None:
        with contextlib.suppress(OSError):
            _mark_file(run_id).unlink(missing_ok=True)
        return
    with contextlib.suppress(redis.RedisError):
        client.delete(QUEUED % run_id)


def ask_again(run_id: int) -> bool:
    """The run is locked by another advance: tell it to enqueue one more. False when there
    is no Redis to tell it through (the caller then retries later itself)."""
    client = redis_client()
    if client is None:
        return False
    try:
        client.set(AGAIN % run_id, "1", ex=_MARK_TTL_S)
    except redis.RedisError:
        return False
    return True


def asked_again(run_id: int) -> bool:
    """Whether an advance was asked for while this one held the lock (and clear it)."""
    client = redis_client()
    if client is None:
        return False
    try:
        return bool(client.delete(AGAIN % run_id))
    except redis.RedisError:
        return True  # cannot tell: one more advance is harmless


def _advisory(sql: str, run_id: int) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(sql, [_LOCK_SPACE, run_id])
        row = cursor.fetchone()
    return row[0] if row else None


@contextlib.contextmanager
def run_lock(run_id: int) -> Iterator[bool]:
    """Hold the run's advance lock for the block; yields False (at once) when another
    session holds it."""
    if connection.vendor != "postgresql":
        with _file_lock(run_id) as got_file:
            yield got_file
        return
    # A session lock must not be taken inside a transaction that could be rolled back
    # around it; the advance runs in autocommit.
    got = bool(_advisory("SELECT pg_try_advisory_lock(%s, %s)", run_id))
    try:
        yield got
    finally:
        if got:
            try:
                _advisory("SELECT pg_advisory_unlock(%s, %s)", run_id)
            except Exception:  # noqa: BLE001 - a broken session has dropped the lock already
                log.warning("could not unlock run %s; closing the session", run_id)
                connection.close()


@contextlib.contextmanager
def _file_lock(run_id: int) -> Iterator[bool]:
    """The lock without PostgreSQL (the embedded demo's SQLite, its worker processes on one
    machine): ``flock`` without waiting, which the kernel drops when the process dies, as
    PostgreSQL drops a session lock."""
    path = Path(settings.VAR_DIR) / "advance-locks" / str(run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


# -- an advance that keeps failing -------------------------------------------------------------
TRIES = "portal:advance:tries:%d"
LAST_ERROR = "portal:advance:error:%d"
# Long enough to span the retries of one failing advance; a run left alone forgets them.
_TRIES_TTL_S = 3600


def tries_begin(run_id: int) -> int | None:
    """Count an advance that starts (its end resets the count, so a count that grows is one
    of advances that failed or never ended: killed by the hard time limit). None: no Redis."""
    client = redis_client()
    if client is None:
        return None
    try:
        pipe = client.pipeline()
        pipe.incr(TRIES % run_id)
        pipe.expire(TRIES % run_id, _TRIES_TTL_S)
        count, _ = pipe.execute()
    except redis.RedisError:
        return None
    return int(count)


def tries_end(run_id: int) -> None:
    client = redis_client()
    if client is not None:
        with contextlib.suppress(redis.RedisError):
            client.delete(TRIES % run_id, LAST_ERROR % run_id)


def error_record(run_id: int, message: str) -> None:
    client = redis_client()
    if client is not None:
        with contextlib.suppress(redis.RedisError):
            client.set(LAST_ERROR % run_id, message[:2000], ex=_TRIES_TTL_S)


def error_last(run_id: int) -> str:
    client = redis_client()
    if client is None:
        return ""
    try:
        value = client.get(LAST_ERROR % run_id)
    except redis.RedisError:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else ""
