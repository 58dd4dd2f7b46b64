"""The webhook's decisions on their way to the database: queued by the admission (one Redis
command), written by whoever drains the queue (the watcher every second and before it reads a
binding's site, the beat resync). With no queue configured (the embedded demo) or Redis
unreachable, a decision is written at once.

The worker side imports this module, never the decision (``portal.admission.decide``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, cast

import redis
from django.conf import settings
from django.db import DataError, IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from placement import planner
from placement.parser import Resources
from placement.revisions import replay
from portal import state
from portal.admission import reservations
from portal.admission.budget import Deadline, statement_timeout, synchronous_commit_off
from portal.choices import DecisionSource, UnitTiming
from portal.models import PlacementDecision, UnitRun

log = logging.getLogger(__name__)

_DRAIN_BATCH = 500
_DRAIN_LOCK_TTL_S = 60  # longer than any batch takes; a drainer that died frees it after this
_PUSH_TIMEOUT_S = 0.25  # an unreachable Redis costs an admission little of its budget
_DRAIN_TIMEOUT_S = 5.0
# Trim only while this drainer still holds the lock: one whose lock expired mid-batch must
# not trim entries another drainer has read meanwhile (it leaves them; their uids dedupe).
_TRIM_IF_OWNER = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    redis.call('ltrim', KEYS[2], ARGV[2], -1)
    return 1
end
return 0
"""
_RELEASE_IF_OWNER = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
"""


class QueueUnavailable(Exception):
    """The decision queue (Redis) did not answer; queued decisions wait for the next drain."""


def _queue(timeout: float = _PUSH_TIMEOUT_S) -> redis.Redis | None:
    """The Redis client of ``PORTAL_DECISION_QUEUE_URL`` (``reservations.client``), or None
    when there is no queue (the embedded demo)."""
    return reservations.client(timeout)


def queue_client() -> redis.Redis | None:
    """The decision queue's Redis client, for the reservations kept beside it (None without a
    queue: the embedded demo)."""
    return _queue()


def _queue_key() -> str:
    return str(settings.PORTAL_DECISION_QUEUE_KEY)


def decision_entry(
    uid: str,
    decision: planner.Decision,
    workflow_name: str,
    *,
    run_id: int | None = None,
    unit: str | None = None,
    attempt: int = 1,
) -> dict[str, Any]:
    """A queued decision: whose (run id and unit slug, as the labels say; none for a direct
    Workflow), what was decided and when."""
    return {
        "uid": uid,
        "run": run_id,
        "unit": unit,
        "attempt": attempt,
        "workflow": workflow_name,
        "site": decision.site or "",
        "reason": decision.reason,
        "candidates": [c.as_dict() for c in decision.candidates],
        "at": time.time(),
    }


def planning_entry(
    context: dict[str, Any],
    revision: int | None,
    digest: str,
    body: Mapping[str, Any] | None,
    held: Mapping[str, Resources] | None = None,
) -> dict[str, Any]:
    """The queued decision's planning inputs, recorded for replay when it is drained: its
    placement context (``placement.context.context_doc``), the rule revision and the fleet
    snapshot's digest; ``body``, the snapshot itself, rides on the first entry naming it;
    ``held``: per site, what other decisions held beside the snapshot (in the context, as
    ``[cpu, memory, gpus]``)."""
    if held:
        context = {
            **context,
            "held": {
                site: [r.cpu_millicores, r.memory_bytes, r.gpus] for site, r in sorted(held.items())
            },
        }
    out: dict[str, Any] = {"context": context, "revision": revision, "snapshot": digest}
    if body is not None:
        out["snapshot_body"] = body
    return out


class _Pushes:
    """Group commit of queue entries: the admission that finds no push in flight pushes its
    entry together with every entry queued meanwhile, in one RPUSH; the others wait for the
    push that carries theirs. Under load one round trip to Redis carries several decisions
    (half the Redis work per admission in the benchmark); every admission still answers only
    once its own entry is in Redis, or falls back when that push failed."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        # (client, key, entry, outcome): outcome gets None once pushed, the error if not.
        self.pending: list[tuple[redis.Redis, str, str, list[BaseException | None]]] = []
        self.busy = False


_pushes = _Pushes()


