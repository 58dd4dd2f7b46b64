"""Filters of the runs list, shared by the browser page and (later) ``GET /api/v1/runs/``."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest

from portal.choices import RunStatus
from portal.models import UnitRun, WorkflowRun
from portal.selectors import projects_of
from sites.models import Project, Site


def _projects(request: HttpRequest | None) -> QuerySet[Project]:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return Project.objects.none()
    return projects_of(user)


class WorkflowRunFilterSet(django_filters.FilterSet):
    """``status`` (a RunStatus), ``site`` (runs with a unit at that site, by name), ``project``
    (by name; only projects the user sees are offered)."""

    status = django_filters.ChoiceFilter(choices=RunStatus.choices, empty_label="Any status")
    site = django_filters.ModelChoiceFilter(
        queryset=Site.objects.all(),
        to_field_name="name",
        method="filter_site",
        empty_label="Any site",
        label="Site",
    )
    project = django_filters.ModelChoiceFilter(
        queryset=_projects,
        to_field_name="name",
        empty_label="Any project",
        label="Project",
    )

    class Meta:
        model = WorkflowRun
        fields = ["status", "site", "project"]

    def filter_site(
        self, queryset: QuerySet[WorkflowRun], name: str, value: Any
    ) -> QuerySet[WorkflowRun]:
        if not value:
            return queryset
        site_name = value.name if isinstance(value, Site) else str(value)
        return queryset.filter(Exists(UnitRun.objects.filter(run=OuterRef("pk"), site=site_name)))
