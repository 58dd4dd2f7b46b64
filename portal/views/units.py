"""The step panel: one unit of a run (attempts, inputs, outputs, decision, events) and its
logs, read from the site through Karmada's cluster proxy (or, once the step workflow is
deleted, from the copy the portal kept)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_GET

from portal import outputs
from portal.choices import UnitPhase
from portal.karmada import logs
from portal.models import UnitRun, WorkflowRun
from portal.selectors import unit_by_key, unit_detail
from portal.views.common import fleet_colours, get_run, is_htmx
from portal.views.runs import run_page_context

# The panel shows the end of a log; the REST endpoint gives the whole (bounded) log.
PANEL_TAIL_LINES = 500
LOG_POLL = "3s"


def _unit(run: WorkflowRun, key: str) -> UnitRun:
    try:
        return unit_by_key(run, key)
    except UnitRun.DoesNotExist:
        raise Http404(f"no unit {key!r} in run {run.name}") from None


def _int(value: str | None, default: int | None = None) -> int | None:
    try:
        return int(value) if value else default
    except ValueError:
        return default


def panel_context(request: HttpRequest, run: WorkflowRun, unit: UnitRun) -> dict[str, Any]:
    detail = unit_detail(unit)
    attempt = _int(request.GET.get("attempt"), unit.attempt) or unit.attempt
    return {
        **detail,
        "run": run,
        "colours": fleet_colours(a.site for a in detail["attempts"]),
        "log_attempt": attempt,
        "logs_url": reverse("ui-unit-logs", args=[run.pk, unit.slug]) + f"?attempt={attempt}",
        "panel_url": reverse("ui-unit-detail", args=[run.pk, unit.slug]),
        "api_logs_url": reverse("run-unit-logs", args=[run.pk, unit.slug]),
        "output_url": reverse("ui-unit-output", args=[run.pk, unit.slug]),
    }


@login_required
@require_GET
def unit_panel(request: HttpRequest, pk: int, key: str) -> HttpResponse:
    """The panel alone for HTMX; the run page with the panel open for a deep link."""
    run = get_run(request, pk)
    unit = _unit(run, key)
    panel = panel_context(request, run, unit)
    if is_htmx(request):
        return render(request, "portal/htmx/unit_panel.html", panel)
    context = run_page_context(request, run)
    context["panel_html"] = render_to_string("portal/htmx/unit_panel.html", panel, request)
    return render(request, "portal/run_detail.html", context)


@login_required
@require_GET
def unit_logs(request: HttpRequest, pk: int, key: str) -> HttpResponse:
    """The end of an attempt's log, per pod and container; polled while the unit runs."""
    run = get_run(request, pk)
    unit = _unit(run, key)
    attempts = {a.number: a for a in unit_detail(unit)["attempts"]}
    number = _int(request.GET.get("attempt"), unit.attempt) or unit.attempt
    attempt = attempts.get(number) or attempts[unit.attempt]
    container = request.GET.get("container") or "main"
    live = attempt.current and unit.phase in (UnitPhase.PENDING, UnitPhase.RUNNING)
    context: dict[str, Any] = {
        "run": run,
        "unit": unit,
        "attempt": attempt,
        "container": container,
        "live": live,
        "poll": LOG_POLL,
        "logs": [],
        "unavailable": "",
        "kept": False,
        "self_url": request.get_full_path(),
    }
    try:
        pods = logs.attempt_pods(unit, attempt.number, attempt.site)
        context["kept"] = pods.kept is not None
        wanted = request.GET.get("pod")
        shown = [p for p in pods.pods if not wanted or p.pod == wanted]
        if not shown:
            context["unavailable"] = "No pod has run for this attempt yet."
        for pod in shown[:10]:
            try:
                text = logs.log_text(
                    attempt.site,
                    pod.pod,
                    container=container,
                    tail=PANEL_TAIL_LINES,
                    kept=pods.kept,
                )
                context["logs"].append({"pod": pod, "text": text, "error": ""})
            except logs.NoProxyPath:
                raise  # the same for every pod of the site: said once, below
            except logs.LogsNotAvailable as exc:
                context["logs"].append({"pod": pod, "text": "", "error": str(exc)})
        context["more_pods"] = max(len(shown) - 10, 0)
    except logs.LogsNotAvailable as exc:
        context["logs"] = []
        context["unavailable"] = str(exc)
    response = render(request, "portal/htmx/unit_logs.html", context)
    response["Cache-Control"] = "no-store"  # a log is read fresh from the site every time
    return response


# Characters of an output value one "Show more" adds to the step panel.
PANEL_OUTPUT_PAGE = 16384


@login_required
@require_GET
def unit_output(request: HttpRequest, pk: int, key: str) -> HttpResponse:
    """The next page of a long output value in the step panel (``parameter`` or ``result``,
    from ``offset``), with its own "Show more"."""
    run = get_run(request, pk)
    unit = _unit(run, key)
    wanted, errors = outputs.page_request(request.GET, PANEL_OUTPUT_PAGE)
    if errors:
        return HttpResponse("; ".join(f"{f}: {m}" for f, m in errors), status=400)
    try:
        value = outputs.output_value(unit.outputs, parameter=wanted.parameter)
    except outputs.NoSuchOutput as exc:
        raise Http404(str(exc)) from None
    page = outputs.page(value, wanted.offset, PANEL_OUTPUT_PAGE)
    more = f"parameter={quote(wanted.parameter)}" if wanted.parameter else "result=1"
    return render(
        request,
        "portal/htmx/unit_output_page.html",
        {
            "page": page,
            "next_offset": page["next_offset"],
            "shown": page["next_offset"] or page["size"],
            "size": page["size"],
            "more_query": more,
            "output_url": reverse("ui-unit-output", args=[run.pk, unit.slug]),
        },
    )
