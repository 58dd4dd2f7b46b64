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
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis
from django.conf import settings

from placement.parser import Resources

PENDING_TTL_S = 600.0
WRITTEN_TTL_S = 10.0

# A reservation's value: [site, cpu, memory, gpus, uid, stamp (0: not yet written), expires ms].
# Answers {1 if taken else 0, the whole table after}: the caller's copy for its next decision.
_TAKE = """
local now = tonumber(ARGV[11])
local since = tonumber(ARGV[10])
local used = {0, 0, 0}
local held = redis.call('hgetall', KEYS[1])
for i = 1, #held, 2 do
    if held[i] ~= ARGV[1] then
        local r = cjson.decode(held[i + 1])
        if r[1] == ARGV[3] and r[7] > now and (r[6] == 0 or r[6] > since) then
            used[1] = used[1] + r[2]
            used[2] = used[2] + r[3]
            used[3] = used[3] + r[4]
        end
    end
end
for d = 1, 3 do
    local need = tonumber(ARGV[3 + d])
    local seen = tonumber(ARGV[13 + d])
    if (need > 0 and used[d] + need > tonumber(ARGV[6 + d])) or (seen >= 0 and used[d] ~= seen) then
        return {0, held}
    end
end
redis.call('hset', KEYS[1], ARGV[1], cjson.encode(
    {ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[2], 0,
     now + tonumber(ARGV[12])}))
redis.call('rpush', KEYS[2], ARGV[13])
return {1, redis.call('hgetall', KEYS[1])}
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


# EVALSHA: the script's text is sent once per client, not with every admission.
_scripts: dict[int, Any] = {}


def _keys() -> tuple[str, str]:
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
    raw = client.get(_keys()[1])
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
    raw = cast(dict[bytes, bytes], client.hgetall(_keys()[0]))
    return Held.parse([x for kv in raw.items() for x in kv])


def held(client: redis.Redis, *, since: int, excluding: str = "") -> dict[str, Resources]:
    """``read(client).totals(...)``: one Redis command."""
    return read(client).totals(since=since, excluding=excluding)


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
    req = reservation.resources
    script = _scripts.get(id(client))
    if script is None:
        script = _scripts.setdefault(id(client), client.register_script(_TAKE))
    done, flat = script(
        keys=[_keys()[0], str(settings.PORTAL_DECISION_QUEUE_KEY)],
        args=[
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
            str(int(time.time() * 1000)),
            str(int(PENDING_TTL_S * 1000)),
            entry,
            *(
                ("-1", "-1", "-1")
                if seen is None
                else (str(seen.cpu_millicores), str(seen.memory_bytes), str(seen.gpus))
            ),
        ],
    )
    return bool(done), Held.parse(flat)


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
    held_key, stamp_key = _keys()
    client.eval(
        _WRITTEN,
        2,
        held_key,
        stamp_key,
        str(int(time.time() * 1000)),
        str(int(WRITTEN_TTL_S * 1000)),
        *args,
    )
