"""The run pages: the list, one run (DAG, timeline, units, decisions), and its actions."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Page, Paginator
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseBase,
    HttpResponseNotModified,
    QueryDict,
)
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from placement.parser import WorkflowInvalid
from portal import live, services
from portal.choices import RunStatus, UnitPhase
from portal.drawing import PHASES as PHASE_ORDER
from portal.filtersets import WorkflowRunFilterSet
from portal.models import UnitRun, WorkflowRun
from portal.quotas import overview as quota_overview
from portal.selectors import ended_attempts_of_run, failovers_blocked
from portal.selectors.runs import (
    DONE_PHASES,
    FAILED_PHASES,
    decision_candidates,
    run_cost,
    run_decision_log,
    run_queue,
    run_quota_queue,
    run_unit_slug,
    run_unit_table,
    run_units_suspended,
    runs_listed,
    runs_with_progress,
)
from portal.selectors.transfers import run_transfers_moved
from portal.views.common import (
    UNITS_PER_PAGE,
    fleet_colours,
    get_run,
    get_run_light,
    is_htmx,
    legend,
    page_of,
)

RUNS_PER_PAGE = 25
DECISIONS_PER_PAGE = 25
# Polling intervals: the run page every 2 s while the run is not finished; a very large run
# re-renders less often, so that a few open tabs do not keep the web server busy.
RUN_POLL = "2s"
RUN_POLL_LARGE = "6s"
LARGE_RUN_UNITS = 300
EVENTS_SHOWN = 30
FINAL_OUTPUTS_SHOWN = 20


@login_required
@require_GET
def run_list(request: HttpRequest) -> HttpResponse:
    filterset = WorkflowRunFilterSet(
        request.GET or None, queryset=runs_listed(request.user), request=request
    )
    runs = runs_with_progress(filterset.qs.order_by("-created_at", "-id"))
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


def _duration(start: datetime | None, end: datetime | None, now: datetime) -> timedelta | None:
    if start is None:
        return None
    return (end or now) - start


@dataclass
class UnitRow:
    unit: UnitRun
    duration: timedelta | None
    # Waiting for its project's quota: its position and why; None otherwise.
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


def _unit_page(
    request: HttpRequest, run: WorkflowRun, counts: live.Counts, phase: str, site: str
) -> Page[UnitRun]:
    paginator = Paginator(run_unit_table(run, phase, site), UNITS_PER_PAGE)
    # The count is known from the counts: no COUNT(*) over the run's units.
    paginator.__dict__["count"] = counts.filtered(phase, site)
    return paginator.get_page(request.GET.get("page"))


def _live_state(request: HttpRequest, run: WorkflowRun, since: int | None) -> dict[str, Any]:
    """What the live part of the run page shows that can change, read at a cost independent
    of the run's size (``portal.live``), and its version."""
    counts = live.unit_counts(run.pk)
    phase_filter = request.GET.get("phase") or ""
    site_filter = request.GET.get("site") or ""
    page = _unit_page(request, run, counts, phase_filter, site_filter)
    rows = list(page.object_list)
    queue, queued = run_quota_queue(run, rows)
    events = live.events_since(run, since or 0, EVENTS_SHOWN)
    last_event = events[0].pk if events else (since or live.latest_event_id(run))
    blocked, blocked_total = failovers_blocked(run)
    suspended = run_units_suspended(run, counts.by_phase.get(UnitPhase.RUNNING, 0))
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


def _links(request: HttpRequest, run: WorkflowRun, state: dict[str, Any]) -> dict[str, Any]:
    """The live part's own URLs: its poll (with the filters, the page and the groups shown),
    the filters' query, and the prefix a group node's link completes with the group's name."""
    expand = [t for t in request.GET.getlist("expand") if t]
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
    return {
        "expand": expand,
        "live_url": f"{live_url}?{poll.urlencode()}",
        "filter_query": filter_query,
        "group_link": group_link,
    }


def _progress(counts: live.Counts) -> dict[str, Any]:
    """The run's progress bar and phase counts, from the counts."""
    total = counts.total
    done = sum(counts.by_phase.get(p, 0) for p in DONE_PHASES)
    return {
        "total": total,
        "done": done,
        "failed": sum(counts.by_phase.get(p, 0) for p in FAILED_PHASES),
        "running": counts.by_phase.get(UnitPhase.RUNNING, 0),
        "percent": round(100 * done / total) if total else 0,
        "phase_counts": sorted(counts.by_phase.items()),
        "poll": RUN_POLL_LARGE if total > LARGE_RUN_UNITS else RUN_POLL,
        "unit_sites": counts.sites(),
        "phases_drawn": [p for p in PHASE_ORDER if counts.by_phase.get(p)],
        "all_phases": PHASE_ORDER,
    }


