"""The WorkflowTemplate catalogue (``/api/v1/workflow-templates/``): who writes what, and what a
run's ``templateRef`` resolves against.

Argo resolves a ``templateRef`` in the workflow's own namespace, and a ``clusterScope`` one
among the cluster's ClusterWorkflowTemplates, which only cluster administrators create. The
portal's namespace is the project: a run resolves its project's WorkflowTemplates first, then
the fleet-wide ones (no project, written by fleet staff only), and never another project's. A
ClusterWorkflowTemplate is fleet-wide by nature, so it is never a project's.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet

from placement import parser
from placement.parser import FieldError, WorkflowInvalid
from portal.models import WorkflowTemplate
from sites.models import Project
from sites.permissions import can_write_project_data, is_fleet_staff

CLUSTER_KIND = "ClusterWorkflowTemplate"


class CatalogueRefused(Exception):
    """A catalogue write the user may not make (answered 403)."""


def catalogue_for(project: Project | None, kind: str = "WorkflowTemplate") -> dict[str, Any]:
    """``{name: manifest}`` that a run of ``project`` resolves ``templateRef``s of ``kind``
    against: the fleet-wide entries, replaced by the project's own of the same name. A
    ClusterWorkflowTemplate resolves among the fleet-wide entries only."""
    rows = WorkflowTemplate.objects.filter(project__isnull=True)
    if project is not None and kind != CLUSTER_KIND:
        rows = WorkflowTemplate.objects.filter(Q(project__isnull=True) | Q(project=project))
    found: dict[str, Any] = {}
    # Fleet-wide first, so the project's own entry of the same name wins.
    for name, manifest, owner in rows.order_by("project_id").values_list(
        "name", "manifest", "project_id"
    ):
        if not isinstance(manifest, dict) or manifest.get("kind", kind) != kind:
            continue
        if owner is None and name in found:
            continue
        found[name] = manifest
    return found


def templates_visible_to(user: Any) -> QuerySet[WorkflowTemplate]:
    """Fleet staff see every entry; others the fleet-wide ones and those of their projects."""
    rows = WorkflowTemplate.objects.select_related("project")
    if is_fleet_staff(user):
        return rows
    if not user.is_authenticated:
        return rows.none()
    return rows.filter(Q(project__isnull=True) | Q(project__members=user)).distinct()


def template_pick(rows: QuerySet[WorkflowTemplate], project: str | None) -> WorkflowTemplate:
    """The one of ``rows`` (entries of one name the user can see) a request means: the given
    project's (``""``: the fleet-wide one), else the only project entry, else the fleet-wide
    one, as a run resolves. Raises ``WorkflowTemplate.DoesNotExist`` or ``WorkflowInvalid``
    when the name is in several of the user's projects and no project was given."""
    if project is not None:
        picked = (
            rows.filter(project__isnull=True)
            if project == ""
            else rows.filter(project__name=project)
        )
        return picked.get()
    entries = list(rows[:3])
    own = [t for t in entries if t.project_id is not None]
    if len(own) > 1:
        projects = ", ".join(sorted(t.project.name for t in own if t.project))
        raise WorkflowInvalid(
            [
                FieldError(
                    "project",
                    f"{own[0].name!r} is in several of your projects ({projects}); "
                    "say which with ?project=<name> (?project= for the fleet-wide one)",
                )
            ]
        )
    if own:
        return own[0]
    if entries:
        return entries[0]
    raise WorkflowTemplate.DoesNotExist


def _check_write(user: Any, project: Project | None, kind: str) -> None:
    if kind == CLUSTER_KIND and project is not None:
        raise WorkflowInvalid(
            [
                FieldError(
                    "project",
                    "a ClusterWorkflowTemplate is fleet-wide: it belongs to no project "
                    "(only fleet staff write it); for a template of your project, use "
                    "kind: WorkflowTemplate",
                )
            ]
        )
    if not can_write_project_data(user, project):
        raise CatalogueRefused(
            f"Only fleet staff may write fleet-wide {'Cluster' if kind == CLUSTER_KIND else ''}"
            "WorkflowTemplates."
            if project is None
            else f"You are not a member of project '{project.name}'."
        )


def _project(project: Project | str | None) -> Project | None:
    if isinstance(project, Project):
        return project
    if not project:
        return None
    obj = Project.objects.filter(name=project).first()
    if obj is None:
        raise WorkflowInvalid([FieldError("project", f"unknown project: {project}")])
    return obj


def _taken(name: str, project: Project | None) -> WorkflowInvalid:
    where = f"project {project.name!r}" if project else "the fleet-wide catalogue"
    return WorkflowInvalid(
        [
            FieldError(
                "metadata.name",
                f"a WorkflowTemplate named {name!r} is in {where} already; "
                f"replace it with PUT /api/v1/workflow-templates/{name}/",
            )
        ]
    )


def workflow_template_create(
    *,
    user: Any,
    body: str | bytes | dict[str, Any],
    project: Project | str | None = None,
    limits: parser.Limits = parser.DEFAULT_LIMITS,
) -> WorkflowTemplate:
    """Add a WorkflowTemplate (or ClusterWorkflowTemplate) to the catalogue, validated as the
    parser will read it when a workflow ``templateRef``s it."""
    entry = parser.parse_workflow_template(body, limits)
    proj = _project(project)
    _check_write(user, proj, str(entry.document.get("kind")))
    try:
        with transaction.atomic():
            return WorkflowTemplate.objects.create(
                name=entry.name, project=proj, manifest=dict(entry.document)
            )
    except IntegrityError:
        raise _taken(entry.name, proj) from None


def workflow_template_update(
    *,
    template: WorkflowTemplate,
    user: Any,
    body: str | bytes | dict[str, Any],
    project: Project | str | None = None,
    limits: parser.Limits = parser.DEFAULT_LIMITS,
) -> WorkflowTemplate:
    """Replace a catalogue entry's manifest (and, with ``project``, move it). Runs already
    submitted keep the templates they were compiled with."""
    entry = parser.parse_workflow_template(body, limits)
    if entry.name != template.name:
        raise WorkflowInvalid(
            [FieldError("metadata.name", f"must be {template.name!r}, the name in the URL")]
        )
    kind = str(entry.document.get("kind"))
    _check_write(user, template.project, kind)
    if project is not None:
        template.project = _project(project)
    _check_write(user, template.project, kind)
    template.manifest = dict(entry.document)
    try:
        with transaction.atomic():
            template.save(update_fields=["manifest", "project"])
    except IntegrityError:
        raise _taken(entry.name, template.project) from None
    return template


def workflow_template_delete(*, template: WorkflowTemplate, user: Any) -> None:
    _check_write(user, template.project, "")
    template.delete()
