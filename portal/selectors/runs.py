"""Reads for the run pages: the list with each run's progress, a run's units table, what waits
for quota or approval, its decisions and its cost."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connection
from django.db.models import (
    BooleanField,
    Count,
    F,
    IntegerField,
    JSONField,
    OuterRef,
    Prefetch,
    QuerySet,
    Subquery,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce

from portal.choices import UnitPhase
from portal.models import PlacementDecision, RunEvent, UnitRun, WorkflowRun
from portal.quotas import overview as quota_overview
from portal.quotas import priorities as quota_priorities
from portal.quotas import queue as quota_queue
from portal.quotas import scopes as quota_scopes
from portal.quotas import usage as quota_usage
from portal.selectors import runs_visible_to, unit_suspended

DONE_PHASES = (UnitPhase.SUCCEEDED, UnitPhase.SKIPPED, UnitPhase.OMITTED)
FAILED_PHASES = (UnitPhase.FAILED, UnitPhase.ERROR)
# At most this many running steps are asked whether they wait for approval.
SUSPENDED_READ = 50


def runs_listed(user: Any) -> QuerySet[WorkflowRun]:
    """The runs ``user`` may see, with what the list shows of each (project, owner)."""
    visible = runs_visible_to(user).values("pk")
    return WorkflowRun.objects.filter(pk__in=visible).select_related("project", "owner")


# What the run page reads of a run's ``manifest`` and ``compiled``, read by PostgreSQL in
# place of the two columns (``runs_listed_light``). A fan-out's items are in both, twice in
# ``compiled`` (its templates and its spec): 5.7 MB for 50,000 items, 80 ms of every poll of
# the live partial to read and decode, against a few ms for these facts.
_LIGHT_FACTS: dict[str, tuple[str, Any]] = {
    "light_suspend": (
        "coalesce((compiled #> '{spec,suspend}') = 'true'::jsonb, false)",
        BooleanField,
    ),
    "light_suspend_templates": (
        "(SELECT jsonb_agg(t.key) FROM jsonb_each(compiled -> 'templates') AS t"
        " WHERE jsonb_typeof(t.value) = 'object' AND t.value ? 'suspend')",
        JSONField,
    ),
    "light_priority_class": ("compiled -> 'priority_class'", JSONField),
}


def runs_listed_light(user: Any) -> QuerySet[WorkflowRun]:
    """``runs_listed`` without the run's ``manifest`` and ``compiled`` (read only if something
    asks for them), with what the run page needs of them: ``WorkflowRun.suspended``,
    ``suspend_templates`` and ``priority_class`` answer from these. The embedded demo's
    SQLite has no JSON path: it reads the columns."""
    runs = runs_listed(user)
    if connection.vendor != "postgresql":
        return runs
    facts = {k: RawSQL(sql, [], output_field=kind()) for k, (sql, kind) in _LIGHT_FACTS.items()}
    return runs.defer("manifest", "compiled").annotate(**facts)


def runs_with_units(user: Any) -> QuerySet[WorkflowRun]:
    """The runs ``user`` may see, each with its units in their order (one query for all)."""
    return runs_visible_to(user).prefetch_related(
        Prefetch("units", queryset=UnitRun.objects.order_by("position", "id"))
    )


def runs_with_progress(runs: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
    """``runs`` with their units counted: ``units_total``, ``units_done``, ``units_failed``,
    ``units_running``."""

    def count(phases: Iterable[str] | None) -> Coalesce:
        units = UnitRun.objects.filter(run=OuterRef("pk"))
        if phases is not None:
            units = units.filter(phase__in=list(phases))
        sub = units.order_by().values("run").annotate(n=Count("pk")).values("n")
        return Coalesce(Subquery(sub, output_field=IntegerField()), 0)

    return runs.annotate(
        units_total=count(None),
        units_done=count(DONE_PHASES),
        units_failed=count(FAILED_PHASES),
        units_running=count([UnitPhase.RUNNING]),
    )


def run_unit_table(run: WorkflowRun, phase: str = "", site: str = "") -> QuerySet[UnitRun]:
    """The run's units in their order, of ``phase`` and at ``site`` when given."""
    table = run.units.order_by("position", "id")
    if phase:
        table = table.filter(phase=phase)
    if site:
        table = table.filter(site=site)
    return table


