"""Reads for the live part of the run page, at a cost that does not grow with the run.

One poll reads the run's units as one aggregate query (``unit_counts``: per phase and site, a
looped task's items folded into one row per task), the drawn graph's structure from a cache that
is rebuilt only when units are added (``graph_skeleton``), and one page of units. The graph's
group nodes, the timeline's bars of a group, the progress bar and the filters are all drawn
from those counts, so a 10,000-unit run costs about what a 10-unit run does. ``version`` is a
digest of everything the partial shows: the view answers 304 to a poll that already has it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.core.cache import cache
from django.db import connection
from django.db.models import BooleanField, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.fields.json import KT
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from portal.choices import FINAL_UNIT
from portal.drawing import Group, group_units
from portal.models import PlacementDecision, RunEvent, UnitRun, WorkflowRun
from portal.selectors import outputs_summary

# A poll's version moves at least this often while the run goes on, so that the durations of
# what runs (drawn up to now) move on the page even when no unit does.
CLOCK_STEP_S = 30
# The skeleton of a run's graph changes only when units are added; kept a day after its last use.
SKELETON_TTL_S = 24 * 3600
SKELETON_FIELDS = ("name", "slug", "upstream", "depends", "timing", "planned_site")

# The items of loops, counted per task, phase and site (a range of the ``unitrun_live_counts``
# index, a hash of a few groups); and every other unit, one row each.
_LOOP_COUNTS_SQL = """
SELECT loop_task, TRUE, phase, site, planned_site, count(*), min(started_at), max(finished_at),
       '', ''
FROM portal_unitrun WHERE run_id = %s AND loop_task <> ''
GROUP BY loop_task, phase, site, planned_site
"""
_UNITS_SQL = """
SELECT name, FALSE, phase, site, planned_site, 1, started_at, finished_at, slug, timing
FROM portal_unitrun WHERE run_id = %s AND loop_task = ''
"""


@dataclass(frozen=True)
class CountRow:
    """Units of one node (a unit, or the items of one looped task) in one phase at one site."""

    node: str
    item: bool
    phase: str
    site: str
    planned_site: str
    n: int
    started_at: datetime | None
    finished_at: datetime | None
    slug: str
    timing: str


@dataclass
class Counts:
    rows: list[CountRow]
    total: int = 0
    by_phase: dict[str, int] = field(default_factory=dict)

    def filtered(self, phase: str, site: str) -> int:
        """How many units the table shows with these filters (empty: any)."""
        return sum(
            r.n
            for r in self.rows
            if (not phase or r.phase == phase) and (not site or r.site == site)
        )

    def sites(self) -> list[str]:
        return sorted({r.site for r in self.rows if r.site})

    def where(self) -> set[str]:
        return {r.site or r.planned_site for r in self.rows if r.site or r.planned_site}


def _count_row(r: Sequence[Any]) -> CountRow:
    """A row of the counts. PostgreSQL answers the times as datetimes; SQLite (the embedded
    demo) answers an aggregate's as text, which the timeline could not compare."""
    node, item, phase, site, planned_site, n, started, finished, slug, timing = r
    return CountRow(
        node,
        bool(item),
        phase,
        site,
        planned_site,
        n,
        _when(started),
        _when(finished),
        slug,
        timing,
    )


def _when(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    parsed = parse_datetime(str(value))
    if parsed is not None and timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed, UTC)
    return parsed


def unit_counts(run_id: int) -> Counts:
    with connection.cursor() as cursor:
        cursor.execute(_LOOP_COUNTS_SQL, [run_id])
        rows = [_count_row(r) for r in cursor.fetchall()]
        cursor.execute(_UNITS_SQL, [run_id])
        rows += [_count_row(r) for r in cursor.fetchall()]
    out = Counts(rows=rows)
    for r in rows:
        out.total += r.n
        out.by_phase[r.phase] = out.by_phase.get(r.phase, 0) + r.n
    return out


@dataclass(frozen=True)
class Skeleton:
    """The nodes the graph draws (after folding big loops into group nodes), their upstream
    among drawn nodes, which loops are drawn item by item, and the nodes nothing depends on."""

    nodes: list[dict[str, Any]]
    grouped: frozenset[str]
    loose_loops: frozenset[str]
    final: frozenset[str]


