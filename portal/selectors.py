"""Reads for runs: who may see what."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone

from placement import manifests
from placement.manifests import GlobalOutputs
from portal.models import WorkflowRun
from sites.models import Project


def runs_visible_to(user: Any) -> QuerySet[WorkflowRun]:
    """Staff see every run; others the runs they own and those of their projects."""
    runs = WorkflowRun.objects.select_related("project", "owner")
    if not user.is_authenticated:
        return runs.none()
    if user.is_staff:
        return runs
    return runs.filter(Q(owner=user) | Q(project__members=user)).distinct()


def projects_of(user: Any) -> QuerySet[Project]:
    if user.is_staff:
        return Project.objects.all()
    return Project.objects.filter(members=user)


def run_global_outputs(run: WorkflowRun, units: Iterable[Any] | None = None) -> GlobalOutputs:
    """The run's global outputs (``globalName``) from its ended units, in the order they ended
    (a later value wins, as in Argo). ``units`` defaults to the run's (prefetched) units."""
    rows = list(run.units.all() if units is None else units)
    ended = sorted(
        (u for u in rows if u.phase == "Succeeded" or (u.outputs and u.finished_at)),
        key=lambda u: (u.finished_at is None, u.finished_at or run.created_at, u.pk or 0),
    )
    templates = (run.compiled or {}).get("templates") or {}
    return manifests.global_outputs(
        [
            (u.outputs or {}, templates.get((u.spec or {}).get("template") or u.template))
            for u in ended
        ]
    )


def run_variables_of(run: WorkflowRun, units: Iterable[Any], *, namespace: str) -> dict[str, str]:
    """``{{workflow.name}}``, ``uid``, ``labels.x`` ... with the run's values (issue 18.10).
    The uid is derived from the run (stable, unique), so no migration is needed for it."""
    c = run.compiled
    created = run.created_at or timezone.now()
    started = run.started_at or created
    failures = [
        {
            "displayName": u.name,
            "message": u.message,
            "templateName": u.template,
            "phase": u.phase,
            "podName": u.workflow_name,
            "finishedAt": u.finished_at.strftime("%Y-%m-%dT%H:%M:%SZ") if u.finished_at else None,
        }
        for u in units
        if u.phase in ("Failed", "Error")
    ]
    return manifests.run_variables(
        name=run.name,
        namespace=c.get("namespace") or namespace,
        uid=str(uuid.uuid5(uuid.NAMESPACE_URL, f"portal-run:{run.pk}:{run.name}")),
        created=created,
        labels=c.get("labels") or {},
        annotations=c.get("annotations") or {},
        duration_seconds=max(0.0, (timezone.now() - started).total_seconds()),
        failures=failures,
    )
