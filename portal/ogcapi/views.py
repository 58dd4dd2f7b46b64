"""OGC API - Processes, Part 1: Core 1.0 (OGC 18-062r2) over the portal: catalogue
WorkflowTemplates are processes, runs are jobs. Each view is a thin adapter over the
services and selectors ``/api/v1/`` uses (same permissions, same placement)."""

from __future__ import annotations

from django.db.models import Q, QuerySet
from django.http import HttpResponse
from rest_framework.request import Request

from placement.parser import WorkflowInvalid
from portal import services
from portal.catalogue import template_pick, templates_visible_to
from portal.faces import (
    OGC_EXCEPTIONS,
    FaceView,
    Problem,
    RawBody,
    json_body,
    json_response,
    portal_url,
    root_url,
)
from portal.models import WorkflowRun, WorkflowTemplate
from portal.ogcapi import jobs, openapi, processes
from portal.selectors import runs_visible_to

PREFIX = "ogcapi"
CONF = "http://www.opengis.net/spec/ogcapi-processes-1/1.0/conf"
CONFORMANCE = [
    f"{CONF}/core",
    f"{CONF}/ogc-process-description",
    f"{CONF}/json",
    f"{CONF}/oas30",
    f"{CONF}/job-list",
    f"{CONF}/dismiss",
]
REL = "http://www.opengis.net/def/rel/ogc/1.0"
DEFAULT_LIMIT = 10
MAX_LIMIT = 1000


def _runnable(request: Request) -> QuerySet[WorkflowTemplate]:
    """The catalogue entries the user may run: WorkflowTemplates (a ClusterWorkflowTemplate
    is only ever referenced), fleet-wide or of their projects."""
    return templates_visible_to(request.user).filter(
        Q(manifest__kind="WorkflowTemplate") | ~Q(manifest__has_key="kind")
    )


def _template(request: Request, process_id: str, project: str | None = None) -> WorkflowTemplate:
    """The entry a run resolves for ``process_id``: ``project``'s own, else the fleet-wide
    one (``portal.catalogue``); without a project, the user's default project's, else the
    fleet-wide one, else their only project's."""
    rows = _runnable(request).filter(name=process_id)
    if project is None:
        default = services.default_project(request.user)
        project = default.name if default is not None else None
    picked = None
    if project:
        picked = rows.filter(project__name=project).first()
    if picked is None:
        picked = rows.filter(project__isnull=True).first()
    if picked is None:
        try:
            picked = template_pick(rows, None)
        except (WorkflowTemplate.DoesNotExist, WorkflowInvalid):
            picked = None
    if picked is None:
        raise Problem(
            404,
            f"{OGC_EXCEPTIONS}/no-such-process",
            "No such process",
            f"no process {process_id!r}",
        )
    return picked


def _run(request: Request, job_id: str) -> WorkflowRun:
    run = None
    if job_id.isdigit():
        run = runs_visible_to(request.user).filter(pk=int(job_id)).first()
    if run is None:
        raise Problem(404, f"{OGC_EXCEPTIONS}/no-such-job", "No such job", f"no job {job_id!r}")
    return run


def _invalid(errors: list[tuple[str, str]]) -> Problem:
    return Problem(
        400,
        f"{OGC_EXCEPTIONS}/invalid-parameter-value",
        "Invalid parameter value",
        "; ".join(f"{p}: {m}" for p, m in errors),
        errors=[{"path": p, "message": m} for p, m in errors],
    )


class LandingPage(FaceView):
    public = True

    def get(self, request: Request) -> HttpResponse:
        base = root_url(request, PREFIX)
        return json_response(
            {
                "title": "Multi-site workflow portal: OGC API - Processes",
                "description": "The portal's WorkflowTemplate catalogue as processes; each job "
                "is a run whose steps are placed at the sites of the fleet.",
                "links": [
                    {"href": f"{base}/", "rel": "self", "type": "application/json"},
                    {
                        "href": f"{base}/api",
                        "rel": "service-desc",
                        "type": "application/vnd.oai.openapi+json;version=3.0",
                        "title": "the API definition",
                    },
                    {
                        "href": f"{base}/conformance",
                        "rel": f"{REL}/conformance",
                        "type": "application/json",
                    },
                    {
                        "href": f"{base}/processes",
                        "rel": f"{REL}/processes",
                        "type": "application/json",
                    },
                    {"href": f"{base}/jobs", "rel": f"{REL}/job-list", "type": "application/json"},
                ],
            }
        )


class Conformance(FaceView):
    public = True

    def get(self, request: Request) -> HttpResponse:
        return json_response({"conformsTo": CONFORMANCE})


class ApiDefinition(FaceView):
    public = True

    def get(self, request: Request) -> HttpResponse:
        return json_response(
            openapi.document(root_url(request, PREFIX)),
            content_type="application/vnd.oai.openapi+json;version=3.0",
        )


class ProcessList(FaceView):
    def get(self, request: Request) -> HttpResponse:
        base = root_url(request, PREFIX)
        items = []
        names = _runnable(request).order_by("name").values_list("name", flat=True).distinct()
        for name in names:
            row = _template(request, name)
            if not isinstance(row.manifest, dict) or row.manifest.get("kind") not in (
                None,
                "WorkflowTemplate",
            ):
                continue
            summary = processes.summary(row.name, row.manifest)
            summary["links"] = [
                {
                    "href": f"{base}/processes/{row.name}",
                    "rel": "self",
                    "type": "application/json",
                    "title": "process description",
                }
            ]
            items.append(summary)
        return json_response(
            {
                "processes": items,
                "links": [{"href": f"{base}/processes", "rel": "self", "type": "application/json"}],
            }
        )


