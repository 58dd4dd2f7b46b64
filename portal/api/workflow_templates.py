"""The WorkflowTemplate catalogue over REST: what ``templateRef`` resolves against,
so a platform component can keep it in step with its Git repository. Thin: one service each."""

from __future__ import annotations

import json
from typing import Any

from django.db.models import QuerySet
from django.http import Http404
from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_view
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from placement.parser import FieldError, WorkflowInvalid
from portal import services
from portal.api.bodies import BodyTooLarge, RawWorkflowParser, read_body
from portal.api.errors import errors_response
from portal.api.views import WORKFLOW_BODY
from portal.catalogue import template_pick, templates_visible_to
from portal.models import WorkflowTemplate
from sites.api.base import BaseModelViewSet


class WorkflowTemplateSerializer(serializers.ModelSerializer[WorkflowTemplate]):
    """A catalogue entry: ``project`` is the project's name (null: fleet-wide, written by fleet
    staff only; a ClusterWorkflowTemplate is always fleet-wide), ``kind`` WorkflowTemplate or
    ClusterWorkflowTemplate, ``templates`` the names ``templateRef`` may use, ``manifest`` the
    document as submitted. A run resolves its project's entries, then the fleet-wide ones."""

    project = serializers.SerializerMethodField()
    kind = serializers.SerializerMethodField()
    templates = serializers.SerializerMethodField()

    class Meta:
        model = WorkflowTemplate
        fields = ["name", "project", "kind", "templates", "manifest", "created_at"]
        read_only_fields = fields

    def get_project(self, obj: WorkflowTemplate) -> str | None:
        return obj.project.name if obj.project else None

    def get_kind(self, obj: WorkflowTemplate) -> str:
        return obj.kind

    def get_templates(self, obj: WorkflowTemplate) -> list[str]:
        spec = (obj.manifest or {}).get("spec") or {}
        return [
            str(t["name"])
            for t in spec.get("templates") or []
            if isinstance(t, dict) and t.get("name")
        ]


def _body(request: Request) -> tuple[Any, str | None]:
    """The WorkflowTemplate (YAML or JSON), or the wrapper ``{"manifest", "project"}``."""
    raw = read_body(request)
    project = request.query_params.get("project") or None
    if raw.lstrip()[:1] == b"{":
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):
            data = None  # the parser says what is wrong with it
        if isinstance(data, dict) and "manifest" in data and "kind" not in data:
            if not isinstance(data["manifest"], (dict, str)):
                raise WorkflowInvalid(
                    [FieldError("manifest", "must be a WorkflowTemplate object or YAML")]
                )
            return data["manifest"], data.get("project") or project
    return raw, project


def _refused(exc: Exception) -> Response:
    if isinstance(exc, BodyTooLarge):
        return errors_response([{"path": "", "message": str(exc)}], 413)
    if isinstance(exc, services.CatalogueRefused):
        raise PermissionDenied(str(exc))
    assert isinstance(exc, WorkflowInvalid)
    return errors_response(exc.as_dicts())


_WRAPPER = OpenApiExample(
    "wrapper",
    value={
        "project": "eo-demo",
        "manifest": {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "WorkflowTemplate",
            "metadata": {"name": "eo-tools"},
            "spec": {"templates": [{"name": "echo", "container": {"image": "alpine"}}]},
        },
    },
)


@extend_schema_view(
    list=extend_schema(summary="List the catalogue's WorkflowTemplates you can see"),
    retrieve=extend_schema(summary="One WorkflowTemplate of the catalogue, by name"),
    create=extend_schema(
        summary="Add a WorkflowTemplate to the catalogue",
        request=WORKFLOW_BODY,
        responses={201: WorkflowTemplateSerializer},
        examples=[_WRAPPER],
    ),
    update=extend_schema(
        summary="Replace a WorkflowTemplate of the catalogue",
        request=WORKFLOW_BODY,
        responses={200: WorkflowTemplateSerializer},
        examples=[_WRAPPER],
    ),
    destroy=extend_schema(summary="Remove a WorkflowTemplate from the catalogue"),
)
class WorkflowTemplateViewSet(BaseModelViewSet[WorkflowTemplate]):
    permission_classes = [IsAuthenticated]
    serializer_class = WorkflowTemplateSerializer
    lookup_field = "name"
    lookup_value_regex = r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?"
    http_method_names = ["get", "post", "put", "delete", "head", "options"]

    def get_queryset(self) -> QuerySet[WorkflowTemplate]:
        if getattr(self, "swagger_fake_view", False):  # the schema is built without a user
            return WorkflowTemplate.objects.none()
        return templates_visible_to(self.request.user)

    def get_object(self) -> WorkflowTemplate:
        """By name among the entries the user sees; a name in the user's project and
        fleet-wide means the project's (as a run resolves it), ``?project=`` says which."""
        rows = self.get_queryset().filter(name=self.kwargs["name"])
        try:
            return template_pick(rows, self.request.query_params.get("project"))
        except WorkflowTemplate.DoesNotExist:
            raise Http404 from None
        except WorkflowInvalid as exc:
            raise ValidationError({e.path: e.message for e in exc.errors}) from None

    def get_parsers(self) -> list[Any]:
        # The workflow parser decodes the body itself (YAML or JSON, with its own limits).
        request = getattr(self, "request", None)
        if request is not None and request.method in ("POST", "PUT"):
            return [RawWorkflowParser()]
        return super().get_parsers()

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        try:
            body, project = _body(request)
            row = services.workflow_template_create(user=request.user, body=body, project=project)
        except (BodyTooLarge, WorkflowInvalid, services.CatalogueRefused) as exc:
            return _refused(exc)
        return Response(WorkflowTemplateSerializer(row).data, status=status.HTTP_201_CREATED)

    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        template = self.get_object()
        try:
            body, project = _body(request)
            row = services.workflow_template_update(
                template=template, user=request.user, body=body, project=project
            )
        except (BodyTooLarge, WorkflowInvalid, services.CatalogueRefused) as exc:
            return _refused(exc)
        return Response(WorkflowTemplateSerializer(row).data)

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        try:
            services.workflow_template_delete(template=self.get_object(), user=request.user)
        except services.CatalogueRefused as exc:
            return _refused(exc)
        return Response(status=status.HTTP_204_NO_CONTENT)
