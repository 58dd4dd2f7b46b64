"""Capacity the planner holds back for what it has placed but no member reports yet.

A Cluster's ``resourceSummary`` counts a step only once the member's pods exist; until then the
free capacity a plan reads is what it was before any of its own placements, and a fan-out of
200 tiles would all see the same "60 CPUs free" and go to one site. So:

* ``plan`` reserves each unit it places at submission before deciding the next one (the
  reason of tile 150 says what is free after the 149 before it);
* callers pass what other active runs hold (``hold``): units placed at a site whose step has
  not started running there yet, or started after the member last reported its resources. A
  reservation ends when the member's ``resourceSummary`` counts the step (its pods are then in
  ``allocated``/``allocating``: a summary change seen after the step started, or a whole
  status period without one), when the unit ends, is omitted or moves to another site, and
  when its run ends.

Only capacity changes: a new ``Fleet`` shares every cached per-site vector that does not depend
on free capacity (dataset and upstream transfer costs, hard-rule exclusions, links).

``PlannerView`` is what every decision plans on, live (``portal.planning`` builds it from the
database and Redis) or recorded (``placement.revisions.replay`` rebuilds it from what a
decision recorded).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from placement.parser import Resources
from placement.planner.catalogue import DataCatalogue
from placement.planner.fleet import Fleet, FleetCaches
from placement.planner.rules import RuleBook


def _caches_without_capacity(old: FleetCaches) -> FleetCaches:
    new = FleetCaches()
    new.exclusions = old.exclusions
    new.datasets = old.datasets
    new.links = old.links
    new.upstream = old.upstream
    return new


def hold(fleet: Fleet, held: Mapping[str, Resources]) -> Fleet:
    """The fleet with ``held`` (per site) counted as allocated."""
    wanted = {name: r for name, r in held.items() if r.cpu_millicores or r.memory_bytes or r.gpus}
    if not wanted:
        return fleet
    sites = tuple(
        replace(
            s,
            cpu_allocated=s.cpu_allocated + wanted[s.name].cpu_millicores,
            memory_allocated=s.memory_allocated + wanted[s.name].memory_bytes,
            gpu_allocated=s.gpu_allocated + wanted[s.name].gpus,
        )
        if s.name in wanted
        else s
        for s in fleet.sites
    )
    out = Fleet(sites=sites, links=fleet.links)
    # cached_property stores in the instance dict: seed it with what stays valid.
    out.__dict__["caches"] = _caches_without_capacity(fleet.caches)
    # The link tables too (the same links): rebuilding them from every link at each
    # reservation was the biggest part of a plan placing many units with requests (a
    # 200-site fleet has 6,000 links; 2.3 ms per placed unit).
    for name in ("bandwidth", "unreachable"):
        if name in fleet.__dict__:
            out.__dict__[name] = fleet.__dict__[name]
    return out


def reserve(fleet: Fleet, site: str, req: Resources) -> Fleet:
    """The fleet with one more unit of ``req`` placed at ``site``."""
    return hold(fleet, {site: req})


@dataclass(frozen=True)
class PlannerView:
    """One decision's inputs: ``fleet`` (sites, links, free capacity after every reservation
    counted), ``rules`` and ``datasets``; ``pending``: per site, what was held beyond what the
    fleet's source counted itself (a runtime decision records it, so replay sees the same
    fleet)."""

    fleet: Fleet
    rules: RuleBook
    datasets: DataCatalogue
    pending: Mapping[str, Resources]

    @classmethod
    def holding(
        cls,
        fleet: Fleet,
        rules: RuleBook,
        datasets: DataCatalogue,
        pending: Mapping[str, Resources],
    ) -> PlannerView:
        """The view of ``fleet`` with ``pending`` taken."""
        return cls(hold(fleet, pending), rules, datasets, dict(pending))