class ProcessDescription(FaceView):
    def get(self, request: Request, process_id: str) -> HttpResponse:
        row = _template(request, process_id)
        base = root_url(request, PREFIX)
        doc = processes.description(row.name, row.manifest)
        doc["links"] = [
            {"href": f"{base}/processes/{row.name}", "rel": "self", "type": "application/json"},
            {
                "href": f"{base}/processes/{row.name}/execution",
                "rel": f"{REL}/execute",
                "type": "application/json",
                "title": "execute (POST)",
            },
            {
                "href": f"{portal_url(request)}/api/v1/workflow-templates/{row.name}/",
                "rel": "alternate",
                "type": "application/json",
                "title": "the WorkflowTemplate",
            },
        ]
        return json_response(doc)


class Execution(FaceView):
    parser_classes = [RawBody]

    def post(self, request: Request, process_id: str) -> HttpResponse:
        _template(request, process_id)  # 404 before the body is read
        body = json_body(request, f"{OGC_EXCEPTIONS}/invalid-parameter-value")
        if not isinstance(body, dict):
            raise _invalid([("", "the body must be a JSON object")])
        # The inputs are checked against the entry the run will resolve: the project's own.
        inputs = body.get("inputs")
        wanted = inputs.get(processes.PROJECT_INPUT) if isinstance(inputs, dict) else None
        row = _template(request, process_id, wanted if isinstance(wanted, str) else None)
        try:
            arguments, project = processes.arguments_from(row.manifest, body.get("inputs"))
        except processes.InputsInvalid as exc:
            raise _invalid(exc.errors) from None
        try:
            run = services.run_submit(
                user=request.user,
                body=processes.workflow_for(row.name, arguments),
                project=project,
            )
        except WorkflowInvalid as exc:
            raise _invalid([(e["path"], e["message"]) for e in exc.as_dicts()]) from None
        base = root_url(request, PREFIX)
        response = json_response(jobs.status_info(run, base, portal_url(request)), status=201)
        response["Location"] = f"{base}/jobs/{run.pk}"
        response["Preference-Applied"] = "respond-async"
        return response


class JobList(FaceView):
    def get(self, request: Request) -> HttpResponse:
        params = request.query_params
        errors: list[tuple[str, str]] = []
        limit, offset = DEFAULT_LIMIT, 0
        for key in ("limit", "offset"):
            raw = params.get(key)
            if raw is None:
                continue
            if not raw.isdigit():
                errors.append((key, "must be a whole number"))
                continue
            if key == "limit":
                limit = int(raw)
                if not 1 <= limit <= MAX_LIMIT:
                    errors.append((key, f"must be between 1 and {MAX_LIMIT}"))
            else:
                offset = int(raw)
        statuses = [s for v in params.getlist("status") for s in v.split(",") if s]
        unknown = [s for s in statuses if s not in jobs.RUN_STATUSES]
        if unknown:
            allowed = ", ".join(jobs.RUN_STATUSES)
            errors.append(("status", f"{', '.join(unknown)}: not one of {allowed}"))
        if errors:
            raise _invalid(errors)
        runs = runs_visible_to(request.user).order_by("-created_at", "-id")
        process_ids = [p for v in params.getlist("processID") for p in v.split(",") if p]
        if process_ids:
            runs = runs.filter(manifest__spec__workflowTemplateRef__name__in=process_ids)
        if statuses:
            runs = runs.filter(status__in=[r for s in statuses for r in jobs.RUN_STATUSES[s]])
        page = list(jobs.with_counts(runs)[offset : offset + limit + 1])
        base = root_url(request, PREFIX)
        portal = portal_url(request)
        links = [{"href": request.build_absolute_uri(), "rel": "self", "type": "application/json"}]
        if len(page) > limit:
            query = params.copy()
            query["limit"] = str(limit)
            query["offset"] = str(offset + limit)
            links.append(
                {
                    "href": f"{base}/jobs?{query.urlencode()}",
                    "rel": "next",
                    "type": "application/json",
                }
            )
        return json_response(
            {
                "jobs": [jobs.status_info(r, base, portal, detail=False) for r in page[:limit]],
                "links": links,
            }
        )


class Job(FaceView):
    def get(self, request: Request, job_id: str) -> HttpResponse:
        run = _run(request, job_id)
        return json_response(jobs.status_info(run, root_url(request, PREFIX), portal_url(request)))

    def delete(self, request: Request, job_id: str) -> HttpResponse:
        """Dismiss: a job still running is stopped as ``argo stop`` stops it and ends
        ``dismissed``; a finished job is left as it is and its status answered."""
        run = _run(request, job_id)
        if not run.is_finished:
            try:
                run = services.run_stop(run=run, user=request.user, strategy="Stop")
            except services.ActionRefused:
                run.refresh_from_db()  # it finished meanwhile
        return json_response(jobs.status_info(run, root_url(request, PREFIX), portal_url(request)))


class JobResults(FaceView):
    def get(self, request: Request, job_id: str) -> HttpResponse:
        run = _run(request, job_id)
        status = jobs.ogc_status(run)
        if status == "failed":
            info = jobs.status_info(run, root_url(request, PREFIX), portal_url(request))
            raise Problem(
                500,
                f"{OGC_EXCEPTIONS}/failed",
                "The job failed",
                str(info.get("message") or ""),
                jobID=str(run.pk),
            )
        if status == "dismissed":
            raise Problem(
                404, f"{OGC_EXCEPTIONS}/no-such-job", "The job was dismissed", jobID=str(run.pk)
            )
        if status != "successful":
            raise Problem(
                404,
                f"{OGC_EXCEPTIONS}/result-not-ready",
                "Result not ready",
                f"the job is {status}",
                jobID=str(run.pk),
            )
        return json_response(jobs.results(run))
