"""The run pages: the list, one run (DAG, timeline, units, decisions), and its actions."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, F, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse, HttpResponseBase, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from placement.parser import WorkflowInvalid
from portal import services
from portal.choices import RunStatus, UnitPhase
from portal.filtersets import WorkflowRunFilterSet
from portal.models import UnitRun, WorkflowRun
from portal.selectors import (
    ended_attempts_of_run,
    failovers_blocked,
    run_outputs,
    runs_visible_to,
    unit_suspended,
)
from portal.templatetags.portal_ui import PHASES as PHASE_ORDER
from portal.templatetags.portal_ui import group_units
from portal.views.common import UNITS_PER_PAGE, fleet_colours, is_htmx, legend, page_of

GRAPH_FIELDS = (
    "name",
    "slug",
    "upstream",
    "depends",
    "timing",
    "site",
    "planned_site",
    "phase",
    "started_at",
    "finished_at",
)
DONE_PHASES = (UnitPhase.SUCCEEDED, UnitPhase.SKIPPED, UnitPhase.OMITTED)
FAILED_PHASES = (UnitPhase.FAILED, UnitPhase.ERROR)
RUNS_PER_PAGE = 25
DECISIONS_PER_PAGE = 25
# Polling intervals: the run page every 2 s while the run is not finished; a very large run
# re-renders less often, so that a few open tabs do not keep the web server busy.
RUN_POLL = "2s"
RUN_POLL_LARGE = "6s"
LARGE_RUN_UNITS = 300
EVENTS_SHOWN = 30
FINAL_OUTPUTS_SHOWN = 20


def _with_progress(runs: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
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


def _visible_runs(request: HttpRequest) -> QuerySet[WorkflowRun]:
    visible = runs_visible_to(request.user).values("pk")
    return WorkflowRun.objects.filter(pk__in=visible).select_related("project", "owner")


@login_required
@require_GET
def run_list(request: HttpRequest) -> HttpResponse:
    filterset = WorkflowRunFilterSet(
        request.GET or None, queryset=_visible_runs(request), request=request
    )
    runs = _with_progress(filterset.qs.order_by("-created_at", "-id"))
    page = page_of(request, runs, RUNS_PER_PAGE)
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "filterset": filterset,
        "page": page,
        "runs": list(page.object_list),
        "query": query.urlencode(),
        "live": any(r.finished_at is None and not r.is_finished for r in page.object_list),
    }
    template = "portal/htmx/run_table.html" if is_htmx(request) else "portal/run_list.html"
    return render(request, template, context)


def _get_run(request: HttpRequest, pk: int) -> WorkflowRun:
    return get_object_or_404(_visible_runs(request), pk=pk)


def _duration(start: datetime | None, end: datetime | None, now: datetime) -> timedelta | None:
    if start is None:
        return None
    return (end or now) - start


@dataclass
class UnitRow:
    unit: UnitRun
    duration: timedelta | None


def _run_context(request: HttpRequest, run: WorkflowRun) -> dict[str, Any]:
    """Everything the live part of the run page shows (DAG, timeline, units table)."""
    now = timezone.now()
    # The DAG and the timeline need a few fields of every unit: plain dicts, not model
    # instances, keep a 2,000-unit run cheap. The table shows one page of full rows.
    units = list(
        run.units.order_by("position", "id").values(
            *GRAPH_FIELDS,
            task=KT("spec__task"),
            item_index=KT("spec__item_index"),
            expanded=KT("spec__expanded"),
        )
    )
    colours = fleet_colours(u["site"] or u["planned_site"] for u in units)
    counts: dict[str, int] = defaultdict(int)
    for u in units:
        counts[u["phase"]] += 1
    total = len(units)
    done = sum(counts[p] for p in DONE_PHASES)
    failed = sum(counts[p] for p in FAILED_PHASES)
    finished = run.is_finished
    table = run.units.order_by("position", "id")
    phase_filter = request.GET.get("phase") or ""
    site_filter = request.GET.get("site") or ""
    if phase_filter:
        table = table.filter(phase=phase_filter)
    if site_filter:
        table = table.filter(site=site_filter)
    page = page_of(request, table, UNITS_PER_PAGE)
    expand = [t for t in request.GET.getlist("expand") if t]
    query = QueryDict(mutable=True)
    for key, value in (("phase", phase_filter), ("site", site_filter)):
        if value:
            query[key] = value
    query.setlist("expand", expand)
    filter_query = query.urlencode()
    if page.number > 1:
        query["page"] = str(page.number)
    live_url = reverse("ui-run-live", args=[run.pk])
    if query:
        live_url += f"?{query.urlencode()}"
    expand_query = QueryDict(mutable=True)
    expand_query.setlist("expand", expand)
    group_link = f"{reverse('ui-run-live', args=[run.pk])}?"
    if expand_query:
        group_link += f"{expand_query.urlencode()}&"
    group_link += "expand="
    events = list(run.events.select_related("unit").order_by("-created_at", "-id")[:EVENTS_SHOWN])
    blocked, blocked_total = failovers_blocked(run)
    suspended = []
    if counts[UnitPhase.RUNNING]:
        for u in run.units.filter(phase=UnitPhase.RUNNING).order_by("position")[:50]:
            u.run = run  # no query per unit for the run's templates
            if unit_suspended(u):
                suspended.append(u)
    return {
        "run": run,
        "units": units,
        "colours": colours,
        "legend": legend(colours, (u["site"] or u["planned_site"] for u in units)),
        "total": total,
        "done": done,
        "failed": failed,
        "running": counts[UnitPhase.RUNNING],
        "percent": round(100 * done / total) if total else 0,
        "phase_counts": sorted(counts.items()),
        "finished": finished,
        "poll": RUN_POLL_LARGE if total > LARGE_RUN_UNITS else RUN_POLL,
        "live_url": live_url,
        "unit_page": page,
        "unit_rows": [UnitRow(u, _duration(u.started_at, u.finished_at, now)) for u in page],
        "phase_filter": phase_filter,
        "site_filter": site_filter,
        "filter_query": filter_query,
        "unit_sites": sorted({u["site"] for u in units if u["site"]}),
        "phases_drawn": [p for p in PHASE_ORDER if counts.get(p)],
        "all_phases": PHASE_ORDER,
        "expand": expand,
        "group_link": group_link,
        "groups": group_units(units, expand)[1],
        "ended_attempts": ended_attempts_of_run(run),
        "unit_link": reverse("ui-unit-detail", args=[run.pk, "-"])[:-2],
        "events": events,
        "suspended_units": suspended,
        "event_count": run.events.count(),
        "outputs": run_outputs(run, limit=FINAL_OUTPUTS_SHOWN),
        "run_duration": _duration(run.started_at or run.created_at, run.finished_at, now),
        # Retry restarts the failed units of a failed run only; a stopped run is resubmitted.
        "can_retry": run.status in (RunStatus.FAILED, RunStatus.ERROR),
        "blocked_failovers": blocked,
        "blocked_failovers_total": blocked_total,
        "now": now,
    }


@login_required
@require_GET
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = _get_run(request, pk)
    context = _run_context(request, run)
    context.update(_decisions_context(request, run))
    return render(request, "portal/run_detail.html", context)


@login_required
@require_GET
def run_live(request: HttpRequest, pk: int) -> HttpResponse:
    """The polled part of the run page. A finished run's partial carries no polling trigger,
    so the browser stops asking."""
    run = _get_run(request, pk)
    response = render(request, "portal/htmx/run_live.html", _run_context(request, run))
    known = request.GET.get("decisions")
    if known is not None and known != str(run.decisions.count()):
        response["HX-Trigger"] = "decisions-changed"
    return response


def _decisions_context(request: HttpRequest, run: WorkflowRun) -> dict[str, Any]:
    decisions = (
        run.decisions.annotate(unit_name=F("unit__name"))
        .select_related("shared_table")
        .order_by("created_at", "id")
    )
    page = page_of(request, decisions, DECISIONS_PER_PAGE, param="dpage")
    rows = []
    for d in page:
        candidates = sorted(
            (c for c in d.candidate_rows if isinstance(c, dict)),
            key=lambda c: (not c.get("eligible"), -(c.get("score") or 0), str(c.get("site"))),
        )
        rows.append({"decision": d, "candidates": candidates})
    return {
        "decision_page": page,
        "decision_rows": rows,
        "decision_count": page.paginator.count,
        "colours": fleet_colours(),
    }


@login_required
@require_GET
def run_decisions(request: HttpRequest, pk: int) -> HttpResponse:
    run = _get_run(request, pk)
    context = {"run": run, **_decisions_context(request, run)}
    return render(request, "portal/htmx/decisions.html", context)


# Refusals an action answers with a message on the run page rather than an error page.
ACTION_REFUSALS = (PermissionDenied, services.ActionRefused, ValidationError, ValueError)


def _refused(request: HttpRequest, run: WorkflowRun, verb: str, exc: Exception) -> HttpResponseBase:
    if isinstance(exc, PermissionDenied):
        messages.error(request, str(exc) or f"You may not {verb} this run.")
    else:
        if isinstance(exc, ValidationError):
            text = "; ".join(exc.messages)
        elif isinstance(exc, WorkflowInvalid):
            text = "; ".join(f"{e['path']}: {e['message']}" for e in exc.as_dicts())
        else:
            text = str(exc)
        messages.error(request, f"Could not {verb} the run: {text}")
    return redirect("ui-run-detail", pk=run.pk)


@login_required
@require_POST
def run_stop(request: HttpRequest, pk: int) -> HttpResponseBase:
    run = _get_run(request, pk)
    try:
        services.run_stop(run=run, user=request.user)
    except ACTION_REFUSALS as exc:
        return _refused(request, run, "stop", exc)
    messages.success(request, "Stop requested.")
    return redirect("ui-run-detail", pk=run.pk)


@login_required
@require_POST
def run_retry(request: HttpRequest, pk: int) -> HttpResponseBase:
    run = _get_run(request, pk)
    try:
        services.run_retry(run=run, user=request.user)
    except ACTION_REFUSALS as exc:
        return _refused(request, run, "retry", exc)
    messages.success(request, "Failed units retried.")
    return redirect("ui-run-detail", pk=run.pk)


@login_required
@require_POST
def run_resubmit(request: HttpRequest, pk: int) -> HttpResponseBase:
    run = _get_run(request, pk)
    try:
        new = services.run_resubmit(run=run, user=request.user)
    except ACTION_REFUSALS as exc:
        return _refused(request, run, "resubmit", exc)
    messages.success(request, f"Resubmitted as {new.name}.")
    return redirect("ui-run-detail", pk=new.pk)


@login_required
@require_POST
def run_resume(request: HttpRequest, pk: int) -> HttpResponseBase:
    run = _get_run(request, pk)
    node = request.POST.get("node") or None
    try:
        services.run_resume(run=run, user=request.user, node=node)
    except (*ACTION_REFUSALS, WorkflowInvalid) as exc:
        return _refused(request, run, "resume", exc)
    messages.success(request, f"Resume of {node or 'the run'} requested.")
    if node:
        unit = run.units.filter(name=node).values_list("slug", flat=True).first()
        if unit:
            return redirect("ui-unit-detail", pk=run.pk, key=unit)
    return redirect("ui-run-detail", pk=run.pk)