def graph_skeleton(run: WorkflowRun, counts: Counts, expand: Sequence[str]) -> Skeleton:
    """The structure of the run's graph, read once per set of units (units are only ever
    added to a run, by the expansion of a loop at runtime: the cache key holds how many)."""
    # The run's creation time too: a test database hands the same ids out again.
    stamp = run.created_at.timestamp()
    shown = hashlib.blake2b("|".join(sorted(expand)).encode(), digest_size=8).hexdigest()
    key = f"live-skeleton:{run.pk}:{stamp}:{counts.total}:{shown}"
    found = cache.get(key)
    if isinstance(found, Skeleton):
        return found
    rows = list(
        run.units.order_by("position", "id").values(
            *SKELETON_FIELDS,
            "expanded",
            "kind",
            task=_kt("task"),
            item_index=_kt("item_index"),
        )
    )
    drawn, groups = group_units(rows, expand)
    loops = {str(r["task"]) for r in rows if r["item_index"] is not None}
    nodes = [
        {"name": n["name"], "upstream": n["upstream"], "timing": n.get("timing"), "group": True}
        if n.get("group") is not None
        else {**{k: n.get(k) for k in SKELETON_FIELDS}, "kind": n.get("kind")}
        for n in drawn
    ]
    needed = {str(d) for n in drawn for d in n.get("upstream") or []}
    skeleton = Skeleton(
        nodes=nodes,
        grouped=frozenset(groups),
        loose_loops=frozenset(loops - set(groups)),
        final=frozenset(str(n["name"]) for n in drawn if str(n["name"]) not in needed),
    )
    cache.set(key, skeleton, SKELETON_TTL_S)
    return skeleton


def _kt(key: str) -> Any:
    return KT(f"spec__{key}")


LOOSE_FIELDS = ("name", "slug", "timing", "site", "planned_site", "phase")


def drawn_units(run: WorkflowRun, counts: Counts, skeleton: Skeleton) -> list[dict[str, Any]]:
    """The graph's nodes with their state now: a unit's phase and site from its own count row,
    a group's counts per site and phase from its task's rows. Only the items of loops drawn
    one by one (small, or expanded on request) are read row by row."""
    units: dict[str, dict[str, Any]] = {}
    groups: dict[str, Group] = {t: Group(task=t) for t in skeleton.grouped}
    for r in counts.rows:
        if r.item and r.node in groups:
            g = groups[r.node]
            where = r.site or r.planned_site
            g.sites[where] = g.sites.get(where, 0) + r.n
            g.phases[r.phase] = g.phases.get(r.phase, 0) + r.n
        elif not r.item:
            units[r.node] = _unit_of(r)
    if skeleton.loose_loops:
        loose = run.units.filter(loop_task__in=sorted(skeleton.loose_loops))
        for u in loose.values(*LOOSE_FIELDS, "started_at", "finished_at"):
            units[u["name"]] = u
    out = []
    for node in skeleton.nodes:
        name = str(node["name"])
        if node.get("group"):
            g = groups.get(name) or Group(task=name)
            top = g.site_counts[0][0] if g.site_counts else ""
            out.append({**node, "group": g, "site": top, "planned_site": "", "phase": g.phase})
        else:
            out.append({**node, **units.get(name, {})})
    return out


def _unit_of(r: CountRow) -> dict[str, Any]:
    return {
        "name": r.node,
        "slug": r.slug,
        "timing": r.timing,
        "site": r.site,
        "planned_site": r.planned_site,
        "phase": r.phase,
        "started_at": r.started_at,
        "finished_at": r.finished_at,
    }


TIMES = "\u00d7"


