"""Runs over REST (DESIGN section 9). Thin: each endpoint calls one service, by name."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.parsers import BaseParser
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from placement.parser import FieldError, WorkflowInvalid
from portal import log_follows, outputs, reasons, services
from portal.api.bodies import BodyTooLarge, RawWorkflowParser, read_body
from portal.api.errors import errors_response
from portal.api.renderers import PlainTextRenderer
from portal.api.serializers import (
    PlacementDecisionSerializer,
    PreviewSerializer,
    ResumeSerializer,
    RunEventSerializer,
    StopSerializer,
    UnitDetailSerializer,
    WorkflowRunListSerializer,
    WorkflowRunSerializer,
)
from portal.api.unit_logs import LogWanted, log_answer, log_request
from portal.choices import UnitPhase
from portal.filtersets import WorkflowRunFilterSet
from portal.karmada import logs
from portal.models import UnitRun, WorkflowRun
from portal.selectors import unit_by_key, unit_detail
from portal.selectors.runs import run_decisions_all, run_events, runs_with_units
from portal.submission_limits import SubmissionsThrottled
from sites.api.base import BaseViewSet


def _submission(request: Request) -> tuple[Any, str | None, dict[str, str] | None]:
    """The workflow, project and arguments from the body: a raw Workflow (YAML or JSON), or the
    JSON wrapper ``{"manifest": {...}, "project": ..., "arguments": {...}}``."""
    body, project, arguments, _ = _submission_with_priority(request)
    return body, project, arguments


def _submission_with_priority(
    request: Request,
) -> tuple[Any, str | None, dict[str, str] | None, Any]:
    """``_submission`` and the run's priority class: ``?priority_class=`` or the wrapper's
    ``priority_class`` (None: its project's default)."""
    raw = read_body(request)
    project = request.query_params.get("project") or None
    priority = request.query_params.get("priority_class") or None
    content_type = (request.content_type or "").split(";")[0].strip().lower()
    if content_type == "application/json" or raw.lstrip()[:1] == b"{":
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):
            # Not the wrapper: the workflow parser reads the body and says what is wrong
            # (for nesting too deep, the same 400 as a YAML body gets).
            data = None
        if isinstance(data, dict) and "manifest" in data and "kind" not in data:
            manifest = data["manifest"]
            if not isinstance(manifest, (dict, str)):
                raise WorkflowInvalid(
                    [FieldError("manifest", "must be a Workflow object or YAML text")]
                )
            arguments = data.get("arguments")
            return (
                manifest,
                data.get("project") or project,
                arguments,
                data.get("priority_class", priority),
            )
    return raw, project, None, priority


def _json_object(request: Request) -> Any:
    """An action's JSON body (``{}`` when empty). Every POST of this viewset is read raw
    (``get_parsers`` chooses before DRF knows the action)."""
    raw = read_body(request)
    return json.loads(raw) if raw.strip() else {}


def _action_body(request: Request) -> dict[str, Any] | Response:
    """An action's JSON object, or the 4xx answer saying why the body is not one."""
    try:
        data = _json_object(request)
    except BodyTooLarge as exc:
        return _refused_submission(exc)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return errors_response([{"path": "", "message": "the body must be JSON"}])
    if not isinstance(data, dict):
        return errors_response([{"path": "", "message": "the body must be a JSON object"}])
    return data


def _throttled(exc: SubmissionsThrottled) -> Response:
    answer = errors_response(exc.as_dicts(), status.HTTP_429_TOO_MANY_REQUESTS)
    answer["Retry-After"] = str(exc.retry_after)
    return answer


def _refused_submission(exc: BodyTooLarge | WorkflowInvalid) -> Response:
    if isinstance(exc, BodyTooLarge):
        return errors_response([{"path": "", "message": str(exc)}], 413)
    if isinstance(exc, SubmissionsThrottled):
        return _throttled(exc)
    return errors_response(exc.as_dicts())


