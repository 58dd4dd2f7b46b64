"""Capacity held by runtime decisions on their way to the database.

A webhook decision is queued in Redis and written to PostgreSQL by the drain up to a second
later (``portal.admission.queue``); only then does its unit count as held (a unit placed at a
site and still Pending, ``portal.selectors.held_reservations``). In between, the decision
holds its capacity here, so that the next admission, in any web process, sees it taken:

* ``take`` is one Redis script: it checks that the site still has room for the request
  beside every other decision held here, records the reservation and queues the decision,
  all or nothing. Two admissions racing for the last CPUs cannot both win: the loser gets
  ``False`` and decides again from the newer figures. With ``seen``, it also refuses when
  anything changed at the site since the decision read it, so the free capacity a decision
  reports for its site is exact (the webhook asks so on all tries but the last).
* ``written`` (the drain, after its transaction committed) stamps each reservation with a
  number from one counter; a fleet read from the database after the counter showed ``n``
  already counts every reservation stamped ``n`` or lower (``held``'s ``since``).
* A stamped reservation is forgotten 10 s after its stamp (a fleet read before it is at most
  a second old), one never drained after
  ``PENDING_TTL_S`` (its decision queued for that long means the drain is down; the unit
  then holds nothing until the drain returns and writes its site).

One reservation per unit (``unit_key``): a new decision for the same unit (a new attempt, or
Karmada calling again) replaces its older one. Requests are held whole (CPU in millicores,
memory in bytes, GPUs), per site, as ``placement.parser.Resources``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis
from django.conf import settings

from placement.parser import Resources

PENDING_TTL_S = 600.0
WRITTEN_TTL_S = 10.0
# An unreachable Redis costs an admission little of its budget.
CLIENT_TIMEOUT_S = 0.25

_clients: dict[tuple[str, float], redis.Redis] = {}
_clients_lock = threading.Lock()


def client(timeout: float = CLIENT_TIMEOUT_S) -> redis.Redis | None:
    """The Redis client of ``PORTAL_DECISION_QUEUE_URL``, where the webhook queues its
    decisions and keeps its reservations (one pool per process and timeout), or None when
    there is no queue (the embedded demo). The planner's readers use it without loading the
    queue."""
    url = settings.PORTAL_DECISION_QUEUE_URL
    if not url:
        return None
    found = _clients.get((url, timeout))
    if found is None:
        with _clients_lock:
            found = _clients.get((url, timeout))
            if found is None:
                found = redis.Redis.from_url(
                    url, socket_timeout=timeout, socket_connect_timeout=timeout
                )
                _clients[(url, timeout)] = found
    return found


def connected() -> bool:
    """Whether this process has made a client yet."""
    return bool(_clients)


# A reservation's value: [site, cpu, memory, gpus, uid, stamp (0: not yet written), expires ms].
# ARGV: now ms, pending TTL ms, then per asked reservation 14 values (``_ask_args``), each
# checked after the ones before it were taken. Answers {taken flags, the whole table after}:
# the table is the callers' copy for their next decisions.
_TAKE = """
local now = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local rows = {}
local held = redis.call('hgetall', KEYS[1])
for i = 1, #held, 2 do
    rows[held[i]] = cjson.decode(held[i + 1])
