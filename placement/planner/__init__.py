"""The placement planner (DESIGN section 5): pure code, plain typed inputs, explained output.

Inputs are frozen dataclasses the service layer builds from the database (``SiteState`` from
``sites.Site``, ``Link`` from ``SiteLink``, ``DatasetInfo`` from ``Dataset`` + ready
``DatasetReplica`` rows, ``Rule`` from ``placement.PlacementRule``). ``plan()`` decides every unit
of a parsed workflow in topological order; ``decide()`` decides one unit (the webhook, failover).
No Django import anywhere in the package.

How a decision is made, per unit:

1. **Filter** (hard): site ready; not cordoned; not in ``exclude_sites``; GPU, CPU and memory
   requests no larger than the site's *allocatable* (it could never run there); inside every
   read dataset's residency regions; and the ``pin`` / ``require_labels`` /
   ``require_capabilities`` / ``exclude`` rules that match the unit. With
   ``strict_capacity=True`` (the webhook, deciding *now*) free GPUs, CPU and memory must fit
   too; at submission they only score, since the unit runs later, when capacity has changed
   (the demo's site-a is busy but still the right place for ingest: its data is there; a GPU
   step whose site's GPUs are all taken waits for one, as its pod would in the member).
2. **Score** (soft) the rest: data locality ``1 - t/(t + 60 s)`` where ``t`` is the estimated
   transfer time of everything the unit must pull to that site (datasets not replicated there,
   upstream outputs that landed elsewhere), weight 1 plus the weights of matching
   ``prefer_data_locality`` rules; free capacity (mean free fraction of CPU, memory and GPUs
   after the unit's request, 0 if it does not fit now), weight 0.25 plus the weights of matching
   ``prefer_free_capacity`` rules.
3. **Choose** the highest score; ties go to fewer bytes to move, then the site name.

Modules (callers import from the package: ``from placement import planner``):

* ``inputs``: the input dataclasses, ``Upstream``, and the scoring constants;
* ``fleet``: ``Fleet`` and the per-site vectors derived from it, shared by its decisions;
* ``outputs``: ``Decision``, ``Plan``;
* ``rules``: ``RuleBook`` (rules compiled once) and ``template_display_name``;
* ``catalogue``: ``DataCatalogue`` (which datasets a unit reads);
* ``filters``: the hard filters (why a site is ineligible);
* ``scoring``: per-site cost vectors, free capacity, and the pick of the best site;
* ``context``: the per-plan caches shared by its decisions, and the transfer costs;
* ``table``: a decision's candidate table (``Candidate`` rows), built on first access;
* ``reasons``: the one-line why of a decision;
* ``relays``: which site relays an output a reader cannot read, and the copies a plan implies;
* ``reservations``: capacity held back for placed units no member reports yet;
* ``planning``: ``decide`` and ``plan``.
"""

from __future__ import annotations

from placement.planner.catalogue import MATCH_CACHE_MAX, DataCatalogue
from placement.planner.fleet import Fleet
from placement.planner.inputs import (
    ASSUMED_UPSTREAM_BYTES,
    CAPACITY_WEIGHT,
    DATA_WEIGHT,
    DEFAULT_BANDWIDTH_MBPS,
    HARD_EFFECTS,
    TRANSFER_HALF_SCORE_S,
    DatasetInfo,
    Effect,
    Link,
    Replica,
    Rule,
    Selector,
    SiteState,
    Timing,
    Upstream,
    UpstreamArg,
)
from placement.planner.outputs import Decision, Plan
from placement.planner.planning import decide, plan
from placement.planner.reservations import PlannerView, hold, reserve
from placement.planner.rules import RuleBook, template_display_name
from placement.planner.table import Candidate
from placement.units import human_bytes, human_seconds

__all__ = [
    "ASSUMED_UPSTREAM_BYTES",
    "CAPACITY_WEIGHT",
    "DATA_WEIGHT",
    "DEFAULT_BANDWIDTH_MBPS",
    "HARD_EFFECTS",
    "MATCH_CACHE_MAX",
    "TRANSFER_HALF_SCORE_S",
    "Candidate",
    "DataCatalogue",
    "DatasetInfo",
    "Decision",
    "Effect",
    "Fleet",
    "Link",
    "Plan",
    "PlannerView",
    "Replica",
    "Rule",
    "RuleBook",
    "Selector",
    "SiteState",
    "Timing",
    "Upstream",
    "UpstreamArg",
    "decide",
    "hold",
    "human_bytes",
    "human_seconds",
    "plan",
    "reserve",
    "template_display_name",
]
