"""Argo Server's WorkflowService, WorkflowTemplateService and InfoService over HTTP, as
grpc-gateway serves them (server/workflow/workflow_server.go, server/workflowtemplate/,
server/info/). Thin: each endpoint reads its request, calls one service or selector and shapes
the answer (``portal.argoserver.workflows``)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import F, Max, QuerySet
from django.db.models.functions import Greatest
from django.http import HttpResponseBase, JsonResponse
from django.utils import timezone
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from placement.parser import WorkflowInvalid
from portal import services
from portal.api.authentication import CachedTokenAuthentication
from portal.argoserver import listing, streams
from portal.argoserver.errors import (
    ALREADY_EXISTS,
    FAILED_PRECONDITION,
    INVALID_ARGUMENT,
    NOT_FOUND,
    PERMISSION_DENIED,
    ArgoError,
    exception_handler,
    invalid,
)
from portal.argoserver.workflows import (
    labels_of,
    phase_of,
    quantities_as_strings,
    runs_waiting_on_locks,
    version_of,
    workflow_of,
)
from portal.models import UnitRun, WorkflowRun
from portal.selectors import projects_of
from portal.services import runs as run_services
from sites.models import Project

RUNS = WorkflowRun.objects.select_related("project", "owner", "resubmitted_from")


class ArgoView(APIView):
    """Token (``Bearer`` or ``Token``) authentication, JSON answers whatever the client
    accepts (the argo CLI asks for ``text/event-stream`` on streams), and every refusal as a
    gRPC status."""

    authentication_classes = [CachedTokenAuthentication]
    permission_classes = [IsAuthenticated]
    parser_classes: list[Any] = []
    renderer_classes = [JSONRenderer]
    schema = None  # not part of the portal's own OpenAPI schema: Argo's swagger describes it

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        return super().perform_content_negotiation(request, force=True)

    def get_exception_handler(self) -> Any:
        return exception_handler

    def project(self, namespace: str, verb: str, resource: str = "workflows") -> Project:
        """The namespace's project, if the user is in it. Unknown and not-yours are the same
        403, in the words of Kubernetes' RBAC, which Argo Server passes on."""
        project = projects_of(self.request.user).filter(name=namespace).first()
        if project is None:
            raise ArgoError(
                PERMISSION_DENIED,
                f'{resource}.argoproj.io is forbidden: User "{self.request.user.get_username()}" '
                f'cannot {verb} resource "{resource}" in API group "argoproj.io" in the '
                f'namespace "{namespace}"',
            )
        return project

    def run(self, project: Project, name: str) -> WorkflowRun:
        runs = RUNS.filter(project=project)
        # Argo Server's alias for the namespace's newest workflow (``argo get @latest``).
        latest = name == "@latest"
        run = (
            runs.order_by("-created_at", "-id").first()
            if latest
            else runs.filter(name=name).first()
        )
        if run is None:
            raise ArgoError(NOT_FOUND, f'workflows.argoproj.io "{name}" not found')
        return run

    def body(self) -> dict[str, Any]:
        limit = int(settings.PORTAL_MAX_BODY_BYTES)
        raw = self.request.stream.read(limit + 1) if self.request.stream is not None else b""
        if len(raw) > limit:
            raise ArgoError(INVALID_ARGUMENT, f"request body exceeds the limit of {limit} bytes")
        if not raw.strip():
            return {}
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise ArgoError(INVALID_ARGUMENT, "the request body is not valid JSON") from None
        if not isinstance(data, dict):
            raise ArgoError(INVALID_ARGUMENT, "the request body must be a JSON object")
        return data


def answer(data: Any) -> JsonResponse:
    return JsonResponse(data, safe=False)


def units_of(run: WorkflowRun) -> list[UnitRun]:
    return list(UnitRun.objects.filter(run=run).order_by("position", "id"))


