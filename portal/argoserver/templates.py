"""Argo Server's WorkflowTemplateService (server/workflowtemplate/): a namespace's
WorkflowTemplates are the project's entries of the portal's catalogue, the same rows as
``/api/v1/workflow-templates/``. Thin: one service or selector each."""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import QuerySet
from django.http import HttpResponseBase
from rest_framework.request import Request

from placement.parser import WorkflowInvalid
from portal import services
from portal.argoserver import listing
from portal.argoserver.errors import (
    ALREADY_EXISTS,
    NOT_FOUND,
    PERMISSION_DENIED,
    ArgoError,
    invalid,
)
from portal.argoserver.views import ArgoView, answer, submitted
from portal.argoserver.workflows import UID_NAMESPACE, timestamp
from portal.models import WorkflowTemplate
from sites.models import Project


def template_of(row: WorkflowTemplate) -> dict[str, Any]:
    manifest = dict(row.manifest or {})
    meta = dict(manifest.get("metadata") or {})
    meta.update(
        name=row.name,
        namespace=row.project.name if row.project else "",
        uid=uid_of_template(row),
        creationTimestamp=timestamp(row.created_at),
    )
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "WorkflowTemplate",
        **manifest,
        "metadata": meta,
    }


def uid_of_template(row: WorkflowTemplate) -> str:
    return str(uuid.uuid5(UID_NAMESPACE, f"template:{row.pk}:{row.created_at.isoformat()}"))


class WorkflowTemplatesView(ArgoView):
    """``GET|POST /api/v1/workflow-templates/{namespace}``: the catalogue's entries of the
    project (the same rows as ``/api/v1/workflow-templates/``)."""

    def rows(self, project: Project) -> QuerySet[WorkflowTemplate]:
        return WorkflowTemplate.objects.select_related("project").filter(project=project)

    def get(self, request: Request, namespace: str) -> HttpResponseBase:
        project = self.project(namespace, "list", "workflowtemplates")
        labels = listing.label_selector(request.query_params.get("listOptions.labelSelector", ""))
        items = [
            template_of(row)
            for row in self.rows(project).order_by("name")
            if (row.manifest or {}).get("kind", "WorkflowTemplate") == "WorkflowTemplate"
            and labels(((row.manifest or {}).get("metadata") or {}).get("labels") or {})
        ]
        return answer({"metadata": {}, "items": items})

    def post(self, request: Request, namespace: str) -> HttpResponseBase:
        project = self.project(namespace, "create", "workflowtemplates")
        body = self.body()
        template = submitted(body, namespace, "template")
        template["kind"] = "WorkflowTemplate"
        name = template["metadata"].get("name")
        if name and WorkflowTemplate.objects.filter(name=name, project=project).exists():
            raise ArgoError(
                ALREADY_EXISTS, f'workflowtemplates.argoproj.io "{name}" already exists'
            )
        try:
            row = services.workflow_template_create(
                user=request.user, body=template, project=project
            )
        except WorkflowInvalid as exc:
            raise invalid(exc) from None
        except services.CatalogueRefused as exc:
            raise ArgoError(PERMISSION_DENIED, str(exc)) from None
        return answer(template_of(row))


class WorkflowTemplateView(WorkflowTemplatesView):
    """``GET /api/v1/workflow-templates/{namespace}/{name}``."""

    def get(self, request: Request, namespace: str, name: str) -> HttpResponseBase:  # type: ignore[override]
        project = self.project(namespace, "get", "workflowtemplates")
        row = self.rows(project).filter(name=name).first()
        if row is None:
            raise ArgoError(NOT_FOUND, f'workflowtemplates.argoproj.io "{name}" not found')
        return answer(template_of(row))

    post = None  # type: ignore[assignment]
