"""Reads for runs: who may see what."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Q, QuerySet

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
