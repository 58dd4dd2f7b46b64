"""The run pages: the list, one run (DAG, timeline, units, decisions), and its actions."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import Count, F, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseBase,
    HttpResponseNotModified,
    QueryDict,
)
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from placement.parser import WorkflowInvalid
from portal import live, services
from portal.choices import RunStatus, UnitPhase
from portal.controller import transfers
from portal.filtersets import WorkflowRunFilterSet
from portal.models import UnitRun, WorkflowRun
from portal.quotas import overview as quota_overview
from portal.quotas import priorities as quota_priorities
from portal.quotas import queue as quota_queue
from portal.quotas import scopes as quota_scopes
from portal.quotas import usage as quota_usage
from portal.selectors import (
    ended_attempts_of_run,
    failovers_blocked,
    runs_visible_to,
    unit_suspended,
)
from portal.templatetags.portal_ui import PHASES as PHASE_ORDER
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
    # Waiting for its project's quota (issue 32): its position and why; None otherwise.
    queue: quota_overview.QueueEntry | None = None


class BadParameter(ValueError):
    """A query parameter the live partial cannot read; the message names it."""


def _since(request: HttpRequest) -> int | None:
    raw = request.GET.get("since")
    if raw is None or raw == "":
        return None
    if not raw.isdigit():
        raise BadParameter("since: expected the id of the last event the page shows (digits)")
    return int(raw)


def _live_state(request: HttpRequest, run: WorkflowRun, since: int | None) -> dict[str, Any]:
    """What the live part of the run page shows that can change, read at a cost independent
    of the run's size (``portal.live``), and its version."""
    counts = live.unit_counts(run.pk)
    phase_filter = request.GET.get("phase") or ""
    site_filter = request.GET.get("site") or ""
    table = run.units.order_by("position", "id")
    if phase_filter:
        table = table.filter(phase=phase_filter)
    if site_filter:
        table = table.filter(site=site_filter)
    paginator = Paginator(table, UNITS_PER_PAGE)
    # The count is known from the counts: no COUNT(*) over the run's units.
    paginator.__dict__["count"] = counts.filtered(phase_filter, site_filter)
    page = paginator.get_page(request.GET.get("page"))
    rows = list(page.object_list)
    # Only the rows shown, and only where quotas exist: a queue's order is read once per site
    # and project on the page, whatever the run's size.
    queue: dict[int, quota_overview.QueueEntry] = {}
    queued = 0
    if quota_scopes.governed():
        queue = quota_overview.queue_of(rows)
        queued = quota_queue.waiting().filter(run_id=run.pk).count()
    events = live.events_since(run, since or 0, EVENTS_SHOWN)
    last_event = events[0].pk if events else (since or live.latest_event_id(run))
    blocked, blocked_total = failovers_blocked(run)
    suspended = []
    # Only a run with a suspend template has steps waiting for approval: no read of the
    # running steps otherwise.
    templates = (run.compiled or {}).get("templates") or {}
    waits = any(isinstance(t, dict) and "suspend" in t for t in templates.values())
    if waits and counts.by_phase.get(UnitPhase.RUNNING):
        for u in run.units.filter(phase=UnitPhase.RUNNING).order_by("position")[:50]:
            u.run = run  # no query per unit for the run's templates
            if unit_suspended(u):
                suspended.append(u)
    decisions = live.latest_decision_id(run)
    now = timezone.now()
    version = live.version(
        (run.status, run.message, run.finished_at, run.suspended, run.updated_at),
        counts.rows,
        live.page_state(rows),
        # Positions move as other runs' units are admitted: a poll sees them.
        sorted((k, q.position, q.reason) for k, q in queue.items()),
        queued,
        last_event,
        decisions,
        [e.pk for e in blocked],
        [u.pk for u in suspended],
        request.user.pk,
        request.get_full_path(),
        # Durations of what runs are drawn to now: a poll sees them move at least this often.
        int(now.timestamp()) // live.CLOCK_STEP_S,
    )
    return {
        "counts": counts,
        "unit_page": page,
        "queued": queued,
        "unit_rows": [
            UnitRow(u, _duration(u.started_at, u.finished_at, now), queue.get(u.pk)) for u in rows
        ],
        "phase_filter": phase_filter,
        "site_filter": site_filter,
        "events": events,
        "last_event": last_event,
        "decisions_version": decisions,
        "blocked_failovers": blocked,
        "blocked_failovers_total": blocked_total,
        "suspended_units": suspended,
        "version": version,
        "now": now,
    }


def _has_transfer(units: Iterable[dict[str, Any]]) -> bool:
    return any(u.get("kind") == "transfer" for u in units)


