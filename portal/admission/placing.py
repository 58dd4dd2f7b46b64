"""The webhook's placing of one unit: decided on the planner's snapshot
(``portal.planning``), its capacity held and its decision queued in one step.

``Snapshot`` is the database part of every decision's inputs, kept per process for up to
``SNAPSHOT_TTL_S``; what other decisions hold comes from Redis (``portal.admission.
reservations``), from this process's copy of the table as the last take answered it, or read
after each refresh. ``place`` decides, then takes: a take refused because a concurrent
admission changed the chosen site's figures decides again from the newer ones.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import redis

from placement import planner
from placement.context import Context, context_doc
from placement.parser import Resources
from placement.revisions.replay import snapshot_body, snapshot_digest
from placement.revisions.selectors import active_revision_id
from placement.selectors import planner_inputs_clear
from portal.admission import reservations
from portal.admission.budget import Deadline
from portal.admission.queue import decision_entry, decision_record, planning_entry, queue_client
from portal.planning import PlannerBase, PlannerSnapshot, planner_base, planner_snapshot

log = logging.getLogger(__name__)

SNAPSHOT_TTL_S = 1.0


class Unplaced(Exception):
    """No site taken: allowed unchanged, with the why logged."""


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The database part of every decision's inputs (``portal.planning.PlannerBase``), kept
    for up to ``SNAPSHOT_TTL_S``; each decision adds what other decisions hold in Redis."""

    base: PlannerBase
    taken_at: float
    # The rule revision active when it was read, and the fleet and datasets as replay
    # records them (``placement.revisions.replay``), with their digest.
    revision: int | None = None
    body: Mapping[str, Any] = dataclasses.field(default_factory=dict, repr=False)
    digest: str = ""
    # Set once a decision queued with the body: later entries carry only the digest, and are
    # queued after one carrying the body. Once per snapshot, not per digest, so a body the
    # drain lost is sent again at the next refresh.
    body_queued: threading.Event = dataclasses.field(default_factory=threading.Event)

    @property
    def fleet(self) -> planner.Fleet:
        return self.base.fleet

    @property
    def rules(self) -> planner.RuleBook:
        return self.base.rules

    @property
    def datasets(self) -> planner.DataCatalogue:
        return self.base.datasets


_snapshot: Snapshot | None = None
_snapshot_lock = threading.Lock()
# Without a queue (the embedded demo) a decision is written at once: one at a time, each
# reading the holds the one before wrote.
_unqueued_lock = threading.Lock()
# Tries whose take also asks that nothing changed at the chosen site (exact figures); after
# them only that the room is still there, which fails only when others filled the site: every
# refusal is progress, and the budget bounds the whole (``_TAKE_TRIES`` in all, as a backstop).
_EXACT_TRIES = 4
_TAKE_TRIES = 64
# What decisions hold in Redis as this process last saw it (``_held_now``).
_held: reservations.Held | None = None


def snapshot_get() -> Snapshot:
    """The fleet, rules and datasets, read at most once per ``SNAPSHOT_TTL_S`` per process.

    The RuleBook and DataCatalogue are built once per snapshot, so rule globs are compiled and
    dataset matches memoised across admissions rather than per request.
    """
    global _snapshot
    snap = _snapshot
    if snap is not None and time.monotonic() - snap.taken_at < SNAPSHOT_TTL_S:
        return snap
    # One thread refreshes; the others wait for it rather than stampeding the database.
    with _snapshot_lock:
        snap = _snapshot
        if snap is not None and time.monotonic() - snap.taken_at < SNAPSHOT_TTL_S:
            return snap
        snap = _snapshot_read()
        _snapshot = snap
        return snap


def _snapshot_read() -> Snapshot:
    base = planner_base()
    body = snapshot_body(base.fleet, base.datasets)
    return Snapshot(
        base=base,
        taken_at=time.monotonic(),
        revision=active_revision_id(),
        body=body,
        digest=snapshot_digest(body),
    )


def snapshot_clear() -> None:
    """Forget the snapshot and the tables it was read from (tests; a process that must see a
    change at once)."""
    global _snapshot
    with _snapshot_lock:
        _snapshot = None
    planner_inputs_clear()
    _forget_held()


@dataclasses.dataclass(frozen=True)
class Whose:
    """Whose decision: the admission, the Workflow's name, and its unit (a direct Workflow:
    none)."""

    uid: str
    workflow: str
    run_id: int | None = None
    unit: str | None = None
    attempt: int = 1