def _refused_action(exc: services.ActionRefused | WorkflowInvalid) -> Response:
    if isinstance(exc, services.ActionRefused):
        return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
    if isinstance(exc, SubmissionsThrottled):
        return _throttled(exc)
    return errors_response(exc.as_dicts())


WORKFLOW_BODY = {
    "application/yaml": OpenApiTypes.STR,
    "application/json": OpenApiTypes.OBJECT,
}


class WorkflowRunViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, BaseViewSet[WorkflowRun]
):
    filterset_class = WorkflowRunFilterSet

    def get_queryset(self) -> QuerySet[WorkflowRun]:
        return runs_with_units(self.request.user)

    def get_serializer_class(self) -> Any:
        return WorkflowRunListSerializer if self.action == "list" else WorkflowRunSerializer

    def get_parsers(self) -> list[BaseParser]:
        # The workflow parser reads the raw body itself (YAML or JSON, with its own limits).
        # ``request`` is None while drf-spectacular builds the schema.
        request = getattr(self, "request", None)
        if getattr(self, "action", None) in ("create", "preview") or (
            request is not None and request.method == "POST"
        ):
            return [RawWorkflowParser()]
        return super().get_parsers()

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        # How the planner broke a tie is for operators (``portal.reasons``), in every answer.
        if isinstance(response, Response) and response.status_code < 300:
            reasons.answer_for(response.data, request.user)
        return super().finalize_response(request, response, *args, **kwargs)

    def _run_answer(self, run: WorkflowRun, code: int = status.HTTP_200_OK) -> Response:
        fresh = self.get_queryset().get(pk=run.pk)
        return Response(WorkflowRunSerializer(fresh).data, status=code)

    @extend_schema(
        request=WORKFLOW_BODY,
        responses={201: WorkflowRunSerializer},
        examples=[OpenApiExample("wrapper", value={"manifest": {}, "project": "eo-demo"})],
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Submit an Argo Workflow (YAML or JSON, or ``{"manifest", "project", "arguments"}``)."""
        try:
            body, project, arguments, priority = _submission_with_priority(request)
            run = services.run_submit(
                user=request.user,
                body=body,
                project=project,
                arguments=arguments,
                priority_class=priority,
            )
        except (BodyTooLarge, WorkflowInvalid) as exc:
            return _refused_submission(exc)
        # A run just submitted carries its units: answered without reading it again.
        with_units = services.with_units(run)
        if with_units is None:
            return self._run_answer(run, status.HTTP_201_CREATED)
        return Response(WorkflowRunSerializer(with_units).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=WORKFLOW_BODY, responses={200: PreviewSerializer})
    @action(detail=False, methods=["post"])
    def preview(self, request: Request) -> Response:
        """Where every unit would run and why; stores nothing.

        Each unit's ``candidates`` holds its best ``PORTAL_PREVIEW_CANDIDATES`` eligible
        sites when the fleet has more (then ``candidates_total`` and ``candidates_eligible``
        count the full table); ``?candidates=all`` gives every table in full,
        ``?candidates=N`` the best N, and ``?unit=<name>`` one unit with its full table."""
        top: int | None = settings.PORTAL_PREVIEW_CANDIDATES
        wanted = request.query_params.get("candidates", "")
        if wanted == "all":
            top = None
        elif wanted:
            if not wanted.isdigit() or int(wanted) < 1:
                return Response(
                    {"errors": [{"path": "candidates", "message": "'all' or a number >= 1"}]},
                    status=status.HTTP_400_BAD_REQUEST,
                )
            top = int(wanted)
        try:
            body, project, arguments = _submission(request)
            plan = services.workflow_preview(
                user=request.user,
                body=body,
                project=project,
                arguments=arguments,
                top=top,
                unit=request.query_params.get("unit"),
            )
        except (BodyTooLarge, WorkflowInvalid) as exc:
            return _refused_submission(exc)
        return Response(plan, status=status.HTTP_200_OK)

    @extend_schema(
        request=StopSerializer,
        responses={200: WorkflowRunSerializer},
        description="Stop the run: ``strategy`` Stop (default, ``argo stop``: the exit handler "
        "runs) or Terminate (``argo terminate``: it does not).",
    )
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, pk: str | None = None) -> Response:
        run = self.get_object()
        data = _action_body(request)
        if isinstance(data, Response):
            return data
        try:
            run = services.run_stop(
                run=run, user=request.user, strategy=str(data.get("strategy") or "Stop")
            )
        except (services.ActionRefused, WorkflowInvalid) as exc:
            return _refused_action(exc)
        return self._run_answer(run)

    @extend_schema(request=None, responses={200: WorkflowRunSerializer})
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, pk: str | None = None) -> Response:
        try:
            run = services.run_retry(run=self.get_object(), user=request.user)
        except (services.ActionRefused, WorkflowInvalid) as exc:
            return _refused_action(exc)
        return self._run_answer(run)

    @extend_schema(request=None, responses={201: WorkflowRunSerializer})
    @action(detail=True, methods=["post"])
    def resubmit(self, request: Request, pk: str | None = None) -> Response:
        try:
            run = services.run_resubmit(run=self.get_object(), user=request.user)
        except (services.ActionRefused, WorkflowInvalid) as exc:
            return _refused_action(exc)
        return self._run_answer(run, status.HTTP_201_CREATED)

    # A bare array, every decision of the run: no page.
    @extend_schema(responses={200: PlacementDecisionSerializer(many=True)})
    @action(detail=True, methods=["get"], pagination_class=None)
    def decisions(self, request: Request, pk: str | None = None) -> Response:
        run = self.get_object()
        rows = run_decisions_all(run)
        return Response(PlacementDecisionSerializer(rows, many=True).data)

    @extend_schema(responses={200: RunEventSerializer(many=True)})
    @action(detail=True, methods=["get"], pagination_class=None)
    def events(self, request: Request, pk: str | None = None) -> Response:
        run = self.get_object()
        rows = run_events(run)
        return Response(RunEventSerializer(rows, many=True).data)

    @extend_schema(
        request=ResumeSerializer,
        responses={200: WorkflowRunSerializer},
        description="Resume a suspended step (``node``: the unit's name) or every running "
        "step of the run, as ``argo resume`` does.",
    )
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str | None = None) -> Response:
        run = self.get_object()
        data = _action_body(request)
        if isinstance(data, Response):
            return data
        body = ResumeSerializer(data=data)
        if not body.is_valid():
            return errors_response(
                [{"path": k, "message": str(v[0])} for k, v in body.errors.items()]
            )
        try:
            run = services.run_resume(
                run=run, user=request.user, node=body.validated_data.get("node") or None
            )
        except (services.ActionRefused, WorkflowInvalid) as exc:
            return _refused_action(exc)
        return self._run_answer(run)

    def _unit(self, key: str) -> Any:
        run = self.get_object()  # the run's permission check, as for the run itself
        try:
            return unit_by_key(run, key)
        except UnitRun.DoesNotExist:
            raise Http404(f"no unit {key!r} in run {run.name}") from None

    @extend_schema(responses={200: UnitDetailSerializer})
    @action(detail=True, methods=["get"], url_path=r"units/(?P<name>[^/]+)")
    def unit(self, request: Request, pk: str | None = None, name: str = "") -> Response:
        """One unit (by name, or by slug when the name holds a slash) with every attempt,
        inputs, outputs and the decision that placed it."""
        return Response(UnitDetailSerializer(unit_detail(self._unit(name))).data)

    @extend_schema(
        parameters=[
            OpenApiParameter("parameter", str, description="an output parameter's name"),
            OpenApiParameter("result", bool, description="the step's result instead"),
            OpenApiParameter("offset", int, description="first character (default 0)"),
            OpenApiParameter("limit", int, description="characters (default 65536)"),
        ],
        responses={200: OpenApiTypes.OBJECT, 400: OpenApiTypes.OBJECT, 404: OpenApiTypes.OBJECT},
    )
    @action(detail=True, methods=["get"], url_path=r"units/(?P<name>[^/]+)/outputs")
    def unit_outputs(self, request: Request, pk: str | None = None, name: str = "") -> Response:
        """One output value of the unit, a page at a time: the run and the unit show the
        first PORTAL_OUTPUT_PREVIEW_CHARS characters of each (``truncated``, ``size``)."""
        u = self._unit(name)
        wanted, errors = outputs.page_request(
            request.query_params, int(settings.PORTAL_MAX_PARAMETER_BYTES)
        )
        if errors:
            return errors_response([{"path": f, "message": m} for f, m in errors])
        try:
            value = outputs.output_value(u.outputs, parameter=wanted.parameter)
        except outputs.NoSuchOutput as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_404_NOT_FOUND)
        answer = outputs.page(value, wanted.offset, wanted.limit)
        return Response({"name": wanted.parameter or "result", **answer})

    @extend_schema(
        parameters=[
            OpenApiParameter("attempt", int, description="default: the current attempt"),
            OpenApiParameter("container", str, description='default: "main"'),
            OpenApiParameter("tail", int, description="only the last N lines"),
            OpenApiParameter("pod", str, description="one pod (default: every pod, in turn)"),
            OpenApiParameter(
                "follow",
                bool,
                description="stream while the step runs (ends after PORTAL_LOG_FOLLOW_SECONDS)",
            ),
        ],
        responses={
            (200, "text/plain"): OpenApiTypes.STR,
            400: OpenApiTypes.OBJECT,
            429: OpenApiTypes.OBJECT,
            503: OpenApiTypes.OBJECT,
        },
    )
    @action(
        detail=True,
        methods=["get"],
        url_path=r"units/(?P<name>[^/]+)/logs",
        renderer_classes=[JSONRenderer, PlainTextRenderer],
    )
    def unit_logs(self, request: Request, pk: str | None = None, name: str = "") -> Any:
        """The step's log, read from its site through Karmada's cluster proxy (text), at most
        PORTAL_LOG_MAX_BYTES. A step with several pods gives each, headed by its name. When
        the log cannot be read (Karmada has no proxy path to the site, an attempt whose workflow
        is gone) the answer is 404 with the reason and where to read it. A user follows at most
        PORTAL_LOG_FOLLOWS_PER_USER logs at once (429 past it) and a web process at most
        PORTAL_LOG_FOLLOWS_PER_PROCESS (503), both with Retry-After."""
        u = self._unit(name)
        params = request.query_params
        asked = log_request(u, params)
        if isinstance(asked, Response):
            return asked
        attempt, tail = asked
        # Only a step that still runs is followed; a finished one's log is read once.
        follow = (
            params.get("follow") in ("1", "true", "yes")
            and attempt.current
            and u.phase in (UnitPhase.PENDING, UnitPhase.RUNNING)
        )
        release = log_follows.no_slot
        if follow:
            # A follow holds one of this process's threads: capped per user and per process
            # before anything is read, so that probes and other requests keep theirs.
            try:
                release = log_follows.follow_acquire(user_id=request.user.pk)
            except log_follows.FollowRefused as refused:
                return Response(
                    {"detail": refused.message},
                    status=refused.status,
                    headers={"Retry-After": str(refused.retry_after)},
                )
        wanted = LogWanted(
            site=attempt.site,
            container=params.get("container") or "main",
            tail=tail,
            follow=bool(follow),
        )
        try:
            return log_answer(u, attempt.number, params.get("pod"), wanted, release)
        except logs.LogsNotAvailable as exc:
            release()
            return Response({"detail": str(exc)}, status=status.HTTP_404_NOT_FOUND)
        except BaseException:
            release()
            raise