def _group_push(client: redis.Redis, key: str, text: str) -> None:
    """RPUSH ``text`` to ``key``, batched with concurrent callers; raises ``redis.RedisError``
    when the push that carried it failed."""
    g = _pushes
    outcome: list[BaseException | None] = []
    with g.cond:
        g.pending.append((client, key, text, outcome))
        while not outcome and g.busy:
            g.cond.wait()
        if outcome:  # pushed (or not) by another caller
            if outcome[0] is not None:
                raise redis.RedisError(f"queue push failed: {outcome[0]}")
            return
        g.busy = True
        batch, g.pending = g.pending, []
    error: BaseException | None = None
    try:
        # One list per (client, key): only tests change the queue while admissions run.
        lists: dict[tuple[int, str], tuple[redis.Redis, list[str]]] = {}
        for c, k, t, _ in batch:
            lists.setdefault((id(c), k), (c, []))[1].append(t)
        for (_, k), (c, texts) in lists.items():
            c.rpush(k, *texts)
    except BaseException as exc:
        error = exc
        raise
    finally:
        with g.cond:
            for *_, o in batch:
                o.append(error)
            g.busy = False
            g.cond.notify_all()


def decision_record(entry: dict[str, Any], deadline: Deadline | None = None) -> None:
    """Queue one decision (one Redis command), or write it at once when there is no queue or
    it does not answer. Queued entries are written by ``decisions_flush``.

    A push that succeeded is answered with the patch even if it ended past the budget: the
    push is bounded by ``_PUSH_TIMEOUT_S``, so the answer still reaches karmada-apiserver
    well within its 3 s, and the entry cannot be taken back without racing a drainer."""
    client = _queue()
    if client is not None:
        try:
            _group_push(client, _queue_key(), json.dumps(entry, separators=(",", ":")))
            return
        except redis.RedisError as exc:  # Redis down: the database still takes it
            log.warning("decision queue unreachable (%s); recording the decision at once", exc)
    with transaction.atomic():
        if deadline is not None:
            statement_timeout(deadline)
        _store([entry])
        if deadline is not None:
            # Past the budget now, Karmada may have given up on us: roll back, so the
            # database never says a site the Workflow did not get.
            deadline.check("recording")


def decisions_flush(*, wait: bool = False, limit: int | None = None) -> int:
    """Write the queued decisions to the database; returns how many entries were taken.

    Safe to run anywhere, any number of times: a lock keeps two drainers from trimming each
    other's entries; entries are trimmed only after their transaction committed, and only
    while the lock is still ours; a drainer that dies in between leaves entries that the next
    one writes again without duplicates (decisions are unique by their AdmissionReview uid).
    An empty queue costs one Redis command and no lock: entries leave the list only after they
    are committed, so an empty list means every decision queued so far is in the database.

    ``wait``: when another drain is running, wait for it (up to 5 s) and drain after it; the
    watcher does, before it decides whether the fallback policy placed a unit. ``limit``: at
    most this many entries (default: what was queued when it started). Raises
    ``QueueUnavailable`` when Redis does not answer; does nothing without a queue."""
    client = _queue(_DRAIN_TIMEOUT_S)
    if client is None:
        return 0
    key = _queue_key()
    lock_key = f"{key}:drain-lock"
    try:
        queued = cast(int, client.llen(key))
        if not queued:
            return 0
        token = uuid.uuid4().hex
        give_up = time.monotonic() + (5.0 if wait else 0.0)
        while not client.set(lock_key, token, nx=True, ex=_DRAIN_LOCK_TTL_S):
            if time.monotonic() >= give_up:
                return 0  # another drainer has it
            time.sleep(0.01)
        try:
            todo = queued if limit is None else limit
            taken = 0
            while taken < todo:
                raw = cast(list[bytes], client.lrange(key, 0, min(_DRAIN_BATCH, todo - taken) - 1))
                if not raw:
                    break
                entries = _entries_of(raw)
                _store_batch(entries)
                # Committed: the units now hold their capacity in the database.
                reservations.written(client, entries)
                if not client.eval(_TRIM_IF_OWNER, 2, lock_key, key, token, str(len(raw))):
                    log.warning("decision drain outlived its lock; leaving the rest to others")
                    break
                taken += len(raw)
            return taken
        finally:
            client.eval(_RELEASE_IF_OWNER, 1, lock_key, token)
    except redis.RedisError as exc:
        raise QueueUnavailable(str(exc)) from exc


