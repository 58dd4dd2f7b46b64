"""The submit page: paste or upload a workflow, set its parameters, preview where every unit
would run, submit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from placement.parser import WorkflowInvalid
from portal import services
from portal.forms import ParametersForm, ShownError, SubmitForm, shown_errors, workflow_parameters
from portal.views.common import fleet_colours, is_htmx, legend


def _workflow_errors(exc: Exception) -> list[Any]:
    errors = getattr(exc, "errors", None)
    if isinstance(errors, list) and errors:
        return errors
    return [{"path": "", "message": str(exc) or "The workflow was refused."}]


@dataclass
class PreviewRow:
    unit: dict[str, Any]
    site: str | None
    likely: bool
    moves: int | None
    transfer_s: float | None
    candidates: list[dict[str, Any]]

    @property
    def losing(self) -> list[dict[str, Any]]:
        return [c for c in self.candidates if c.get("site") != self.site]

    @property
    def ineligible(self) -> int:
        return sum(1 for c in self.candidates if not c.get("eligible"))


def _preview_rows(units: list[dict[str, Any]]) -> list[PreviewRow]:
    rows = []
    for u in units:
        candidates = sorted(
            (c for c in u.get("candidates") or [] if isinstance(c, dict)),
            key=lambda c: (not c.get("eligible"), -(c.get("score") or 0), str(c.get("site"))),
        )
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
            project=form.cleaned_data.get("project"),
            arguments=params_form.arguments() or None,
            loops=True,
        )
    except WorkflowInvalid as exc:
        context["errors"] = shown_errors(text, _workflow_errors(exc))
        return context
    units = [u for u in plan.get("units") or [] if isinstance(u, dict)]
    rows = _preview_rows(units)
    sites = {r.site for r in rows if r.site}
    # A planned copy's relay is coloured in the transfers table: the legend names it too.
    sites |= {str(t["via"]) for t in plan.get("transfers") or [] if t.get("via")}
    colours = fleet_colours(sites)
    context.update(
        {
            "plan": plan,
            "rows": rows,
            "colours": colours,
            "legend": legend(colours, sites),
            "any_likely": any(r.likely for r in rows),
            "preview_units": [
                {
                    "name": r.unit.get("name", ""),
                    "site": r.site or "",
                    "likely": r.likely,
                    "phase": "",
                    "depends": r.unit.get("depends") or "",
                    "timing": r.unit.get("timing", ""),
                    # A fan-out's items are drawn as one node, as on the run page.
                    "task": r.unit.get("task") or r.unit.get("name", ""),
                    "item_index": r.unit.get("item_index"),
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
                project=form.cleaned_data.get("project"),
                arguments=params_form.arguments() or None,
                priority_class=getattr(form.cleaned_data.get("priority_class"), "name", None),
            )
        except WorkflowInvalid as exc:
            errors = shown_errors(text, _workflow_errors(exc))
        except PermissionDenied as exc:
            errors = [ShownError("project", str(exc) or "Not allowed.", None, "")]
        else:
            messages.success(request, f"Submitted {run.name}.")
            url = reverse("ui-run-detail", args=[run.pk])
            if is_htmx(request):
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
