"""The planner's inputs, read one way for every decider.

Submission and preview (``portal.services``), the webhook (``portal.admission.decide``), the
worker's own decisions (a runtime unit's fallback site, loop items expanded at run time, the
exit handler, a transfer's relay), failover and re-placement (``portal.controller.failover``)
and any later decider call ``planner_snapshot()`` and plan on what it returns
(``PlannerSnapshot``, a ``planner.PlannerView``); replay plans on a ``PlannerView`` rebuilt
from what those decisions recorded of it. So two decisions made at the same moment see the
same fleet: the same sites, capacity, rules, links and datasets, and the same capacity taken,
whichever process decides.

Free capacity is what members report (``Site.*_allocated``, from the Clusters'
``resourceSummary``) less every reservation: units placed at a site whose step the member does
not report running yet (``portal.selectors.held_reservations``, in PostgreSQL) and webhook
decisions not yet written there (``portal.admission.reservations``, in Redis).

Reading is cheap enough for the worker (the tables are rebuilt only when they change); the
webhook keeps the database part (``PlannerBase``) for up to a second and adds the Redis part
fresh at every admission, one Redis command. So that a decision the worker writes straight to
the database (a submission's plan, failover, loop items, the fallback policy's site) is seen
by that kept part at once too, the decider reports what it changed (``holds_changed``): the
change is recorded in Redis beside the webhook's reservations, already stamped as written,
and counted by every fleet read from the database before it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import redis
from django.db import transaction

from placement import planner
from placement.parser import Resources
from placement.selectors import planner_inputs
from portal.admission import reservations
from portal.models import UnitRun
from portal.selectors import held_reservations, units_held

log = logging.getLogger(__name__)

Held = Mapping[str, Resources]


@dataclass(frozen=True)
class PlannerBase:
    """What the database says: ``fleet`` with the units placed and not yet running counted as
    taken (``held``), rules and datasets; ``stamp``: the Redis reservations counter read just
    before (reservations stamped up to it are already in ``held``)."""

    fleet: planner.Fleet
    rules: planner.RuleBook
    datasets: planner.DataCatalogue
    held: Held = field(default_factory=dict)
    stamp: int = 0


@dataclass(frozen=True)
class PlannerSnapshot(planner.PlannerView):
    """The fleet the planner reads (``planner.PlannerView``): ``fleet`` is the sites (health,
    labels, capacity) with free capacity after every reservation and running unit, and the
    links; ``rules`` and ``datasets`` the rest of a decision's inputs. ``pending``: per site,
    what webhook and worker decisions hold that ``base`` (the database part) does not show
    (recorded with a runtime decision, so replay sees the same fleet)."""

    base: PlannerBase

    def room(self, site: str) -> Resources:
        """What ``site`` has free in ``base`` (the Redis reservations not counted)."""
        s = self.base.fleet.site_by_name.get(site)
        if s is None:
            return Resources()
        return Resources(cpu_millicores=s.cpu_free, memory_bytes=s.memory_free, gpus=s.gpu_free)


def planner_base() -> PlannerBase:
    """The database part of the snapshot (queries: the change stamp, the holds, and the
    tables when they changed), with the Redis counter read first."""
    client = reservations.client()
    stamp = 0
    if client is not None:
        try:
            stamp = reservations.stamp(client)
        except redis.RedisError as exc:
            log.warning("reservations unreadable (%s): the database's holds only", exc)
    inputs = planner_inputs()
    held = held_reservations()
    return PlannerBase(
        fleet=planner.hold(inputs.fleet, held),
        rules=inputs.rules,
        datasets=inputs.datasets,
        held=held,
        stamp=stamp,
    )


def planner_snapshot(
    base: PlannerBase | None = None,
    *,
    excluding: str = "",
    held: reservations.Held | None = None,
) -> PlannerSnapshot:
    """The planner's inputs as of now: ``base`` (read now when not given) with what webhook
    decisions hold in Redis and the database does not show yet (``held``: as the caller last
    read them; read now when not given). ``excluding``: a unit's own reservation
    (``reservations.unit_key``), left out when that unit is decided again."""
    base = planner_base() if base is None else base
    pending: dict[str, Resources] = {}
    client = reservations.client()
    if held is not None:
        pending = held.totals(since=base.stamp, excluding=excluding)
    elif client is not None:
        try:
            pending = reservations.held(client, since=base.stamp, excluding=excluding)
        except redis.RedisError as exc:
            log.warning("reservations unreadable (%s): the database's holds only", exc)
    return PlannerSnapshot(
        fleet=planner.hold(base.fleet, pending),
        rules=base.rules,
        datasets=base.datasets,
        pending=pending,
        base=base,
    )


def holds_changed(before: Held, after: Held) -> None:
    """A decider wrote units whose holds went from ``before`` to ``after`` (per site, as
    ``held_by`` gives them): once its transaction commits, every decider counts the difference
    from then on, whatever fleet it kept (``reservations.placed``). Nothing to tell without a
    queue (each decision then reads the database afresh); Redis unreachable: the webhook sees
    it at its next read of the database."""
    changes: dict[str, Resources] = {}
    for site in {*before, *after}:
        a, b = after.get(site, Resources()), before.get(site, Resources())
        diff = Resources(
            cpu_millicores=a.cpu_millicores - b.cpu_millicores,
            memory_bytes=a.memory_bytes - b.memory_bytes,
            gpus=a.gpus - b.gpus,
        )
        if diff != Resources():
            changes[site] = diff
    client = reservations.client() if changes else None
    if client is None:
        return

    def publish() -> None:
        try:
            reservations.placed(client, changes)
        except redis.RedisError as exc:
            log.warning("reservations unreachable (%s): held from the next fleet read", exc)

    transaction.on_commit(publish)


def held_by(units: Iterable[UnitRun]) -> Held:
    """What ``units`` hold per site, as the database part counts them (for ``holds_changed``)."""
    return units_held(units)
