"""Runs over REST (DESIGN section 9). Thin: each endpoint calls one service, by name."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.db.models import Prefetch, QuerySet
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response

from placement.parser import WorkflowInvalid
from portal import services
from portal.api.errors import errors_response
from portal.api.serializers import (
    PlacementDecisionSerializer,
    PreviewSerializer,
    RunEventSerializer,
    WorkflowRunListSerializer,
    WorkflowRunSerializer,
)
from portal.filtersets import WorkflowRunFilterSet
from portal.models import UnitRun, WorkflowRun
from portal.selectors import runs_visible_to


class RawWorkflowParser(BaseParser):
    """Hands the body through untouched: the workflow parser decodes YAML and JSON itself,
    with its own limits (alias expansion, depth, size)."""

    media_type = "*/*"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        return stream.read() if stream is not None else b""


class BodyTooLarge(Exception):
    pass


def _read_body(request: Request) -> bytes:
    limit = int(settings.PORTAL_MAX_BODY_BYTES)
    length = request.META.get("CONTENT_LENGTH") or "0"
    try:
        declared = int(length)
    except ValueError:
        declared = 0
    if declared > limit:
        # Refuse before reading: a 10 MB body costs nothing but this header check.
        raise BodyTooLarge(f"body of {declared} bytes exceeds the limit of {limit} bytes")
    raw = request.stream.read(limit + 1) if request.stream is not None else b""
    if len(raw) > limit:
        raise BodyTooLarge(f"body exceeds the limit of {limit} bytes")
    return bytes(raw)


def _submission(request: Request) -> tuple[Any, str | None, dict[str, str] | None]:
    """The workflow, project and arguments from the body: a raw Workflow (YAML or JSON), or the
    JSON wrapper ``{"manifest": {...}, "project": ..., "arguments": {...}}``."""
    raw = _read_body(request)
    project = request.query_params.get("project") or None
    content_type = (request.content_type or "").split(";")[0].strip().lower()
    if content_type == "application/json" or raw.lstrip()[:1] == b"{":
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            data = None
        if isinstance(data, dict) and "manifest" in data and "kind" not in data:
            manifest = data["manifest"]
            if not isinstance(manifest, (dict, str)):
                raise WorkflowInvalid(
                    [services.FieldError("manifest", "must be a Workflow object or YAML text")]
                )
            arguments = data.get("arguments")
            return manifest, data.get("project") or project, arguments
    return raw, project, None


def _refused_submission(exc: BodyTooLarge | WorkflowInvalid) -> Response:
    if isinstance(exc, BodyTooLarge):
        return errors_response([{"path": "", "message": str(exc)}], 413)
    return errors_response(exc.as_dicts())


def _refused_action(exc: services.ActionRefused | WorkflowInvalid) -> Response:
    if isinstance(exc, services.ActionRefused):
        return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
    return errors_response(exc.as_dicts())


WORKFLOW_BODY = {
    "application/yaml": OpenApiTypes.STR,
    "application/json": OpenApiTypes.OBJECT,
}


class WorkflowRunViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[WorkflowRun]
):
    filter_backends = [DjangoFilterBackend]
    filterset_class = WorkflowRunFilterSet

    def get_queryset(self) -> QuerySet[WorkflowRun]:
        return runs_visible_to(self.request.user).prefetch_related(
            Prefetch("units", queryset=UnitRun.objects.order_by("position", "id"))
        )

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
            body, project, arguments = _submission(request)
            run = services.run_submit(
                user=request.user, body=body, project=project, arguments=arguments
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

    @extend_schema(request=None, responses={200: WorkflowRunSerializer})
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, pk: str | None = None) -> Response:
        try:
            run = services.run_stop(run=self.get_object(), user=request.user)
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

    @extend_schema(responses={200: PlacementDecisionSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def decisions(self, request: Request, pk: str | None = None) -> Response:
        run = self.get_object()
        rows = run.decisions.select_related("unit").order_by("created_at", "id")
        return Response(PlacementDecisionSerializer(rows, many=True).data)

    @extend_schema(responses={200: RunEventSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def events(self, request: Request, pk: str | None = None) -> Response:
        run = self.get_object()
        rows = run.events.select_related("unit").order_by("created_at", "id")
        return Response(RunEventSerializer(rows, many=True).data)