def place(
    found: Context, whose: Whose, *, dry_run: bool, deadline: Deadline
) -> tuple[planner.Decision, Snapshot]:
    """Decide ``found``'s unit on the planner's snapshot (``portal.planning``) and, unless a
    dry run, hold its capacity and queue the decision in one step: decided again from the
    newer figures when a concurrent admission took the room first."""
    key = reservations.unit_key(whose.run_id, whose.unit, whose.uid)
    client = None if dry_run else queue_client()
    if client is None and not dry_run:
        with _unqueued_lock:
            # Written at once: read fresh, so the next decision sees this one's site.
            snap = _snapshot_read()
            view = planner_snapshot(snap.base)
            deadline.check("reading")
            decision = _decide(found, view)
            deadline.check("deciding")
            _record(_entry(whose, decision), snap, found, view, deadline)
        return decision, snap
    snap = snapshot_get()
    for tries in range(_TAKE_TRIES):
        held, fresh = _held_now(client, snap)
        view = planner_snapshot(snap.base, excluding=key, held=held)
        deadline.check("reading")
        decision = _decide(found, view)
        deadline.check("deciding")
        if client is None:  # a dry run
            return decision, snap
        entry = _entry(whose, decision)
        if not decision.site:
            if not fresh:  # "no room" is said from Redis's figures, not a copy
                _forget_held()
                continue
            _record(entry, snap, found, view, deadline)
            return decision, snap
        exact = tries < _EXACT_TRIES
        if _hold(client, key, entry, decision.site, snap, found, view, deadline, exact):
            return decision, snap
    raise Unplaced(f"capacity taken by concurrent decisions {_TAKE_TRIES} times")


def _held_now(client: redis.Redis | None, snap: Snapshot) -> tuple[reservations.Held | None, bool]:
    """What decisions hold in Redis, and whether read just now: this process's copy (the
    answer of its last take) when read after the snapshot, else read (one round trip). A
    copy's figures for the site a decision picks are checked by the take, which refuses and
    answers the newer ones when they changed."""
    global _held
    held = _held
    if held is not None and held.read_at >= snap.taken_at:
        return held, False
    if client is None:
        return None, True
    try:
        _held = held = reservations.read(client)
    except redis.RedisError:
        return None, True  # planner_snapshot tries once more and says why
    return held, True


def _forget_held() -> None:
    global _held
    _held = None


def _decide(found: Context, view: planner.PlannerView) -> planner.Decision:
    return planner.decide(
        found.unit,
        view.fleet,
        view.rules,
        view.datasets,
        found.project,
        found.upstream,
        # Sites its project's quotas did not admit it for: never chosen.
        exclude_sites=quota_excluded(found, view.fleet),
        timing="runtime",
        strict_capacity=True,
        # The step workflow is built: its inputs are read where they are, not via a copy.
        relays=False,
        # Outputs computed from a residency-bound dataset are bound too, here as in the
        # worker's own planning (its fallback site, failover, withParam items).
        ancestors=found.ancestors,
    )


def quota_excluded(found: Context, fleet: planner.Fleet) -> tuple[str, ...]:
    """The fleet's sites outside ``found.sites`` (none when the context names no sites)."""
    if found.sites is None:
        return ()
    allowed = set(found.sites)
    return tuple(s.name for s in fleet.sites if s.name not in allowed)


def _entry(whose: Whose, decision: planner.Decision) -> dict[str, Any]:
    return decision_entry(
        whose.uid,
        decision,
        whose.workflow,
        run_id=whose.run_id,
        unit=whose.unit,
        attempt=whose.attempt,
    )


def _planning(entry: dict[str, Any], snap: Snapshot, found: Context, view: PlannerSnapshot) -> bool:
    """Add what the decision was decided from (``planning_entry``) to ``entry``: the
    snapshot's body travels with the first entry of each snapshot. True if it carries it."""
    with_body = not snap.body_queued.is_set()
    entry.update(
        planning_entry(
            context_doc(found),
            snap.revision,
            snap.digest,
            snap.body if with_body else None,
            view.pending,
        )
    )
    return with_body


def _record(
    entry: dict[str, Any],
    snap: Snapshot,
    found: Context,
    view: PlannerSnapshot,
    deadline: Deadline,
) -> None:
    """Queue a decision that holds nothing (no site), or write it at once without a queue."""
    with_body = _planning(entry, snap, found, view)
    decision_record(entry, deadline)
    if with_body:
        snap.body_queued.set()


def _hold(
    client: redis.Redis,
    key: str,
    entry: dict[str, Any],
    site: str,
    snap: Snapshot,
    found: Context,
    view: PlannerSnapshot,
    deadline: Deadline,
    exact: bool,
) -> bool:
    """Hold the unit's requests at ``site`` and queue the decision, if the room the decision
    saw there is still free (``exact``: and nothing else changed there); False when another
    admission took it meanwhile."""
    global _held
    with_body = _planning(entry, snap, found, view)
    held = reservations.Reservation(key, str(entry["uid"]), site, found.unit.resources)
    try:
        taken, _held = reservations.take(
            client,
            held,
            room=view.room(site),
            since=snap.base.stamp,
            entry=json.dumps(entry, separators=(",", ":")),
            seen=view.pending.get(site, Resources()) if exact else None,
        )
    except redis.RedisError as exc:
        # Redis down: the database takes the decision at once (the unit then holds there).
        log.warning("reservations unreachable (%s); recording the decision at once", exc)
        decision_record(entry, deadline)
        taken = True
    if taken and with_body:
        snap.body_queued.set()
    return taken
