"""What every part of running a run shares: the run's history and the sites' state."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models.expressions import RawSQL

from placement import codec, planner
from placement.context import ancestor_names, upstream_location
from placement.parser import Unit
from portal.choices import FINAL_UNIT, UnitPhase
from portal.models import RunEvent, UnitRun, WorkflowRun
from sites.models import Site

# A unit row's version: the id of the transaction that last wrote it (PostgreSQL's ``xmin``),
# new with every update whoever makes it.
ROW_VERSION = RawSQL('"portal_unitrun"."xmin"::text', ())


def event(
    run_id: int,
    kind: str,
    message: str,
    unit: UnitRun | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    RunEvent.objects.create(run_id=run_id, unit=unit, kind=kind, message=message, data=data or {})


@dataclass(frozen=True)
class SiteState:
    usable: bool  # ready and not cordoned
    overrides: Mapping[str, Any]
    cordoned: bool = False


def sites_state() -> dict[str, SiteState]:
    """Every site's usability and overrides in one query (a fleet has few sites; one read per
    advance instead of two per unit submitted)."""
    return {
        name: SiteState(ready and not cordoned, overrides or {}, cordoned)
        for name, ready, cordoned, overrides in Site.objects.order_by().values_list(
            "name", "ready", "cordoned", "overrides"
        )
    }


def site_usable(site: str, sites: Mapping[str, SiteState] | None = None) -> bool:
    state = (sites if sites is not None else sites_state()).get(site)
    return bool(state and state.usable)


def site_unusable_why(site: str, sites: Mapping[str, SiteState]) -> str:
    """Why no new step goes to ``site``, as an operator would say it: a cordoned site is
    healthy, only closed to new work, and is not called "not ready"."""
    state = sites.get(site)
    if state is None:
        return f"site {site} is not in the fleet"
    if state.cordoned:
        return f"site {site} is cordoned"
    return f"site {site} is not ready"


def ancestors(unit: UnitRun, units: Iterable[UnitRun]) -> list[Unit]:
    """The units whose outputs ``unit`` reads, directly or through others: the planner binds
    it by the residency of what they read."""
    by_name = {u.name: u for u in units}
    names = ancestor_names(unit.upstream or (), {n: u.upstream for n, u in by_name.items()})
    return [codec.unit_from_dict(by_name[n].spec) for n in names]


def upstream_where(
    units: Iterable[UnitRun], *, succeeded_only: bool = False
) -> dict[str, planner.Upstream]:
    """Where each placed unit's outputs are and their size (reported, else declared by its
    template, else unknown), for the planner's data-gravity scoring."""
    return {
        u.name: upstream_location(u.site, u.outputs, u.spec)
        for u in units
        if u.site and (not succeeded_only or u.phase == UnitPhase.SUCCEEDED)
    }


def units_of(
    run: WorkflowRun, *, pks: Iterable[int] | None = None, versioned: bool = False
) -> list[UnitRun]:
    """The run's units (those of ``pks`` only, when given), outputs read only for those that
    ended (only they have any): in a fan-out of thousands that are still running, decoding
    every row's outputs was a third of reading them. ``versioned``: each unit carries its
    row's version as ``row_version`` (``portal.controller.kept``)."""
    rows = run.units.all() if pks is None else run.units.filter(pk__in=list(pks))
    # ``upstream`` is read from the spec here; the column is for the pages.
    read = rows.order_by("position", "id").defer("outputs", "upstream")
    if versioned:
        read = read.annotate(row_version=ROW_VERSION)
    units = list(read)
    ended = dict(
        rows.order_by()
        .filter(phase__in=list(FINAL_UNIT))
        .exclude(outputs={})
        .values_list("pk", "outputs")
    )
    for u in units:
        u.outputs = ended.get(u.pk) or {}
        # The column holds the same list as the spec (both written from the parser's unit);
        # read as a deferred field it would cost a query per unit, per pass: a 10,000-item
        # fan-out was created at 5 step workflows a second.
        u.upstream = list(u.spec.get("upstream") or ())
    return units