def shown(run: WorkflowRun) -> dict[str, Any]:
    """The run as Argo shows it, read fresh."""
    fresh = RUNS.get(pk=run.pk)
    return workflow_of(
        fresh, units_of(fresh), waiting_on_lock=bool(runs_waiting_on_locks([run.pk]))
    )


def submitted(body: dict[str, Any], namespace: str, key: str = "workflow") -> dict[str, Any]:
    """The object of a create or lint request, its namespace the URL's (Kubernetes refuses an
    object of another namespace)."""
    obj = body.get(key)
    if not isinstance(obj, dict):
        raise ArgoError(INVALID_ARGUMENT, f"{key} body not specified")
    meta = obj.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise ArgoError(INVALID_ARGUMENT, f"{key}.metadata must be an object")
    meta = dict(meta or {})
    if meta.get("namespace") not in (None, "", namespace):
        raise ArgoError(
            INVALID_ARGUMENT,
            "the namespace of the provided object does not match the namespace sent on the request",
        )
    meta["namespace"] = namespace
    document = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", **obj, "metadata": meta}
    return dict(quantities_as_strings(document))


class WorkflowsView(ArgoView):
    """``GET|POST /api/v1/workflows/{namespace}``."""

    def get(self, request: Request, namespace: str) -> HttpResponseBase:
        project = self.project(namespace, "list")
        params = request.query_params
        labels = listing.label_selector(params.get("listOptions.labelSelector", ""))
        fields = listing.field_selector(params.get("listOptions.fieldSelector", ""))
        runs = RUNS.filter(project=project).order_by(
            F("finished_at").desc(nulls_first=True), "-created_at", "-id"
        )
        in_namespace = {k: v for k, v in fields.items() if k == "metadata.namespace"}
        if not listing.field_matches(in_namespace, {"metadata.namespace": namespace}):
            runs = runs.none()
        name = fields.get("metadata.name")
        if name is not None:
            runs = runs.filter(name=name[1]) if name[0] == "=" else runs.exclude(name=name[1])
        candidates = list(runs)
        waiting = runs_waiting_on_locks(r.pk for r in candidates if r.status == "Pending")
        matched = [r for r in candidates if labels(labels_of(r, phase_of(r, r.pk in waiting)))]
        offset, limit = _page(params)
        page = matched[offset : offset + limit] if limit else matched[offset:]
        by_run: dict[int, list[UnitRun]] = {r.pk: [] for r in page}
        for unit in UnitRun.objects.filter(run__in=[r.pk for r in page]).order_by("position", "id"):
            by_run[unit.run_id].append(unit)
        meta: dict[str, Any] = {"resourceVersion": version_of(_latest(candidates))}
        if limit and offset + limit < len(matched):
            meta["continue"] = str(offset + limit)
        result = {
            "metadata": meta,
            "items": [workflow_of(r, by_run[r.pk], waiting_on_lock=r.pk in waiting) for r in page],
        }
        return answer(listing.Cleaner(params.get("fields", "")).clean(result))

    def post(self, request: Request, namespace: str) -> HttpResponseBase:
        project = self.project(namespace, "create")
        body = self.body()
        workflow = submitted(body, namespace)
        name = workflow["metadata"].get("name")
        create_options = body.get("createOptions") or {}
        dry_run = bool(body.get("serverDryRun")) or bool(
            isinstance(create_options, dict) and create_options.get("dryRun")
        )
        try:
            if dry_run:
                # Validated and planned as a submission would be, nothing stored.
                services.workflow_preview(user=request.user, body=workflow, project=project)
                return answer(workflow)
            if name and WorkflowRun.objects.filter(name=name).exists():
                raise ArgoError(ALREADY_EXISTS, f'workflows.argoproj.io "{name}" already exists')
            run = services.run_submit(user=request.user, body=workflow, project=project)
        except WorkflowInvalid as exc:
            raise invalid(exc) from None
        return answer(shown(run))


def _page(params: Any) -> tuple[int, int]:
    out = []
    for key in ("listOptions.continue", "listOptions.limit"):
        raw = params.get(key) or "0"
        if not raw.isdigit():
            raise ArgoError(INVALID_ARGUMENT, f"{key}: must be a whole number, not {raw!r}")
        out.append(int(raw))
    return out[0], out[1]


