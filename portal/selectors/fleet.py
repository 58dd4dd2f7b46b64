"""Reads for the fleet pages: sites and what runs on them, datasets with their replicas, site
links, and what the last policy sync could not write."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.core.cache import cache
from django.db.models import Count, Q, QuerySet

from portal.choices import UnitPhase
from portal.models import UnitRun
from portal.selectors import runs_visible_to
from sites.models import DatasetReplica, Site, SiteLink
from sites.selectors import dataset_list_visible

# Where the policy sync keeps the fallback policy's error (a site's is on its row).
FLEET_POLICY_ERROR_KEY = "policy-sync:fleet-error"
# At most this many running units are read for the fleet page's "your units" column.
RUNNING_READ = 500


def policy_errors() -> dict[str, str]:
    """What the last policy sync could not write, by site ("" for the fallback policy)."""
    found = dict(Site.objects.exclude(policy_error="").values_list("name", "policy_error"))
    fleet = cache.get(FLEET_POLICY_ERROR_KEY)
    if fleet:
        found[""] = str(fleet)
    return found


def site_names() -> list[str]:
    return list(Site.objects.values_list("name", flat=True))


def sites_all() -> list[Site]:
    return list(Site.objects.all())


def site_get(name: str) -> Site:
    """The site named ``name`` (raises ``Site.DoesNotExist``)."""
    return Site.objects.get(name=name)


def running_by_site(user: Any) -> dict[str, list[UnitRun]]:
    """The running units ``user`` may see, by site (at most ``RUNNING_READ`` in all)."""
    visible = runs_visible_to(user).values("pk")
    units = (
        UnitRun.objects.filter(phase=UnitPhase.RUNNING, run__in=visible)
        .exclude(site="")
        .select_related("run")
        .order_by("site", "started_at", "id")
    )
    by_site: dict[str, list[UnitRun]] = defaultdict(list)
    for u in units[:RUNNING_READ]:
        by_site[u.site].append(u)
    return by_site


def running_counts() -> dict[str, int]:
    """How many units run at each site, whoever's."""
    rows = (
        UnitRun.objects.filter(phase=UnitPhase.RUNNING)
        .exclude(site="")
        .values("site")
        .annotate(n=Count("pk"))
    )
    return {r["site"]: r["n"] for r in rows}


def site_running_units(user: Any, site: Site) -> QuerySet[UnitRun]:
    """The units running at ``site`` that ``user`` may see, oldest first."""
    visible = runs_visible_to(user).values("pk")
    return (
        UnitRun.objects.filter(site=site.name, phase=UnitPhase.RUNNING, run__in=visible)
        .select_related("run")
        .order_by("started_at", "id")
    )


def site_links(site: Site) -> tuple[list[SiteLink], list[SiteLink]]:
    """The links out of ``site`` and into it."""
    links = SiteLink.objects.filter(Q(source=site) | Q(target=site)).select_related(
        "source", "target"
    )
    return (
        [lk for lk in links if lk.source_id == site.pk],
        [lk for lk in links if lk.target_id == site.pk],
    )


def site_replicas_visible(user: Any, site: Site) -> QuerySet[DatasetReplica]:
    """The replicas at ``site`` of the datasets ``user`` may see, by dataset name."""
    return (
        site.replicas.filter(dataset__in=dataset_list_visible(user).values("pk"))
        .select_related("dataset")
        .order_by("dataset__name")
    )


def replicas_by_site(user: Any, sites: list[Site]) -> list[dict[str, Any]]:
    """Each dataset ``user`` may see (the API's selector: the page shows exactly what the API
    would list), with its replica at each of ``sites`` or None."""
    datasets = list(dataset_list_visible(user).order_by("name"))
    return [
        {
            "dataset": d,
            "by_site": [
                next((r for r in d.replicas.all() if r.site_id == s.pk), None) for s in sites
            ],
        }
        for d in datasets
    ]
