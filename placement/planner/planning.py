"""Deciding: ``decide`` (one unit, now) and ``plan`` (every unit of a workflow, in order)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from placement.gcpause import gc_paused
from placement.parser import ParsedWorkflow, Resources, Unit
from placement.planner.catalogue import DataCatalogue
from placement.planner.context import PlanContext
from placement.planner.filters import Eligibility
from placement.planner.fleet import Fleet
from placement.planner.inputs import (
    ASSUMED_UPSTREAM_BYTES,
    CAPACITY_WEIGHT,
    DATA_WEIGHT,
    HARD_EFFECTS,
    TRANSFER_HALF_SCORE_S,
    DatasetInfo,
    Rule,
    SizeSource,
    Timing,
    Upstream,
    UpstreamArg,
)
from placement.planner.outputs import Decision, Plan
from placement.planner.reasons import explain, first_runtime_rule
from placement.planner.relays import relay_for
from placement.planner.reservations import reserve
from placement.planner.rules import RuleBook, template_display_name
from placement.planner.scoring import best_position
from placement.planner.table import CandidateTable


def decide(
    unit: Unit,
    fleet: Fleet,
    rules: Sequence[Rule] | RuleBook,
    datasets: Sequence[DatasetInfo] | DataCatalogue,
    project: str | None = None,
    upstream_sites: UpstreamArg = None,
    exclude_sites: Iterable[str] = (),
    *,
    timing: Timing | None = None,
    strict_capacity: bool = False,
    ancestors: Iterable[Unit] = (),
    relays: bool = True,
) -> Decision:
    """Decide one unit now (the webhook, failover, or a re-plan).

    ``upstream_sites`` maps upstream unit names to where they ran (a site name, or an
    ``Upstream(site, bytes)`` when the size of their outputs is known). ``exclude_sites`` are
    removed with the reason "excluded by caller" (a lost site during failover). ``timing`` is
    reported as given (default: the timing the matching rules ask for); the site is always
    chosen. ``strict_capacity`` makes free GPUs, CPU and memory a hard filter (deciding for *now*).
    ``ancestors``: the units whose outputs this one reads, directly or not; the residency of
    what they read binds this unit too. ``relays``: False for a step workflow already built
    (the webhook, a runtime unit's fallback site): its inputs are read where they are, so a
    site that cannot read them itself is not eligible even where a copy could be relayed.
    """
    with gc_paused():
        ctx = PlanContext(fleet, rules, datasets, project, relays)
        where = _normalise_upstream(upstream_sites, unit.upstream)
        bound = _bound(ctx, ancestors)
        decision = _decide(
            ctx,
            unit,
            where,
            frozenset(exclude_sites),
            timing,
            strict_capacity,
            force_site=True,
            bound=bound,
        )
        # One unit: its caller records the candidate table, so build the rows now.
        decision.table.rows()
    return decision


def plan(
    parsed_or_units: ParsedWorkflow | Sequence[Unit],
    fleet: Fleet,
    rules: Sequence[Rule] | RuleBook,
    datasets: Sequence[DatasetInfo] | DataCatalogue,
    project: str | None = None,
    upstream_sites: UpstreamArg = None,
    *,
    ancestors: Iterable[Unit] = (),
) -> Plan:
    """Plan every unit in topological order (the order ``ParsedWorkflow.units`` has).

    A unit whose matching rules include one with timing ``runtime`` gets ``site=None`` and
    ``timing="runtime"``; its candidate table is still computed, as if its upstream units ran
    where they are planned. ``upstream_sites`` pre-seeds known locations (e.g. a re-plan of a
    run in progress: units that already ran).
    """
    units = (
        parsed_or_units.units
        if isinstance(parsed_or_units, ParsedWorkflow)
        else tuple(parsed_or_units)
    )
    ctx = PlanContext(fleet, rules, datasets, project)
    where = _normalise_upstream(upstream_sites)
    decisions: list[Decision] = []
    # Residency-bound datasets each unit read, itself or through its upstream's outputs.
    bound_by: dict[str, tuple[DatasetInfo, ...]] = {}
    # ``ancestors``: units outside this plan whose outputs every unit of it reads (the items
    # of a withParam read what their parent's upstream produced).
    outside = _bound(ctx, ancestors)
    with gc_paused():
        for unit in units:
            ups = {u: where[u] for u in unit.upstream if u in where}
            inherited = _merge([outside, *(bound_by.get(u, ()) for u in unit.upstream)])
            reads = ctx.data.read_by(unit)
            d = _decide(
                ctx,
                unit,
                ups,
                frozenset(),
                None,
                False,
                force_site=False,
                bound=inherited,
                reads=reads,
            )
            bound_by[unit.name] = _merge([inherited, tuple(x for x in reads if x.residency)])
            decisions.append(d)
            if d.site is not None and _requests(unit.resources):
                # The next unit sees this one's requests taken (reservations.py).
                fleet = reserve(fleet, d.site, unit.resources)
                ctx = PlanContext(fleet, ctx.rulebook, ctx.data, project)
            # Later units plan with the site a runtime decision would choose today.
            planned = d.site or d.runtime_hint
            if planned is not None and unit.name not in where:
                # What its template declares it produces (None: unknown, the reason says so).
                where[unit.name] = Upstream(
                    planned, unit.output_bytes, declared=unit.output_bytes is not None
                )
    return Plan(tuple(decisions))


def _merge(groups: Iterable[tuple[DatasetInfo, ...]]) -> tuple[DatasetInfo, ...]:
    found: dict[str, DatasetInfo] = {}
    for group in groups:
        for d in group:
            found[d.name] = d
    return tuple(found[n] for n in sorted(found))


def _bound(ctx: PlanContext, ancestors: Iterable[Unit]) -> tuple[DatasetInfo, ...]:
    return _merge(tuple(d for d in ctx.data.read_by(u) if d.residency) for u in ancestors)


def _reachable(
    ctx: PlanContext,
    elig: Eligibility,
    moving: Sequence[tuple[str, int, SizeSource]],
    derived: tuple[DatasetInfo, ...] = (),
) -> Eligibility:
    """Sites that cannot read the artifact repository of a site upstream outputs are at, and
    where no relay can copy them to (``relays.py``): a relay outside the regions the outputs
    are bound to by a residency-bound dataset read upstream (``derived``) is never used."""
    blocked = ctx.fleet.unreachable
    if not blocked or not moving:
        return elig
    sources = sorted({src for src, _, _ in moving})
    regions = frozenset(set.intersection(*(set(d.residency) for d in derived))) if derived else None
    whys = list(elig.whys)
    changed = False
    for i, s in enumerate(ctx.sites):
        if whys[i] is not None:
            continue
        cut = []
        for src in sources:
            if (src, s.name) not in blocked:
                continue
            relay = ctx.relay(src, s.name)
            if relay is not None and regions is not None:
                site = ctx.fleet.site_by_name.get(relay)
                if site is None or site.region not in regions:
                    relay = relay_for(ctx.fleet, src, s.name, 1 << 20, regions)
            if relay is None:
                cut.append(src)
        if cut:
            why = f"cannot reach the artifact repository of {', '.join(cut)} (upstream outputs)"
            if regions is not None:
                names = ", ".join(d.name.removesuffix(" (read upstream)") for d in derived)
                why += (
                    f" and no relay in {', '.join(sorted(regions)) or 'no region'} "
                    f"(residency of {names})"
                )
            else:
                why += " and no site can relay them"
            whys[i] = why
            changed = True
    return Eligibility(whys) if changed else elig


def _requests(r: Resources) -> bool:
    return bool(r.cpu_millicores or r.memory_bytes or r.gpus)


def _normalise_upstream(
    upstream_sites: UpstreamArg, only: Sequence[str] | None = None
) -> dict[str, Upstream]:
    """Upstream locations as ``Upstream`` objects; with ``only``, just those units (a caller may
    pass where every unit of the run is: only the unit's own upstream feed it)."""
    out: dict[str, Upstream] = {}
    source = upstream_sites or {}
    names = source.keys() if only is None else (n for n in only if n in source)
    for name in names:
        where = source[name]
        if isinstance(where, Upstream):
            out[name] = where
        elif isinstance(where, str) and where:
            out[name] = Upstream(where)
    return out


def _decide(
    ctx: PlanContext,
    unit: Unit,
    upstream: Mapping[str, Upstream],
    exclude: frozenset[str],
    timing: Timing | None,
    strict_capacity: bool,
    force_site: bool,
    bound: tuple[DatasetInfo, ...] = (),
    reads: tuple[DatasetInfo, ...] | None = None,
) -> Decision:
    matched = ctx.rulebook.matching(unit, ctx.project)
    if reads is None:  # the datasets the unit reads, unless its caller looked them up
        reads = ctx.data.read_by(unit)
    derived = _derived(bound, reads)
    rule_timing: Timing = "runtime" if any(r.timing == "runtime" for r in matched) else "submit"
    effective: Timing = timing or rule_timing
    moving = _moving(upstream)
    # Units with the same rules, data, requests and upstream locations share one evaluation.
    memo_key = (
        tuple(r.id for r in matched),
        tuple(d.name for d in reads),
        unit.resources,
        moving,
        exclude,
        strict_capacity,
        tuple(d.name for d in derived),
    )
    memo = ctx.memo.get(memo_key)
    if memo is None:
        memo = _evaluate(
            ctx, unit.resources, matched, reads, moving, exclude, strict_capacity, derived
        )
        ctx.memo[memo_key] = memo
    else:
        ctx.memo_hits += 1
    table, best, reason = memo
    site = best
    hint = None
    if effective == "runtime" and not force_site:
        site, hint = None, best
        reason = (
            f"placed at runtime by rule '{first_runtime_rule(matched)}'; now it would be: {reason}"
        )
    return Decision(
        unit=unit.name,
        template=template_display_name(unit.template),
        depends=unit.depends,
        timing=effective,
        site=site,
        reason=reason,
        table=table,
        rules=tuple(r.name for r in matched),
        datasets=tuple(d.name for d in reads),
        runtime_hint=hint,
    )


def _derived(
    bound: tuple[DatasetInfo, ...], reads: tuple[DatasetInfo, ...]
) -> tuple[DatasetInfo, ...]:
    """Outputs derived from a residency-bound dataset are bound by it too (a filter only:
    nothing of the dataset itself moves); a dataset the unit reads itself binds it already."""
    own = {d.name for d in reads}
    return tuple(
        DatasetInfo(name=f"{d.name} (read upstream)", residency=d.residency)
        for d in bound
        if d.name not in own
    )


def _moving(upstream: Mapping[str, Upstream]) -> tuple[tuple[str, int, SizeSource], ...]:
    """The upstream outputs a unit reads, as (site, bytes, how the size is known), sorted;
    an output known to be empty moves nothing."""
    return tuple(
        sorted(
            (u.site, ASSUMED_UPSTREAM_BYTES if u.bytes is None else u.bytes, u.size_source)
            for u in upstream.values()
            if u.bytes is None or u.bytes > 0
        )
    )


def _evaluate(
    ctx: PlanContext,
    req: Resources,
    matched: Sequence[Rule],
    reads: Sequence[DatasetInfo],
    moving: Sequence[tuple[str, int, SizeSource]],
    exclude: frozenset[str],
    strict_capacity: bool,
    derived: tuple[DatasetInfo, ...] = (),
) -> tuple[CandidateTable, str | None, str]:
    hard = [r for r in matched if r.effect in HARD_EFFECTS]
    locality_w = DATA_WEIGHT + sum(r.weight for r in matched if r.effect == "prefer_data_locality")
    capacity_w = CAPACITY_WEIGHT + sum(
        r.weight for r in matched if r.effect == "prefer_free_capacity"
    )
    elig = ctx.eligibility(hard, (*reads, *derived), req, exclude, strict_capacity)
    elig = _reachable(ctx, elig, moving, derived)
    capacity = ctx.capacity(req)
    costs = [ctx.dataset_costs(reads)] if reads else []
    costs += [ctx.upstream_costs(src, b, how) for src, b, how in moving]
    # The hot path: only eligible sites, in list comprehensions. Scores are rounded when rows
    # are built; ranking uses the exact values.
    idx = elig.idx
    if not costs:
        seconds = [0.0] * len(idx)
    else:
        first = costs[0].seconds
        seconds = [first[i] for i in idx]
        for more in costs[1:]:
            vector = more.seconds
            seconds = [t + vector[i] for t, i in zip(seconds, idx, strict=True)]
    fractions = capacity[0]
    lw, cw, half = locality_w, capacity_w, TRANSFER_HALF_SCORE_S
    scores = [
        lw * (1.0 - t / (t + half)) + cw * fractions[i] for t, i in zip(seconds, idx, strict=True)
    ]
    best = best_position(scores, idx, costs, skip=-1)
    second = best_position(scores, idx, costs, skip=best) if best >= 0 else -1

    table = CandidateTable(
        ctx.sites,
        elig.whys,
        capacity,
        costs,
        idx,
        scores,
        seconds,
        bool(reads or moving),
        n_data=1 if reads else 0,
    )
    if best < 0:
        return table, None, f"unplaceable: no eligible site ({elig.summary(ctx.sites)})"
    reason = explain(ctx, table, best, second, hard, reads, req, locality_w, capacity_w)
    if derived:
        regions = sorted(set.intersection(*(set(d.residency) for d in derived)))
        names = ", ".join(d.name.removesuffix(" (read upstream)") for d in derived)
        reason += f"; bound to {', '.join(regions) or 'no region'} by {names} read upstream"
    return table, ctx.sites[idx[best]].name, reason