def _latest(runs: list[WorkflowRun]) -> datetime:
    return max((r.updated_at for r in runs), default=timezone.now())


class WorkflowLintView(ArgoView):
    """``POST /api/v1/workflows/{namespace}/lint``: checked as a submission is, answered with
    the workflow."""

    def post(self, request: Request, namespace: str) -> HttpResponseBase:
        project = self.project(namespace, "create")
        workflow = submitted(self.body(), namespace)
        try:
            # templateRefs resolve as a run of the project resolves them.
            services.workflow_parse(body=workflow, project=project)
        except WorkflowInvalid as exc:
            raise invalid(exc) from None
        return answer(workflow)


class WorkflowView(ArgoView):
    """``GET|DELETE /api/v1/workflows/{namespace}/{name}``."""

    def get(self, request: Request, namespace: str, name: str) -> HttpResponseBase:
        run = self.run(self.project(namespace, "get"), name)
        workflow = shown(run)
        return answer(listing.Cleaner(request.query_params.get("fields", "")).clean(workflow))

    def delete(self, request: Request, namespace: str, name: str) -> HttpResponseBase:
        run = self.run(self.project(namespace, "delete"), name)
        try:
            run_services.run_delete(run=run, user=request.user)
        except services.ActionRefused as exc:
            raise ArgoError(FAILED_PRECONDITION, str(exc)) from None
        return answer({})


def _node(selector: Any, run: WorkflowRun) -> str | None:
    """A unit's name from Argo's ``nodeFieldSelector`` (``displayName=x``, ``name=<wf>.x``,
    ``templateName=x``)."""
    if not selector:
        return None
    if not isinstance(selector, str):
        raise ArgoError(INVALID_ARGUMENT, "nodeFieldSelector: must be a string")
    key, _, value = selector.partition("=")
    key = key.strip()
    value = value.strip()
    if key == "name":
        value = value.removeprefix(f"{run.name}.")
    elif key == "templateName":
        match = run.units.filter(template=value).values_list("name", flat=True).first()
        value = match or value
    elif key != "displayName":
        raise ArgoError(
            INVALID_ARGUMENT,
            f"nodeFieldSelector: {selector!r} is not supported (displayName=, name= or "
            "templateName=)",
        )
    return value


def _refuse_unsupported(body: dict[str, Any], *fields: str) -> None:
    given = [f for f in fields if body.get(f) not in (None, False, "", [], {})]
    if given:
        raise ArgoError(INVALID_ARGUMENT, f"{', '.join(given)}: not supported by this server")


class WorkflowActionView(ArgoView):
    """``PUT /api/v1/workflows/{namespace}/{name}/stop|terminate|suspend|resume|retry|
    resubmit``: each answers the workflow as it is after the action (resubmit: the new one)."""

    def put(self, request: Request, namespace: str, name: str, action: str) -> HttpResponseBase:
        run = self.run(self.project(namespace, "update"), name)
        body = self.body()
        user = request.user
        try:
            if action in ("stop", "terminate"):
                _refuse_unsupported(body, "nodeFieldSelector")
                strategy = "Stop" if action == "stop" else "Terminate"
                run = services.run_stop(run=run, user=user, strategy=strategy)
            elif action == "suspend":
                run = run_services.run_suspend(run=run, user=user)
            elif action == "resume":
                run = services.run_resume(
                    run=run, user=user, node=_node(body.get("nodeFieldSelector"), run)
                )
            elif action == "retry":
                _refuse_unsupported(body, "restartSuccessful", "nodeFieldSelector", "parameters")
                run = services.run_retry(run=run, user=user)
            else:
                _refuse_unsupported(body, "parameters")
                run = services.run_resubmit(run=run, user=user)
        except services.ActionRefused as exc:
            raise ArgoError(FAILED_PRECONDITION, str(exc)) from None
        except WorkflowInvalid as exc:
            raise invalid(exc) from None
        return answer(shown(run))


