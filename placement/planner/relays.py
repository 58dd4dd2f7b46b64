"""Transfers: which site relays an artifact a reader's site cannot read. Pure.

A step at ``target`` reads an output held in ``source``'s repository only if the inventory says
``target`` can read it (``Fleet.unreachable``). When it cannot, the portal runs a transfer
unit at a *relay* site: a step workflow that reads the object through a pre-signed GET and
writes it as its own output into the relay's repository, which ``target`` can read. The relay
pulls (rather than the producer's site pushing with a pre-signed PUT into the reader's
repository) because the relay's copy is a replica any later reader at a site that reads the
relay reuses, the write goes into a repository whose quota and GC the relay's site owns, and a
pull needs no credential for a repository other than the one it writes (docs/decisions.md).

A relay ``r`` (neither ``source`` nor ``target``) must read ``source`` and be readable from
``target``; among those, the one whose two hops take least time by the links' bandwidth
(observed where measured), then cost, then name, is chosen. A relay outside the regions a
residency-bound artifact may be in is never chosen (``regions``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from placement.planner.fleet import Fleet
from placement.planner.inputs import ASSUMED_UPSTREAM_BYTES, DEFAULT_BANDWIDTH_MBPS
from placement.planner.outputs import Decision

GB = 1_000_000_000


@dataclass(frozen=True)
class Transfer:
    """One planned copy: ``bytes`` of an output moved ``source`` → ``relay`` (the transfer
    unit's own work, ``seconds`` and ``cost`` by the link), for a reader at ``target``."""

    source: str
    relay: str
    target: str
    bytes: int
    seconds: float
    cost: float

    def as_dict(self) -> dict[str, object]:
        return {
            "from": self.source,
            "via": self.relay,
            "to": self.target,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "cost": f"{self.cost:.2f}",
        }


def reads(fleet: Fleet, source: str, target: str) -> bool:
    """Whether steps at ``target`` can read ``source``'s artifact repository."""
    return source == target or (source, target) not in fleet.unreachable


def hop_seconds(fleet: Fleet, source: str, target: str, nbytes: int) -> float:
    if source == target:
        return 0.0
    mbps = fleet.bandwidth.get((source, target)) or DEFAULT_BANDWIDTH_MBPS
    return nbytes * 8 / (mbps * 1e6)


def hop_cost(fleet: Fleet, source: str, target: str, nbytes: int) -> float:
    if source == target:
        return 0.0
    return fleet.cost_per_gb.get((source, target), 0.0) * nbytes / GB


def relay_for(
    fleet: Fleet,
    source: str,
    target: str,
    nbytes: int = 0,
    regions: Iterable[str] = (),
    exclude: Iterable[str] = (),
) -> str | None:
    """The site that relays ``source``'s output to a reader at ``target``; ``None`` when the
    reader can read the source itself or no site can relay. ``regions``: where the artifact
    may be (empty: anywhere); ``exclude``: sites that must not relay (lost, cordoned)."""
    if reads(fleet, source, target):
        return None
    allowed = frozenset(regions)
    excluded = frozenset(exclude)
    best: tuple[float, float, str] | None = None
    for site in fleet.ordered_sites:
        r = site.name
        if r in (source, target) or r in excluded or not site.ready:
            continue
        if allowed and site.region not in allowed:
            continue
        if not (reads(fleet, source, r) and reads(fleet, r, target)):
            continue
        seconds = hop_seconds(fleet, source, r, nbytes) + hop_seconds(fleet, r, target, nbytes)
        cost = hop_cost(fleet, source, r, nbytes) + hop_cost(fleet, r, target, nbytes)
        key = (seconds, cost, r)
        if best is None or key < best:
            best = key
    return best[2] if best else None


_NOT_YET = object()


def cached_relay(fleet: Fleet, source: str, target: str) -> str | None:
    """The site that would relay ``source``'s outputs to a reader at ``target`` (size
    unknown: by bandwidth alone), cached per Fleet object; None when no relay is needed
    or none can."""
    key = (source, target)
    found = fleet.caches.relays.get(key, _NOT_YET)
    if found is _NOT_YET:
        found = fleet.caches.relays.put(key, relay_for(fleet, source, target, 1 << 20))
    return found if isinstance(found, str) else None


def transfer(fleet: Fleet, source: str, relay: str, target: str, nbytes: int) -> Transfer:
    """The planned copy ``source`` → ``relay`` for a reader at ``target``, with its estimate."""
    return Transfer(
        source=source,
        relay=relay,
        target=target,
        bytes=nbytes,
        seconds=hop_seconds(fleet, source, relay, nbytes),
        cost=hop_cost(fleet, source, relay, nbytes),
    )


def copy_name(producer: str, relay: str) -> str:
    """The transfer unit's name: ``<producer>-copy-<relay>``, one per produced output set and
    relay (every reader relayed through that site reuses it)."""
    return f"{producer}-copy-{relay}"


def planned(
    decisions: Sequence[Decision],
    upstream_of: Mapping[str, Sequence[str]],
    fleet: Fleet,
    sizes: Mapping[str, int | None] | None = None,
) -> list[dict[str, Any]]:
    """The transfers a plan implies (the preview): for each unit placed where it cannot read
    an upstream unit's planned site, the relay's copy, once per producer and relay, with its
    estimate (``sizes``: each producer's declared output bytes; unknown: the planner's
    assumed size)."""
    site_of = {d.unit: d.site or d.runtime_hint for d in decisions}
    blocked = fleet.unreachable
    seen: set[tuple[str, str]] = set()
    out: list[dict[str, Any]] = []
    for d in decisions:
        target = d.site
        if target is None:
            continue
        for up in upstream_of.get(d.unit, ()):
            source = site_of.get(up)
            if source is None or (source, target) not in blocked:
                continue
            relay = cached_relay(fleet, source, target)
            if relay is None or (up, relay) in seen:
                continue
            seen.add((up, relay))
            size = (sizes or {}).get(up)
            plan = transfer(fleet, source, relay, target, size or ASSUMED_UPSTREAM_BYTES)
            out.append({"unit": copy_name(up, relay), "producer": up, **plan.as_dict()})
    return out