def _entries_of(raw: Iterable[bytes]) -> list[dict[str, Any]]:
    entries = []
    for item in raw:
        try:
            entry = json.loads(item)
        except ValueError:
            log.error("dropping a queued decision that is not JSON: %r", item[:200])
            continue
        if isinstance(entry, dict) and isinstance(entry.get("uid"), str) and entry["uid"]:
            entries.append(entry)
        else:
            log.error("dropping a queued decision without uid: %r", item[:200])
    return entries


def _store_batch(entries: list[dict[str, Any]]) -> None:
    """One transaction for the batch. If the database refuses the batch's data, each entry
    alone, so one bad entry (logged and dropped) never blocks the queue behind it; any other
    error (the database is down) propagates and the batch stays queued."""
    if not entries:
        return
    try:
        with transaction.atomic():
            synchronous_commit_off()
            _store(entries)
        return
    except (IntegrityError, DataError, ValueError, TypeError, KeyError):
        if len(entries) == 1:
            log.exception("dropping a queued decision the database refused: %r", entries[0])
            return
    for entry in entries:
        _store_batch([entry])


def _units_of(entries: list[dict[str, Any]]) -> dict[tuple[int, str], tuple[int, int]]:
    """(run id, unit slug) -> (unit id, its current attempt) for the entries' units, in one
    query."""
    wanted = {
        (e["run"], e["unit"])
        for e in entries
        if type(e.get("run")) is int and isinstance(e.get("unit"), str)
    }
    units: dict[tuple[int, str], tuple[int, int]] = {}
    if wanted:
        match = Q()
        for run_id, slug in wanted:
            match |= Q(run_id=run_id, slug=slug)
        for pk, run_id, slug, current in (
            UnitRun.objects.filter(match).order_by().values_list("id", "run_id", "slug", "attempt")
        ):
            units[(run_id, slug)] = (pk, current)
    return units


def _runtime_input(
    e: dict[str, Any], run_id: int | None, created_at: datetime
) -> replay.RuntimeInput:
    """What the decision was planned from, for replaying it later."""
    body = e.get("snapshot_body")
    revision = e.get("revision")
    return replay.RuntimeInput(
        uid=e["uid"],
        run_id=run_id,
        context=e["context"],
        revision_id=revision if type(revision) is int else None,
        digest=e["snapshot"],
        body=body if isinstance(body, dict) else None,
        at=created_at,
    )


def _store(entries: list[dict[str, Any]]) -> None:
    """Write decisions and, for the unit's current attempt, its site and reason: one query for
    the units, one insert, one update per unit placed, whatever the number of entries. An
    entry whose run is gone is dropped; one for an attempt that is no longer current is kept
    (it says what that attempt's Workflow got) but leaves the unit alone."""
    units = _units_of(entries)
    rows = []
    planning: list[replay.RuntimeInput] = []
    placed: dict[int, tuple[int, str, str]] = {}  # unit → the last decision of its attempt
    for e in entries:
        found = None
        if e.get("run") is not None:
            found = units.get((e["run"], str(e.get("unit"))))
            if found is None:
                log.info("dropping a queued decision for a unit that is gone: %s", e["uid"])
                continue
        at = e.get("at")
        site = str(e.get("site") or "")
        reason = str(e.get("reason") or "")
        attempt = int(e.get("attempt") or 1)
        created_at = (
            datetime.fromtimestamp(at, tz=UTC) if isinstance(at, int | float) else timezone.now()
        )
        if isinstance(e.get("context"), dict) and isinstance(e.get("snapshot"), str):
            planning.append(_runtime_input(e, e["run"] if found else None, created_at))
        rows.append(
            PlacementDecision(
                run_id=e["run"] if found else None,
                unit_id=found[0] if found else None,
                workflow_name=str(e.get("workflow") or "")[:253],
                attempt=attempt,
                source=DecisionSource.WEBHOOK,
                timing=UnitTiming.RUNTIME,
                site=site,
                reason=reason,
                candidates=e.get("candidates") or [],
                admission_uid=e["uid"],
                created_at=created_at,
            )
        )
        if found and site and found[1] == attempt:
            placed[found[0]] = (attempt, site, reason)
    PlacementDecision.objects.bulk_create(rows, ignore_conflicts=True)
    replay.runtime_records(planning)
    for pk, (attempt, site, reason) in placed.items():
        # Only the current attempt (a retry or failover that started meanwhile wins), and not
        # over another site (an entry drained again after Karmada's binding said otherwise).
        state.unit_place(
            UnitRun.objects.filter(pk=pk, attempt=attempt),
            site,
            from_sites=["", site],
            reason=reason,
        )