class WorkflowLogView(ArgoView):
    """``GET /api/v1/workflows/{namespace}/{name}/log`` and ``.../{podName}/log``: a stream of
    ``LogEntry`` (``podName``, ``logOptions.container``, ``logOptions.tailLines``,
    ``logOptions.follow``, ``grep``)."""

    def get(self, request: Request, namespace: str, name: str, pod: str = "") -> HttpResponseBase:
        run = self.run(self.project(namespace, "get"), name)
        params = request.query_params
        tail_raw = params.get("logOptions.tailLines") or ""
        if tail_raw and not tail_raw.isdigit():
            raise ArgoError(INVALID_ARGUMENT, "logOptions.tailLines: must be a whole number")
        entries = streams.log_entries(
            run.name,
            units_of(run),
            pod_name=pod or params.get("podName", ""),
            container=params.get("logOptions.container") or "main",
            tail=int(tail_raw) if tail_raw else None,
            follow=params.get("logOptions.follow") in ("true", "1"),
            grep=params.get("grep", ""),
        )
        return streams.stream_response(request, entries)


class WorkflowEventsView(ArgoView):
    """``GET /api/v1/workflow-events/{namespace}``: the watch ``argo submit --watch`` and
    ``argo watch`` read."""

    def get(self, request: Request, namespace: str) -> HttpResponseBase:
        project = self.project(namespace, "watch")
        params = request.query_params
        labels = listing.label_selector(params.get("listOptions.labelSelector", ""))
        fields = listing.field_selector(params.get("listOptions.fieldSelector", ""))
        cleaner = listing.Cleaner(params.get("fields", "")).without_prefix("result.object.")
        runs: QuerySet[WorkflowRun] = RUNS.filter(project=project)
        name = fields.get("metadata.name")
        if name is not None:
            if name[0] == "=":
                # A watch of a workflow that is not there: 404; of @latest: the newest one.
                runs = runs.filter(name=self.run(project, name[1]).name)
            else:
                runs = runs.exclude(name=name[1])

        def fetch(seen: dict[str, str]) -> tuple[dict[str, dict[str, Any]], set[str]]:
            rows = list(runs.annotate(last=Greatest("updated_at", Max("units__updated_at"))))
            waiting = runs_waiting_on_locks(r.pk for r in rows if r.status == "Pending")
            changed = {}
            for run in rows:
                if seen.get(run.name) == version_of(run.last or run.updated_at):
                    continue
                if not labels(labels_of(run, phase_of(run, run.pk in waiting))):
                    continue
                workflow = workflow_of(run, units_of(run), waiting_on_lock=run.pk in waiting)
                changed[run.name] = cleaner.clean(workflow)
            return changed, {r.name for r in rows}

        events = streams.watch_events(fetch, named=name is not None and name[0] == "=")
        return streams.stream_response(request, events)


# What the portal answers to ``/api/v1/version``: the Argo Server API it follows.
ARGO_VERSION = {
    "version": "v4.0.0",
    "buildDate": "",
    "gitCommit": "",
    "gitTag": "",
    "gitTreeState": "",
    "goVersion": "",
    "compiler": "multisite-portal",
    "platform": "karmada",
}


class InfoView(ArgoView):
    def get(self, request: Request) -> HttpResponseBase:
        return answer({"links": [], "columns": [], "modals": {}, "navColor": ""})


class VersionView(ArgoView):
    def get(self, request: Request) -> HttpResponseBase:
        return answer(ARGO_VERSION)


class UserInfoView(ArgoView):
    def get(self, request: Request) -> HttpResponseBase:
        user = request.user
        return answer(
            {
                "subject": user.get_username(),
                "name": getattr(user, "get_full_name", str)() or user.get_username(),
                "email": getattr(user, "email", "") or "",
                "groups": list(projects_of(user).values_list("name", flat=True)),
            }
        )