def run_quota_queue(
    run: WorkflowRun, rows: Sequence[UnitRun]
) -> tuple[dict[int, quota_overview.QueueEntry], int]:
    """Where ``rows`` wait in their quota queues (by unit id) and how many of the run's units
    wait in all. Only the rows given, and only where quotas exist: a queue's order is read once
    per site and project, whatever the run's size."""
    if not quota_scopes.governed():
        return {}, 0
    queue = quota_overview.queue_of(rows)
    return queue, quota_queue.waiting().filter(run_id=run.pk).count()


def run_units_suspended(run: WorkflowRun, running: int) -> list[UnitRun]:
    """The run's running steps that wait for approval. Only a run with a suspend template has
    any: no read of the running steps otherwise."""
    if not running or not run.waits_on_approval:
        return []
    suspended = []
    for u in run.units.filter(phase=UnitPhase.RUNNING).order_by("position")[:SUSPENDED_READ]:
        u.run = run  # no query per unit for the run's templates
        if unit_suspended(u):
            suspended.append(u)
    return suspended


def run_decision_log(run: WorkflowRun) -> QuerySet[PlacementDecision]:
    """The run's placement decisions, oldest first, each with its unit's name."""
    return (
        run.decisions.annotate(unit_name=F("unit__name"))
        .select_related("shared_table")
        .order_by("created_at", "id")
    )


def run_decisions_all(run: WorkflowRun) -> QuerySet[PlacementDecision]:
    """Every placement decision of the run, oldest first, with its unit and shared table."""
    return run.decisions.select_related("unit", "shared_table").order_by("created_at", "id")


def run_events(run: WorkflowRun) -> QuerySet[RunEvent]:
    """Every event of the run, oldest first, with its unit."""
    return run.events.select_related("unit").order_by("created_at", "id")


def decision_candidates(decision: PlacementDecision) -> list[dict[str, Any]]:
    """A decision's candidates, eligible first, then by score and site."""
    return sorted(
        (c for c in decision.candidate_rows if isinstance(c, dict)),
        key=lambda c: (not c.get("eligible"), -(c.get("score") or 0), str(c.get("site"))),
    )


# The run page lists this many of the run's costliest units and of its queued units (the
# nearest to starting): a 10,000-unit run's page stays one screen and one read.
COSTS_SHOWN = 50
QUEUED_SHOWN = 50


def run_cost(run: WorkflowRun) -> dict[str, Any]:
    """The run page's cost panel and its units queued for quota."""
    return {**quota_usage.run_cost_panel(run, COSTS_SHOWN), **run_queue(run)}


def run_queue(run: WorkflowRun) -> dict[str, Any]:
    """The run's priority and its units queued for quota, the nearest to starting first (read
    from the queue, not from every unit of the run)."""
    waiting = quota_queue.waiting().filter(unit__run_id=run.pk).values("unit_id")
    units = list(
        run.units.filter(pk__in=Subquery(waiting)).only(
            "id", "name", "site", "phase", "workflow_name"
        )
    )
    queue = quota_overview.queue_of(units)
    queued = [{"name": u.name, "site": u.site, **vars(queue[u.pk])} for u in units if u.pk in queue]
    nearest = sorted(queued, key=lambda q: (q["position"], q["site"], q["name"]))[:QUEUED_SHOWN]
    return {
        "priority_class": quota_priorities.run_priority(run)[0],
        "queued_units": sorted(nearest, key=lambda q: (q["site"], q["position"])),
        "queued_total": len(queued),
    }


def run_unit_slug(run: WorkflowRun, name: str) -> str | None:
    """The slug of the run's unit named ``name``, or None."""
    return run.units.filter(name=name).values_list("slug", flat=True).first()
