"""Reads of the inventory, filtered by who is asking."""

from __future__ import annotations

from datetime import timedelta

from django.apps import apps
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from sites.models import Dataset, DatasetReplica, Project, Site
from sites.permissions import AnyUser, is_fleet_staff


def site_list() -> QuerySet[Site]:
    return Site.objects.all()


def site_recent_runs(site: Site, *, hours: float) -> int:
    """How many runs have a unit placed (or planned) at ``site`` and are active or finished
    less than ``hours`` ago: the runs whose outputs the site's artifact store holds. The runs
    are the portal app's, looked up by name: the inventory does not import the portal."""
    unit_run = apps.get_model("portal", "UnitRun")
    since = timezone.now() - timedelta(hours=hours)
    units = unit_run.objects.filter(Q(site=site.name) | Q(planned_site=site.name)).filter(
        Q(run__finished_at__isnull=True) | Q(run__finished_at__gte=since)
    )
    return int(units.values("run_id").distinct().count())


def sites_operated_by(user: AnyUser) -> QuerySet[Site]:
    if not user.is_authenticated:
        return Site.objects.none()
    return Site.objects.filter(operators=user)


def projects_of(user: AnyUser) -> QuerySet[Project]:
    if not user.is_authenticated:
        return Project.objects.none()
    return Project.objects.filter(members=user)


def dataset_list_visible(user: AnyUser) -> QuerySet[Dataset]:
    """Fleet staff see every dataset; others see fleet-wide datasets (no project), those of their
    projects and those with a replica at a site they operate."""
    datasets = Dataset.objects.select_related("project").prefetch_related("replicas__site")
    if is_fleet_staff(user):
        return datasets
    if not user.is_authenticated:
        return datasets.none()
    at_my_site = DatasetReplica.objects.filter(dataset=OuterRef("pk"), site__operators=user)
    mine = Project.objects.filter(pk=OuterRef("project_id"), members=user)
    return datasets.filter(Q(project__isnull=True) | Exists(mine) | Exists(at_my_site))