def _run_context(request: HttpRequest, run: WorkflowRun, state: dict[str, Any]) -> dict[str, Any]:
    """Everything the live part of the run page draws (DAG, timeline, units table), from
    ``state``: the graph's nodes and groups from the counts, not from every unit."""
    counts: live.Counts = state["counts"]
    links = _links(request, run, state)
    skeleton = live.graph_skeleton(run, counts, links["expand"])
    units = live.drawn_units(run, counts, skeleton)
    colours = fleet_colours(counts.where())
    has_transfer = any(u.get("kind") == "transfer" for u in units)
    return {
        **state,
        **_progress(counts),
        **links,
        "run": run,
        "units": units,
        "timeline_units": live.timeline_rows(
            counts, units, skeleton, run_transfers_moved(run) if has_transfer else None
        ),
        "colours": colours,
        "legend": legend(colours, counts.where()),
        "finished": run.is_finished,
        "groups": {str(u["name"]): u["group"] for u in units if u.get("group") is not None},
        "ended_attempts": ended_attempts_of_run(run),
        "unit_link": reverse("ui-unit-detail", args=[run.pk, "-"])[:-2],
        "outputs": live.live_outputs(run, skeleton, FINAL_OUTPUTS_SHOWN),
        "run_duration": _duration(run.started_at or run.created_at, run.finished_at, state["now"]),
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
    run = get_run_light(request, pk)
    context = run_page_context(request, run)
    if context["total"] > LARGE_RUN_UNITS:
        # Pricing every unit is the one part of the page that grows with the run: for a big
        # run the panel is asked for when it scrolls into view (``run_cost_panel``), so the
        # page of a 10,000-unit run does not wait for ten thousand units' costs.
        context["cost_deferred"] = True
        context.update(run_queue(run))
    else:
        context.update(run_cost(run))
    return render(request, "portal/run_detail.html", context)


@login_required
@require_GET
def run_cost_panel(request: HttpRequest, pk: int) -> HttpResponse:
    """The run page's cost panel alone (a big run's page loads it when it is shown)."""
    run = get_run(request, pk)
    return render(request, "portal/run_cost.html", {"run": run, **run_cost(run)})


@login_required
@require_GET
def run_live(request: HttpRequest, pk: int) -> HttpResponse:
    """The polled part of the run page. It answers 304 to a poll that holds the current
    version (``If-None-Match``), and otherwise carries only the events newer than ``since``
    (added to the page's list out of band). A finished run's partial carries no polling
    trigger, so the browser stops asking."""
    run = get_run_light(request, pk)
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
    page = page_of(request, run_decision_log(run), DECISIONS_PER_PAGE, param="dpage")
    rows = [{"decision": d, "candidates": decision_candidates(d)} for d in page]
    return {
        "decision_page": page,
        "decision_rows": rows,
        "decision_count": page.paginator.count,
        "colours": fleet_colours(),
    }


@login_required
@require_GET
def run_decisions(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_run(request, pk)
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
    run = get_run(request, pk)
    try:
        services.run_stop(run=run, user=request.user)
    except ACTION_REFUSALS as exc:
        return _refused(request, run, "stop", exc)
    messages.success(request, "Stop requested.")
    return redirect("ui-run-detail", pk=run.pk)


@login_required
@require_POST
def run_retry(request: HttpRequest, pk: int) -> HttpResponseBase:
    run = get_run(request, pk)
    try:
        services.run_retry(run=run, user=request.user)
    except ACTION_REFUSALS as exc:
        return _refused(request, run, "retry", exc)
    messages.success(request, "Failed units retried.")
    return redirect("ui-run-detail", pk=run.pk)


@login_required
@require_POST
def run_resubmit(request: HttpRequest, pk: int) -> HttpResponseBase:
    run = get_run(request, pk)
    try:
        new = services.run_resubmit(run=run, user=request.user)
    except ACTION_REFUSALS as exc:
        return _refused(request, run, "resubmit", exc)
    messages.success(request, f"Resubmitted as {new.name}.")
    return redirect("ui-run-detail", pk=new.pk)


@login_required
@require_POST
def run_resume(request: HttpRequest, pk: int) -> HttpResponseBase:
    run = get_run(request, pk)
    node = request.POST.get("node") or None
    try:
        services.run_resume(run=run, user=request.user, node=node)
    except (*ACTION_REFUSALS, WorkflowInvalid) as exc:
        return _refused(request, run, "resume", exc)
    messages.success(request, f"Resume of {node or 'the run'} requested.")
    if node:
        unit = run_unit_slug(run, node)
        if unit:
            return redirect("ui-unit-detail", pk=run.pk, key=unit)
    return redirect("ui-run-detail", pk=run.pk)
