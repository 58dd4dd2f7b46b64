"""Browser pages of the scientist's dashboard (issue 7), server-rendered with HTMX partials.

Every page is ``login_required``; runs are looked up through ``runs_visible_to`` so a run the
user may not see is a 404, never a 403 that would confirm it exists. Writes go through the
service functions (``portal.services``, ``sites.services``); views only translate.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Page, Paginator
from django.db.models import Count, F, IntegerField, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from placement.parser import WorkflowInvalid
from portal import services
from portal.choices import RunStatus, UnitPhase
from portal.dag import site_colours
from portal.filtersets import WorkflowRunFilterSet
from portal.forms import ParametersForm, ShownError, SubmitForm, shown_errors, workflow_parameters
from portal.models import UnitRun, WorkflowRun
from portal.selectors import runs_visible_to
from sites.models import Dataset, Site, SiteLink
from sites.permissions import can_operate_site

GRAPH_FIELDS = (
    "name",
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
UNITS_PER_PAGE = 50
DECISIONS_PER_PAGE = 25
# Polling intervals: the run page every 2 s while the run is not finished; a very large run
# re-renders less often, so that a few open tabs do not keep the web server busy.
RUN_POLL = "2s"
RUN_POLL_LARGE = "6s"
LARGE_RUN_UNITS = 300


def _is_htmx(request: HttpRequest) -> bool:
    return request.headers.get("HX-Request") == "true"


def _page(request: HttpRequest, items: Any, per_page: int, param: str = "page") -> Page[Any]:
    return Paginator(items, per_page).get_page(request.GET.get(param))


def _fleet_colours(extra: Iterable[str] = ()) -> dict[str, str]:
    """Colours for every site of the fleet (so a site keeps its colour on every page) and for
    any other name a run mentions."""
    return site_colours([*Site.objects.values_list("name", flat=True), *extra])


def _legend(colours: dict[str, str], names: Iterable[str]) -> list[tuple[str, str]]:
    return [(n, colours[n]) for n in sorted(set(names)) if n in colours]


# --------------------------------------------------------------------------------------------
# Runs


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
    page = _page(request, runs, RUNS_PER_PAGE)
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "filterset": filterset,
        "page": page,
        "runs": list(page.object_list),
        "query": query.urlencode(),
        "live": any(r.finished_at is None and not r.is_finished for r in page.object_list),
    }
    template = "portal/htmx/run_table.html" if _is_htmx(request) else "portal/run_list.html"
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
    units = list(run.units.order_by("position", "id").values(*GRAPH_FIELDS))
    colours = _fleet_colours(u["site"] or u["planned_site"] for u in units)
    counts: dict[str, int] = defaultdict(int)
    for u in units:
        counts[u["phase"]] += 1
    total = len(units)
    done = sum(counts[p] for p in DONE_PHASES)
    failed = sum(counts[p] for p in FAILED_PHASES)
    finished = run.is_finished
    page = _page(request, run.units.order_by("position", "id"), UNITS_PER_PAGE)
    live_query = {"page": page.number} if page.number > 1 else {}
    live_url = reverse("ui-run-live", args=[run.pk])
    if live_query:
        live_url += f"?page={page.number}"
    return {
        "run": run,
        "units": units,
        "colours": colours,
        "legend": _legend(colours, (u["site"] or u["planned_site"] for u in units)),
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
        "run_duration": _duration(run.started_at or run.created_at, run.finished_at, now),
        "can_retry": failed > 0 or run.status in (RunStatus.FAILED, RunStatus.ERROR),
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
    decisions = run.decisions.annotate(unit_name=F("unit__name")).order_by("created_at", "id")
    page = _page(request, decisions, DECISIONS_PER_PAGE, param="dpage")
    rows = []
    for d in page:
        candidates = sorted(
            (c for c in d.candidates or [] if isinstance(c, dict)),
            key=lambda c: (not c.get("eligible"), -(c.get("score") or 0), str(c.get("site"))),
        )
        rows.append({"decision": d, "candidates": candidates})
    return {
        "decision_page": page,
        "decision_rows": rows,
        "decision_count": page.paginator.count,
        "colours": _fleet_colours(),
    }


@login_required
@require_GET
def run_decisions(request: HttpRequest, pk: int) -> HttpResponse:
    run = _get_run(request, pk)
    context = {"run": run, **_decisions_context(request, run)}
    return render(request, "portal/htmx/decisions.html", context)


def _run_action(request: HttpRequest, pk: int, action: str) -> HttpResponseBase:
    run = _get_run(request, pk)
    target = run
    try:
        result = getattr(services, f"run_{action}")(run=run, user=request.user)
    except PermissionDenied as exc:
        messages.error(request, str(exc) or f"You may not {action} this run.")
        return redirect("ui-run-detail", pk=run.pk)
    except (services.ActionRefused, ValidationError, ValueError) as exc:
        text = "; ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)
        messages.error(request, f"Could not {action} the run: {text}")
        return redirect("ui-run-detail", pk=run.pk)
    if isinstance(result, WorkflowRun):
        target = result
    done = {"stop": "Stop requested.", "retry": "Failed units retried.", "resubmit": ""}[action]
    messages.success(request, done or f"Resubmitted as {target.name}.")
    return redirect("ui-run-detail", pk=target.pk)


@login_required
@require_POST
def run_stop(request: HttpRequest, pk: int) -> HttpResponseBase:
    return _run_action(request, pk, "stop")


@login_required
@require_POST
def run_retry(request: HttpRequest, pk: int) -> HttpResponseBase:
    return _run_action(request, pk, "retry")


@login_required
@require_POST
def run_resubmit(request: HttpRequest, pk: int) -> HttpResponseBase:
    return _run_action(request, pk, "resubmit")


# --------------------------------------------------------------------------------------------
# Submit


def _workflow_errors(exc: Exception) -> list[Any]:
    errors = getattr(exc, "errors", None)
    if isinstance(errors, list) and errors:
        return errors
    return [{"path": "", "message": str(exc) or "The workflow was refused."}]


def _content_type(text: str) -> str:
    return "application/json" if text.lstrip().startswith("{") else "application/yaml"


@dataclass
class PreviewRow:
    unit: dict[str, Any]
    site: str | None
    likely: bool
    moves: int | None
    transfer_s: float | None
    candidates: list[dict[str, Any]]


def _preview_rows(units: list[dict[str, Any]]) -> list[PreviewRow]:
    rows = []
    for u in units:
        candidates = [c for c in u.get("candidates") or [] if isinstance(c, dict)]
        site = u.get("site")
        likely = False
        if not site:
            # A runtime unit is placed when it starts; show where the planner would put it now.
            eligible = [c for c in candidates if c.get("eligible")]
            if eligible:
                best = max(eligible, key=lambda c: (c.get("score") or 0, str(c.get("site"))))
                site, likely = best.get("site"), True
        chosen = next((c for c in candidates if c.get("site") == site), None)
        rows.append(
            PreviewRow(
                unit=u,
                site=site,
                likely=likely,
                moves=chosen.get("bytes_to_move") if chosen else None,
                transfer_s=chosen.get("est_transfer_s") if chosen else None,
                candidates=candidates,
            )
        )
    return rows


def _submit_context(
    request: HttpRequest, form: SubmitForm, params_form: ParametersForm | None = None
) -> dict[str, Any]:
    text = form.cleaned_data.get("manifest", "") if form.is_bound and form.is_valid() else ""
    if not text and form.is_bound:
        text = form.data.get("manifest", "")
    if params_form is None:
        params_form = ParametersForm(workflow_parameters(text))
    return {"form": form, "params_form": params_form}


def _read_submission(
    request: HttpRequest,
) -> tuple[SubmitForm, ParametersForm, str, list[ShownError]]:
    form = SubmitForm(request.POST, request.FILES, user=request.user)
    valid = form.is_valid()
    text: str = form.cleaned_data.get("manifest", "") if valid else ""
    params_form = ParametersForm(workflow_parameters(text), request.POST)
    errors: list[ShownError] = []
    if not valid:
        errors = [
            ShownError(path=field, message=str(msg), line=None, source="")
            for field, msgs in form.errors.items()
            for msg in msgs
        ]
    elif not params_form.is_valid():
        errors = [
            ShownError(
                path=f"spec.arguments.parameters.{field.removeprefix('param-')}",
                message=str(msg),
                line=None,
                source="",
            )
            for field, msgs in params_form.errors.items()
            for msg in msgs
        ]
    return form, params_form, text, errors


def _preview(request: HttpRequest) -> dict[str, Any]:
    """Run the preview for the posted form; the context of the preview partial."""
    form, params_form, text, errors = _read_submission(request)
    context: dict[str, Any] = {"form": form, "params_form": params_form, "errors": errors}
    if errors:
        return context
    try:
        plan = services.workflow_preview(
            user=request.user,
            body=text,
            content_type=_content_type(text),
            project=form.cleaned_data.get("project"),
            arguments=params_form.arguments() or None,
        )
    except WorkflowInvalid as exc:
        context["errors"] = shown_errors(text, _workflow_errors(exc))
        return context
    units = [u for u in plan.get("units") or [] if isinstance(u, dict)]
    rows = _preview_rows(units)
    sites = {r.site for r in rows if r.site}
    colours = _fleet_colours(sites)
    context.update(
        {
            "plan": plan,
            "rows": rows,
            "colours": colours,
            "legend": _legend(colours, sites),
            "any_likely": any(r.likely for r in rows),
            "preview_units": [
                {
                    "name": r.unit.get("name", ""),
                    "site": r.site or "",
                    "likely": r.likely,
                    "phase": "",
                    "depends": r.unit.get("depends") or "",
                    "timing": r.unit.get("timing", ""),
                }
                for r in rows
            ],
        }
    )
    return context


@login_required
@require_http_methods(["GET", "POST"])
def submit(request: HttpRequest) -> HttpResponseBase:
    """The submit page. POST with ``action=preview`` (the no-JS path of "Preview placement")
    renders the page with the preview; any other POST submits."""
    if request.method == "GET":
        form = SubmitForm(user=request.user)
        example = request.GET.get("example")
        if example:
            form = SubmitForm(initial={"manifest": example}, user=request.user)
        return render(request, "portal/submit.html", _submit_context(request, form))
    if request.POST.get("action") == "preview":
        context = _preview(request)
        status = 400 if context.get("errors") else 200
        return render(request, "portal/submit.html", context, status=status)

    form, params_form, text, errors = _read_submission(request)
    if not errors:
        try:
            run = services.run_submit(
                user=request.user,
                body=text,
                content_type=_content_type(text),
                project=form.cleaned_data.get("project"),
                arguments=params_form.arguments() or None,
            )
        except WorkflowInvalid as exc:
            errors = shown_errors(text, _workflow_errors(exc))
        except PermissionDenied as exc:
            errors = [ShownError("project", str(exc) or "Not allowed.", None, "")]
        else:
            messages.success(request, f"Submitted {run.name}.")
            url = reverse("ui-run-detail", args=[run.pk])
            if _is_htmx(request):
                response = HttpResponse(status=204)
                response["HX-Redirect"] = url
                return response
            return redirect(url)
    context = {"form": form, "params_form": params_form, "errors": errors}
    return render(request, "portal/submit.html", context, status=400)


@login_required
@require_POST
def submit_preview(request: HttpRequest) -> HttpResponse:
    """HTMX: the plan (table and DAG) or the errors, shown under the form."""
    context = _preview(request)
    return render(request, "portal/htmx/preview.html", context)


@login_required
@require_POST
def submit_parameters(request: HttpRequest) -> HttpResponse:
    """HTMX: the parameter form rebuilt from the YAML being edited (values typed so far are
    kept for parameters that still exist). An uploaded file also replaces the text area."""
    form = SubmitForm(request.POST, request.FILES, user=request.user)
    form.is_valid()
    text = form.cleaned_data.get("manifest") or request.POST.get("manifest", "")
    params = workflow_parameters(text)
    previous = {k: v for k, v in request.POST.items() if k.startswith("param-")}
    params_form = ParametersForm(params, initial=previous)
    context: dict[str, Any] = {"params_form": params_form, "uploaded_text": None}
    if request.FILES.get("upload"):
        # Show the uploaded file in the text area (swapped out of band), so what is previewed
        # and submitted is visible and editable.
        field = form.fields["manifest"]
        attrs = {**field.widget.attrs, "hx-swap-oob": "true", "id": "id_manifest"}
        context["uploaded_text"] = text
        context["manifest_oob"] = field.widget.render("manifest", text, attrs=attrs)
        # ...and clear the file input, so later edits of the text are what gets submitted.
        upload = form.fields["upload"]
        context["upload_oob"] = upload.widget.render(
            "upload", None, attrs={**upload.widget.attrs, "hx-swap-oob": "true", "id": "id_upload"}
        )
    return render(request, "portal/htmx/parameters.html", context)


# --------------------------------------------------------------------------------------------
# Fleet and sites


def _running_by_site(request: HttpRequest) -> dict[str, list[UnitRun]]:
    """The running units the user may see, by site (at most a few per site)."""
    visible = runs_visible_to(request.user).values("pk")
    units = (
        UnitRun.objects.filter(phase=UnitPhase.RUNNING, run__in=visible)
        .exclude(site="")
        .select_related("run")
        .order_by("site", "started_at", "id")
    )
    by_site: dict[str, list[UnitRun]] = defaultdict(list)
    for u in units[:500]:
        by_site[u.site].append(u)
    return by_site


def _running_counts() -> dict[str, int]:
    rows = (
        UnitRun.objects.filter(phase=UnitPhase.RUNNING)
        .exclude(site="")
        .values("site")
        .annotate(n=Count("pk"))
    )
    return {r["site"]: r["n"] for r in rows}


def _pct(used: int, total: int) -> int:
    return min(100, round(100 * used / total)) if total > 0 else 0


@dataclass
class SiteRow:
    site: Site
    colour: str
    cpu_pct: int
    memory_pct: int
    gpu_pct: int
    running: int
    my_units: list[UnitRun]


def _site_rows(request: HttpRequest, sites: Iterable[Site]) -> list[SiteRow]:
    colours = _fleet_colours()
    counts = _running_counts()
    mine = _running_by_site(request)
    return [
        SiteRow(
            site=s,
            colour=colours.get(s.name, "#fff"),
            cpu_pct=_pct(s.cpu_allocated, s.cpu_allocatable),
            memory_pct=_pct(s.memory_allocated, s.memory_allocatable),
            gpu_pct=_pct(s.gpu_allocated, s.gpu_allocatable),
            running=counts.get(s.name, 0),
            my_units=mine.get(s.name, [])[:5],
        )
        for s in sites
    ]


@login_required
@require_GET
def fleet(request: HttpRequest) -> HttpResponse:
    sites = list(Site.objects.all())
    rows = _site_rows(request, sites)
    if _is_htmx(request):
        return render(request, "portal/htmx/fleet_sites.html", {"rows": rows})
    datasets = list(Dataset.objects.select_related("project").prefetch_related("replicas__site"))
    replicas = [
        {
            "dataset": d,
            "by_site": [
                next((r for r in d.replicas.all() if r.site_id == s.pk), None) for s in sites
            ],
        }
        for d in datasets
    ]
    context = {
        "rows": rows,
        "sites": sites,
        "colours": _fleet_colours(),
        "replicas": replicas,
    }
    return render(request, "portal/fleet.html", context)


def _get_site(name: str) -> Site:
    try:
        return Site.objects.get(name=name)
    except Site.DoesNotExist:
        raise Http404("No such site.") from None


@login_required
@require_GET
def site_detail(request: HttpRequest, name: str) -> HttpResponse:
    site = _get_site(name)
    row = _site_rows(request, [site])[0]
    visible = runs_visible_to(request.user).values("pk")
    running = (
        UnitRun.objects.filter(site=site.name, phase=UnitPhase.RUNNING, run__in=visible)
        .select_related("run")
        .order_by("started_at", "id")
    )
    links = SiteLink.objects.filter(Q(source=site) | Q(target=site)).select_related(
        "source", "target"
    )
    context = {
        "site": site,
        "row": row,
        "running_page": _page(request, running, UNITS_PER_PAGE),
        "links_out": [lk for lk in links if lk.source_id == site.pk],
        "links_in": [lk for lk in links if lk.target_id == site.pk],
        "replicas": site.replicas.select_related("dataset").order_by("dataset__name"),
        "can_cordon": can_operate_site(request.user, site),
        "colours": _fleet_colours(),
    }
    return render(request, "portal/site_detail.html", context)


@login_required
@require_POST
def site_cordon(request: HttpRequest, name: str) -> HttpResponseBase:
    """Cordon (``cordoned=1``) or uncordon (``cordoned=0``): the site's operators and staff."""
    site = _get_site(name)
    if not can_operate_site(request.user, site):
        raise PermissionDenied("Only the site's operators and fleet staff may cordon it.")
    value = request.POST.get("cordoned")
    if value not in ("0", "1"):
        messages.error(request, "Say cordoned=1 or cordoned=0.")
        return redirect("ui-site-detail", name=site.name)
    from sites.services import site_set_cordoned

    cordoned = value == "1"
    changed = site_set_cordoned(site=site, cordoned=cordoned, user=request.user)
    word = "cordoned" if cordoned else "uncordoned"
    messages.success(
        request, f"{site.name} {word}." if changed else f"{site.name} was already {word}."
    )
    return redirect("ui-site-detail", name=site.name)


# Kept for the URL name "home" that the foundation uses.
home = run_list