def timeline_rows(
    counts: Counts,
    drawn: Iterable[dict[str, Any]],
    skeleton: Skeleton,
    moved: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """What the timeline draws: a unit's own bar, and one bar per site and phase of a group
    (from its first start to its last end), so the timeline of a huge loop stays a few bars.
    ``moved``: each transfer's bytes (``transfers.moved_of``), shown on its bar."""
    out = [
        {**u, "moved": (moved or {}).get(str(u.get("name")))} if u.get("kind") == "transfer" else u
        for u in drawn
        if u.get("group") is None and u.get("started_at")
    ]
    for r in counts.rows:
        if not r.item or r.started_at is None or r.node not in skeleton.grouped:
            continue
        out.append(
            {
                "name": f"{r.node} {TIMES}{r.n}",
                "site": r.site or r.planned_site,
                "phase": r.phase,
                "started_at": r.started_at,
                "finished_at": r.finished_at if r.phase in FINAL_UNIT else None,
            }
        )
    return out


def latest_event_id(run: WorkflowRun) -> int:
    return (
        RunEvent.objects.filter(run=run).order_by("-id").values_list("id", flat=True).first() or 0
    )


def latest_decision_id(run: WorkflowRun) -> int:
    return (
        PlacementDecision.objects.filter(run=run)
        .order_by("-id")
        .values_list("id", flat=True)
        .first()
        or 0
    )


def events_since(run: WorkflowRun, since: int, limit: int) -> list[RunEvent]:
    """The run's events newer than ``since`` (an event id), newest first, at most ``limit``."""
    return list(
        RunEvent.objects.filter(run=run, id__gt=since)
        .select_related("unit")
        .order_by("-id")[:limit]
    )


def version(*parts: Any) -> str:
    """A strong validator for what the partial shows, from the values it is drawn from."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=12).hexdigest()
    return f'"{digest}"'


def page_state(rows: Iterable[UnitRun]) -> list[tuple[Any, ...]]:
    """What a row of the units table shows, for the version."""
    return [
        (u.pk, u.phase, u.site, u.attempt, u.message, u.reason, u.started_at, u.finished_at)
        for u in rows
    ]


FINAL_COUNTED = 1000


def live_outputs(run: WorkflowRun, skeleton: Skeleton, limit: int) -> dict[str, Any]:
    """``selectors.run_outputs`` without reading every unit's outputs: the final steps are the
    units of the graph's final nodes (a group's items when the group is final), the first
    ``limit`` of those with outputs, and the global outputs come from the units whose outputs
    name a ``globalName``."""
    plain = [n for n in skeleton.final if n not in skeleton.grouped]
    loops = [n for n in skeleton.final if n in skeleton.grouped]
    final = run.units.filter(
        Q(name__in=plain) | Q(spec__task__in=loops, spec__item_index__isnull=False)
    ).filter(
        Q(outputs__has_key="parameters")
        | Q(outputs__has_key="artifacts")
        | Q(outputs__has_key="result")
    )
    fields = ("name", "upstream", "phase", "outputs")
    rows = [dict(r) for r in final.order_by("position", "id").values(*fields)[:limit]]
    shown = outputs_summary(rows)["final"]
    # Counted up to FINAL_COUNTED ("1000+" beyond): a count of every finished item of a
    # 50,000-item fan-out was most of each poll (60 ms for 25,000).
    total = final.order_by()[: FINAL_COUNTED + 1].count() if len(rows) == limit else len(shown)
    named = [dict(r) for r in _with_global_outputs(run.units.all()).values(*fields)]
    return {
        "global": outputs_summary(named)["global"],
        "final": shown,
        "final_total": min(total, FINAL_COUNTED),
        "final_more": total > FINAL_COUNTED,
    }


def _with_global_outputs(units: QuerySet[UnitRun]) -> QuerySet[UnitRun]:
    """The units whose outputs name a ``globalName``. On PostgreSQL a JSON path over the stored
    binary form (no unit's outputs turned into text); the embedded demo's SQLite has no such
    operator, and its runs are small: the outputs are read there and filtered in Python."""
    if connection.vendor == "postgresql":
        # The partial index ``unitrun_global_outputs`` (migration 0021) has this very
        # condition, word for word: a run's few such units are found without reading the
        # others.
        has_global = RawSQL(
            "outputs @? '$.parameters[*].globalName' OR outputs @? '$.artifacts[*].globalName'",
            [],
            output_field=BooleanField(),
        )
        return units.alias(g=has_global).filter(g=True)
    named = [
        pk
        for pk, outputs in units.exclude(outputs__isnull=True).values_list("pk", "outputs")
        if any(
            isinstance(o, dict) and o.get("globalName")
            for kind in ("parameters", "artifacts")
            for o in ((outputs or {}).get(kind) or [])
        )
    ]
    return units.filter(pk__in=named)
