"""The WorkflowTemplate catalogue's writes (GET|POST /api/v1/workflow-templates/ ...).

Who writes what and what a run resolves: ``portal.catalogue``; these bind the parser's bounds."""

from __future__ import annotations

from typing import Any

from portal import catalogue
from portal.models import WorkflowTemplate
from portal.services.parsing import parser_limits
from sites.models import Project

CatalogueRefused = catalogue.CatalogueRefused


def workflow_template_create(
    *, user: Any, body: str | bytes | dict[str, Any], project: Project | str | None = None
) -> WorkflowTemplate:
    """Add a WorkflowTemplate (or, for fleet staff, a ClusterWorkflowTemplate) to the
    catalogue of ``project`` (None: fleet-wide)."""
    return catalogue.workflow_template_create(
        user=user, body=body, project=project, limits=parser_limits()
    )


def workflow_template_update(
    *,
    template: WorkflowTemplate,
    user: Any,
    body: str | bytes | dict[str, Any],
    project: Project | str | None = None,
) -> WorkflowTemplate:
    return catalogue.workflow_template_update(
        template=template, user=user, body=body, project=project, limits=parser_limits()
    )


def workflow_template_delete(*, template: WorkflowTemplate, user: Any) -> None:
    catalogue.workflow_template_delete(template=template, user=user)
