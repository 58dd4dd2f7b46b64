"""Reads for runs: who may see what."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

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