end
local flags = {}
local queued = {}
for k = 0, (#ARGV - 2) / 14 - 1 do
    local o = 2 + k * 14
    local key, site, since = ARGV[o + 1], ARGV[o + 3], tonumber(ARGV[o + 10])
    local used = {0, 0, 0}
    for other, r in pairs(rows) do
        if other ~= key and r[1] == site and r[7] > now and (r[6] == 0 or r[6] > since) then
            used[1] = used[1] + r[2]
            used[2] = used[2] + r[3]
            used[3] = used[3] + r[4]
        end
    end
    local ok = 1
    for d = 1, 3 do
        local need = tonumber(ARGV[o + 3 + d])
        local seen = tonumber(ARGV[o + 11 + d])
        if (need > 0 and used[d] + need > tonumber(ARGV[o + 6 + d]))
                or (seen >= 0 and used[d] ~= seen) then
            ok = 0
        end
    end
    if ok == 1 then
        local r = {site, tonumber(ARGV[o + 4]), tonumber(ARGV[o + 5]), tonumber(ARGV[o + 6]),
                   ARGV[o + 2], 0, now + ttl}
        rows[key] = r
        redis.call('hset', KEYS[1], key, cjson.encode(r))
        queued[#queued + 1] = ARGV[o + 11]
    end
    flags[k + 1] = ok
end
if #queued > 0 then
    redis.call('rpush', KEYS[2], unpack(queued))
end
local flat = {}
for key, r in pairs(rows) do
    flat[#flat + 1] = key
    flat[#flat + 1] = cjson.encode(r)
end
return {flags, flat}
"""

_WRITTEN = """
local now = tonumber(ARGV[1])
local keep = tonumber(ARGV[2])
local stamp = redis.call('incr', KEYS[2])
for i = 3, #ARGV, 2 do
    local raw = redis.call('hget', KEYS[1], ARGV[i])
    if raw then
        local r = cjson.decode(raw)
        if r[5] == ARGV[i + 1] and r[6] == 0 then
            r[6] = stamp
            r[7] = now + keep
            redis.call('hset', KEYS[1], ARGV[i], cjson.encode(r))
        end
    end
end
local held = redis.call('hgetall', KEYS[1])
for i = 1, #held, 2 do
    if cjson.decode(held[i + 1])[7] <= now then
        redis.call('hdel', KEYS[1], held[i])
    end
end
return stamp
"""


# Capacity the worker's own decisions took or gave back, already in the database: one row per
# site, stamped at once (``placed``). ARGV: now ms, keep ms, then key, site, cpu, memory, gpus
# per row.
_PLACED = """
local stamp = redis.call('incr', KEYS[2])
local expires = tonumber(ARGV[1]) + tonumber(ARGV[2])
for i = 3, #ARGV, 5 do
    local r = {ARGV[i + 1], tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4]),
               '', stamp, expires}
    redis.call('hset', KEYS[1], ARGV[i], cjson.encode(r))
end
return stamp
"""


# EVALSHA: the script's text is sent once per client, not with every admission.
_scripts: dict[int, Any] = {}


def keys() -> tuple[str, str]:
    """The reservations table and its stamp counter, beside the decision queue."""
    base = str(settings.PORTAL_DECISION_QUEUE_KEY)
    return f"{base}:held", f"{base}:held-stamp"


def unit_key(run_id: int | None, unit: str | None, uid: str) -> str:
    """The reservation's key: the unit's (one per unit), or the admission's for a Workflow
    created directly on Karmada (no unit: it holds until its decision is written)."""
    return f"{run_id}/{unit}" if run_id is not None and unit else f"direct/{uid}"


@dataclass(frozen=True)
class Reservation:
    key: str
    uid: str
    site: str
    resources: Resources


def stamp(client: redis.Redis) -> int:
    """The counter ``written`` stamps with: read it before reading the database's holds."""
    raw = client.get(keys()[1])
    return int(cast(bytes, raw)) if raw else 0


@dataclass(frozen=True)
class Held:
    """The reservations as read at ``read_at`` (``time.monotonic()``): by key, ``(site, cpu,
    memory, gpus, stamp, expires ms)``."""

    rows: Mapping[str, tuple[str, int, int, int, int, float]]
    read_at: float

    @classmethod
    def parse(cls, flat: Sequence[bytes]) -> Held:
        """From HGETALL's reply as a Lua script returns it: key, value, key, value..."""
        rows = {}
        for key, value in zip(flat[::2], flat[1::2], strict=True):
            site, cpu, memory, gpus, _uid, stamped, expires = json.loads(value)
            rows[key.decode()] = (
                str(site),
                int(cpu),
                int(memory),
                int(gpus),
                int(stamped),
                expires,
            )
        return cls(rows, time.monotonic())

    def totals(self, *, since: int, excluding: str = "") -> dict[str, Resources]:
        """Per site, what decisions hold that a fleet read after ``stamp()`` returned
        ``since`` does not count yet (``excluding``: one unit's own reservation)."""
        now = time.time() * 1000
        out: dict[str, list[int]] = {}
        for key, (site, cpu, memory, gpus, stamped, expires) in self.rows.items():
            if key == excluding or expires <= now or (stamped and stamped <= since):
                continue
            total = out.setdefault(site, [0, 0, 0])
            total[0] += cpu
            total[1] += memory
            total[2] += gpus
        return {
            site: Resources(cpu_millicores=c, memory_bytes=m, gpus=g)
            for site, (c, m, g) in out.items()
        }


def read(client: redis.Redis) -> Held:
    raw = cast(dict[bytes, bytes], client.hgetall(keys()[0]))
    return Held.parse([x for kv in raw.items() for x in kv])


def held(client: redis.Redis, *, since: int, excluding: str = "") -> dict[str, Resources]:
    """``read(client).totals(...)``: one Redis command."""
    return read(client).totals(since=since, excluding=excluding)


def _ask_args(
    reservation: Reservation, room: Resources, since: int, entry: str, seen: Resources | None
) -> list[str]:
    req = reservation.resources
    return [
        reservation.key,
        reservation.uid,
        reservation.site,
        str(req.cpu_millicores),
        str(req.memory_bytes),
        str(req.gpus),
        str(room.cpu_millicores),
        str(room.memory_bytes),
        str(room.gpus),
        str(since),
        entry,
        *(
            ("-1", "-1", "-1")
            if seen is None
            else (str(seen.cpu_millicores), str(seen.memory_bytes), str(seen.gpus))
        ),
    ]


class _Takes:
    """Group commit, as the queue's pushes (``portal.admission.queue``): the admission that
    finds no take in flight sends its own with every one asked meanwhile, in one script call
    (each checked after those before it); the others wait for the call that carries theirs."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        # (client, args, outcome): outcome gets (taken, table) or the error.
        self.pending: list[tuple[redis.Redis, list[str], list[Any]]] = []
        self.busy = False


_takes = _Takes()


def take(
    client: redis.Redis,
    reservation: Reservation,
    *,
    room: Resources,
    since: int,
    entry: str,
    seen: Resources | None = None,
) -> tuple[bool, Held]:
    """Hold ``reservation`` and queue ``entry`` (the decision, as the queue stores it) if
    what others hold here at its site, plus its request, fits in ``room`` (the site's free
    capacity in the fleet read after ``since``), and if what they hold there is still ``seen``
    (when given); False, with nothing written, if not. With it, the reservations as they are
    after: one round trip gives the next decision its figures."""
    g = _takes
    outcome: list[Any] = []
    with g.cond:
        g.pending.append((client, _ask_args(reservation, room, since, entry, seen), outcome))
        while not outcome and g.busy:
            g.cond.wait()
        if not outcome:
            g.busy = True
            batch, g.pending = g.pending, []
    if not outcome:
        _take_batch(batch)
    if isinstance(outcome[0], BaseException):
        raise redis.RedisError(f"reservation failed: {outcome[0]}")
    return cast(tuple[bool, Held], outcome[0])


def _take_batch(batch: list[tuple[redis.Redis, list[str], list[Any]]]) -> None:
    try:
        # One call per client: only tests change the queue while admissions run.
        by_client: dict[int, list[tuple[redis.Redis, list[str], list[Any]]]] = {}
        for ask in batch:
            by_client.setdefault(id(ask[0]), []).append(ask)
        for asks in by_client.values():
            client = asks[0][0]
            script = _scripts.get(id(client))
            if script is None:
                script = _scripts.setdefault(id(client), client.register_script(_TAKE))
            now = str(int(time.time() * 1000))
            args = [now, str(int(PENDING_TTL_S * 1000))]
            for _, ask_args, _ in asks:
                args += ask_args
            flags, flat = script(
                keys=[keys()[0], str(settings.PORTAL_DECISION_QUEUE_KEY)], args=args
            )
            table = Held.parse(flat)
            for (_, _, outcome), flag in zip(asks, flags, strict=True):
                outcome.append((bool(flag), table))
    except BaseException as exc:
        for _, _, outcome in batch:
            if not outcome:
                outcome.append(exc)
        if not isinstance(exc, redis.RedisError):
            raise
    finally:
        with _takes.cond:
            _takes.busy = False
            _takes.cond.notify_all()


def written(client: redis.Redis, entries: Iterable[Mapping[str, object]]) -> None:
    """The drain wrote these queued decisions (committed): their reservations are now the
    units' own (Pending at their site), so stamp them; forget what expired."""
    args: list[str] = []
    for e in entries:
        uid = e.get("uid")
        if isinstance(uid, str):
            run = e.get("run")
            unit = e.get("unit")
            args += [
                unit_key(run if type(run) is int else None, str(unit) if unit else None, uid),
                uid,
            ]
    held_key, stamp_key = keys()
    client.eval(
        _WRITTEN,
        2,
        held_key,
        stamp_key,
        str(int(time.time() * 1000)),
        str(int(WRITTEN_TTL_S * 1000)),
        *args,
    )


def placed(client: redis.Redis, changes: Mapping[str, Resources]) -> None:
    """Decisions made outside the webhook (the worker's: submission, failover, loop items, the
    fallback policy's site) changed what units hold per site by ``changes`` (a release is
    negative), committed to the database: recorded as reservations already written, stamped
    now. A fleet read from the database before the stamp (the webhook's snapshot) counts them
    from here; one read after counts them from the database; they are forgotten with the
    other written reservations."""
    batch = uuid.uuid4().hex
    args: list[str] = []
    for site, r in changes.items():
        if r.cpu_millicores or r.memory_bytes or r.gpus:
            args += [f"placed/{batch}/{site}", site]
            args += [str(r.cpu_millicores), str(r.memory_bytes), str(r.gpus)]
    if not args:
        return
    held_key, stamp_key = keys()
    client.eval(
        _PLACED,
        2,
        held_key,
        stamp_key,
        str(int(time.time() * 1000)),
        str(int(WRITTEN_TTL_S * 1000)),
        *args,
    )
