"""What one plan (or one ``decide`` call) computes once and shares between its decisions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

from placement.parser import Resources
from placement.planner.catalogue import DataCatalogue
from placement.planner.filters import Eligibility, exclusions, ineligible
from placement.planner.fleet import Fleet
from placement.planner.inputs import DEFAULT_BANDWIDTH_MBPS, DatasetInfo, Rule, SizeSource
from placement.planner.relays import cached_relay
from placement.planner.rules import RuleBook
from placement.planner.scoring import Costs, free_fraction, memo_note, no_note
from placement.planner.table import CandidateTable
from placement.units import human_bytes, human_seconds

_T = TypeVar("_T")

_COMPILED: dict[tuple[Any, ...], tuple[tuple[Any, ...], Any]] = {}


def _compiled(items: Sequence[Any], build: Callable[[Sequence[Any]], _T]) -> _T:
    """``build(items)``, reused while the same (immutable) input objects come again: the webhook
    passes one snapshot's rules and datasets to every decision. The entry keeps the inputs
    alive, so their ids cannot be reused by other objects while it exists."""
    items = tuple(items)
    key = (build, *map(id, items))
    hit = _COMPILED.get(key)
    if hit is not None:
        # The key holds ``build``, so the value is what ``build`` returned.
        return cast("_T", hit[1])
    if len(_COMPILED) >= 32:
        _COMPILED.clear()
    value = build(items)
    _COMPILED[key] = (items, value)
    return value


class PlanContext:
    """Everything computed once per plan (or per decide call) and shared by its decisions:
    compiled rules, the dataset index, and per-site vectors (eligibility, capacity, data
    costs) keyed by what they depend on, so units that repeat a template cost little."""

    def __init__(
        self,
        fleet: Fleet,
        rules: Sequence[Rule] | RuleBook,
        datasets: Sequence[DatasetInfo] | DataCatalogue,
        project: str | None,
        relays: bool = True,
    ) -> None:
        self.fleet = fleet
        # False: a site reads upstream outputs only where it reaches them itself (a decision
        # for a step workflow already built, whose inputs cannot go through a copy any more).
        self.relays = relays
        self.rulebook = rules if isinstance(rules, RuleBook) else _compiled(rules, RuleBook)
        self.data = (
            datasets if isinstance(datasets, DataCatalogue) else _compiled(datasets, DataCatalogue)
        ).for_project(project)
        self.project = project
        self.sites = fleet.ordered_sites
        self.bandwidth = fleet.bandwidth
        self.memo: dict[Any, tuple[CandidateTable, str | None, str]] = {}
        self.memo_hits = 0
        self.caches = fleet.caches
        self.nothing = Costs([0] * len(self.sites), [0.0] * len(self.sites), no_note)

    def hard_exclusions(self, rule: Rule) -> dict[str, str]:
        """Sites a hard rule removes, with the why."""
        key = self.rulebook.key(rule)
        cached = self.caches.exclusions.get(key)
        if cached is None:
            cached = self.caches.exclusions.put(key, exclusions(rule, self.sites))
        return cached

    def transfer(self, source: str, target: str, nbytes: int) -> tuple[float, bool]:
        """Seconds to move ``nbytes`` source → target, and whether a link was known."""
        if source == target or nbytes <= 0:
            return 0.0, True
        bw = self.bandwidth.get((source, target))
        known = bw is not None
        mbps = bw if bw is not None else DEFAULT_BANDWIDTH_MBPS
        return nbytes * 8 / (mbps * 1e6), known

    def eligibility(
        self,
        hard: Sequence[Rule],
        reads: Sequence[DatasetInfo],
        req: Resources,
        exclude: frozenset[str],
        strict: bool,
    ) -> Eligibility:
        """Per site (by name): why it is ineligible, or None."""
        residency = [(d, d.residency) for d in reads if d.residency]
        key = (
            tuple(self.rulebook.key(r) for r in hard),
            tuple((d.name, regions) for d, regions in residency),
            req,
            exclude,
            strict,
        )
        cached = self.caches.eligibility.get(key)
        if cached is None:
            hard_out = [self.hard_exclusions(r) for r in hard]
            whys = [ineligible(s, req, exclude, hard_out, residency, strict) for s in self.sites]
            cached = self.caches.eligibility.put(key, Eligibility(whys))
        return cached

    def capacity(self, req: Resources) -> tuple[list[float], list[str]]:
        """Per site: the free-capacity score for this request, and the row's capacity note."""
        cached = self.caches.capacity.get(req)
        if cached is None:
            fractions, notes = [], []
            for s, note in zip(self.sites, self.fleet.free_notes, strict=True):
                fraction, fits = free_fraction(s, req)
                fractions.append(fraction)
                notes.append(note if fits else f"{note} (request does not fit now: would queue)")
            cached = self.caches.capacity.put(req, (fractions, notes))
        return cached

    def dataset_costs(self, reads: Sequence[DatasetInfo]) -> Costs:
        key = tuple(reads)
        cached = self.caches.datasets.get(key)
        if cached is None:
            sites = self.sites

            def note(i: int) -> str:
                return "; ".join(dataset_note(self, d, sites[i].name) for d in reads)

            cached = Costs([], [], memo_note(note, len(sites)))
            for s in sites:
                nbytes, seconds = 0, 0.0
                for d in reads:
                    b, t, _src, _known = dataset_cost(self, d, s.name)
                    nbytes += b
                    seconds += t
                cached.bytes.append(nbytes)
                cached.seconds.append(seconds)
            self.caches.datasets.put(key, cached)
        return cached

    def relay(self, source: str, target: str) -> str | None:
        """The relay of ``source``'s outputs for a reader at ``target`` (None: not relayed)."""
        return cached_relay(self.fleet, source, target) if self.relays else None

    def link_row(self, source: str) -> tuple[list[float], list[bool]]:
        """From ``source`` to each site (by name): seconds per byte, and whether a link is
        known (no link: the slow default). Zero to itself."""
        cached = self.caches.links.get((source, self.relays))
        if cached is None:
            default = 8 / (DEFAULT_BANDWIDTH_MBPS * 1e6)
            per_byte, known = [], []
            blocked = self.fleet.unreachable
            for s in self.sites:
                relay = self.relay(source, s.name) if (source, s.name) in blocked else None
                if relay is not None:
                    # Read through a copy at the relay: both hops.
                    hops = ((source, relay), (relay, s.name))
                    rates = [self.bandwidth.get(h) for h in hops]
                    per_byte.append(sum(8 / (m * 1e6) if m else default for m in rates))
                    known.append(all(m is not None for m in rates))
                    continue
                mbps = self.bandwidth.get((source, s.name))
                per_byte.append(0.0 if s.name == source else 8 / (mbps * 1e6) if mbps else default)
                known.append(s.name == source or mbps is not None)
            cached = self.caches.links.put((source, self.relays), (per_byte, known))
        return cached

    def upstream_costs(self, source: str, nbytes: int, how: SizeSource) -> Costs:
        key = (source, nbytes, how, self.relays)
        cached = self.caches.upstream.get(key)
        if cached is None:
            sites = self.sites
            per_byte, known = self.link_row(source)
            # Argo records no output sizes: an upstream output whose size is not known says so
            # rather than passing off the estimate the score uses as a measured figure, and a
            # size the template declared says where it comes from.
            size = (
                f"of unknown size (counted as {human_bytes(nbytes)})"
                if how == "assumed"
                else f"{human_bytes(nbytes)} (declared)"
                if how == "declared"
                else human_bytes(nbytes)
            )
            seconds = [nbytes * f for f in per_byte]
            no_link = f", no link: assumed {DEFAULT_BANDWIDTH_MBPS:.0f} Mbit/s"

            blocked = self.fleet.unreachable

            def note(i: int) -> str:
                if sites[i].name == source:
                    return ""
                link = "" if known[i] else no_link
                relay = (
                    self.relay(source, sites[i].name)
                    if (source, sites[i].name) in blocked
                    else None
                )
                via = f" through a copy at {relay}" if relay else ""
                return (
                    f"upstream output {size} from {source}{via} ({human_seconds(seconds[i])}{link})"
                )

            moved = [0 if s.name == source else nbytes for s in sites]
            cached = self.caches.upstream.put(
                key, Costs(moved, seconds, memo_note(note, len(sites)))
            )
        return cached


def dataset_cost(ctx: PlanContext, d: DatasetInfo, site: str) -> tuple[int, float, str, bool]:
    """(bytes to move, seconds, source site, link known) to read dataset ``d`` at ``site`` from
    its best replica; source "" when it is local or has no replica."""
    best: tuple[float, int, str, bool] | None = None
    for r in d.replicas:
        size = r.bytes or d.bytes
        if r.site == site:
            return 0, 0.0, "", True
        t, known = ctx.transfer(r.site, site, size)
        cand = (t, size, r.site, known)
        if best is None or cand[:3] < best[:3]:
            best = cand
    if best is None:
        return 0, 0.0, "", True
    t, size, src, known = best
    return size, t, src, known


def dataset_note(ctx: PlanContext, d: DatasetInfo, site: str) -> str:
    if not d.replicas:
        return f"dataset {d.name} has no replica"
    size, t, src, known = dataset_cost(ctx, d, site)
    if not src:
        return f"dataset {d.name} local"
    link = "" if known else f", no link: assumed {DEFAULT_BANDWIDTH_MBPS:.0f} Mbit/s"
    return f"dataset {d.name} {human_bytes(size)} from {src} ({human_seconds(t)}{link})"