def _run_context(request: HttpRequest, run: WorkflowRun, state: dict[str, Any]) -> dict[str, Any]:
    """Everything the live part of the run page draws (DAG, timeline, units table), from
    ``state``: the graph's nodes and groups from the counts, not from every unit."""
    now = state["now"]
    counts: live.Counts = state["counts"]
    expand = [t for t in request.GET.getlist("expand") if t]
    skeleton = live.graph_skeleton(run, counts, expand)
    units = live.drawn_units(run, counts, skeleton)
    colours = fleet_colours(counts.where())
    total = counts.total
    done = sum(counts.by_phase.get(p, 0) for p in DONE_PHASES)
    failed = sum(counts.by_phase.get(p, 0) for p in FAILED_PHASES)
    query = QueryDict(mutable=True)
    for key, value in (("phase", state["phase_filter"]), ("site", state["site_filter"])):
        if value:
            query[key] = value
    query.setlist("expand", expand)
    filter_query = query.urlencode()
    if state["unit_page"].number > 1:
        query["page"] = str(state["unit_page"].number)
    live_url = reverse("ui-run-live", args=[run.pk])
    poll = query.copy()
    poll["since"] = str(state["last_event"])
    poll["decisions"] = str(state["decisions_version"])
    expand_query = QueryDict(mutable=True)
    expand_query.setlist("expand", expand)
    group_link = f"{live_url}?"
    if expand_query:
        group_link += f"{expand_query.urlencode()}&"
    group_link += "expand="
    ended = ended_attempts_of_run(run)
    return {
        **state,
        "run": run,
        "units": units,
        "timeline_units": live.timeline_rows(
            counts, units, skeleton, transfers.moved_of(run) if _has_transfer(units) else None
        ),
        "colours": colours,
        "legend": legend(colours, counts.where()),
        "total": total,
        "done": done,
        "failed": failed,
        "running": counts.by_phase.get(UnitPhase.RUNNING, 0),
        "percent": round(100 * done / total) if total else 0,
        "phase_counts": sorted(counts.by_phase.items()),
        "finished": run.is_finished,
        "poll": RUN_POLL_LARGE if total > LARGE_RUN_UNITS else RUN_POLL,
        "live_url": f"{live_url}?{poll.urlencode()}",
        "filter_query": filter_query,
        "unit_sites": counts.sites(),
        "phases_drawn": [p for p in PHASE_ORDER if counts.by_phase.get(p)],
        "all_phases": PHASE_ORDER,
        "expand": expand,
        "group_link": group_link,
        "groups": {str(u["name"]): u["group"] for u in units if u.get("group") is not None},
        "ended_attempts": ended,
        "unit_link": reverse("ui-unit-detail", args=[run.pk, "-"])[:-2],
        "outputs": live.live_outputs(run, skeleton, FINAL_OUTPUTS_SHOWN),
        "run_duration": _duration(run.started_at or run.created_at, run.finished_at, now),
        # Retry restarts the failed units of a failed run only; a stopped run is resubmitted.
        "can_retry": run.status in (RunStatus.FAILED, RunStatus.ERROR),
    }


def run_page_context(request: HttpRequest, run: WorkflowRun) -> dict[str, Any]:
    """The whole run page: its live part (with the newest events) and the decision log."""
    context = _run_context(request, run, _live_state(request, run, None))
    context.update(_decisions_context(request, run))
    return context


@login_required
@require_GET
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = _get_run(request, pk)
    context = run_page_context(request, run)
    context.update(cost_context(run))
    return render(request, "portal/run_detail.html", context)


def cost_context(run: WorkflowRun) -> dict[str, Any]:
    """The run page's cost panel and its units queued for quota (issue 32)."""
    units = list(run.units.filter(phase=UnitPhase.PENDING, workflow_name=""))
    queue = quota_overview.queue_of(units)
    return {
        "cost": quota_usage.run_cost(run),
        "unit_costs": quota_usage.run_unit_costs(run),
        "priority_class": quota_priorities.run_priority(run)[0],
        "queued_units": sorted(
            ({"name": u.name, "site": u.site, **vars(queue[u.pk])} for u in units if u.pk in queue),
            key=lambda q: (q["site"], q["position"]),
        ),
    }


@login_required
@require_GET
def run_live(request: HttpRequest, pk: int) -> HttpResponse:
    """The polled part of the run page. It answers 304 to a poll that holds the current
    version (``If-None-Match``), and otherwise carries only the events newer than ``since``
    (added to the page's list out of band). A finished run's partial carries no polling
    trigger, so the browser stops asking."""
    run = _get_run(request, pk)
    try:
        since = _since(request)
    except BadParameter as exc:
        return HttpResponseBadRequest(str(exc))
    state = _live_state(request, run, since)
    if state["version"] in _etags(request.headers.get("If-None-Match", "")):
        response: HttpResponse = HttpResponseNotModified()
    else:
        context = _run_context(request, run, state)
        context["events_oob"] = since is not None
        response = render(request, "portal/htmx/run_live.html", context)
        known = request.GET.get("decisions")
        if known is not None and known != str(state["decisions_version"]):
            response["HX-Trigger"] = "decisions-changed"
    response["ETag"] = state["version"]
    # Kept by the browser but asked again every time: its next poll is a conditional GET.
    response["Cache-Control"] = "private, no-cache"
    return response


def _etags(header: str) -> set[str]:
    return {t.strip().removeprefix("W/") for t in header.split(",") if t.strip()}


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
