"""Which quotas govern where: a site's own quotas and those of the groups of sites a quota names
by their labels, each with its limits by project and what each project holds under it."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from portal.quotas.admission import Amount, Limit, SiteQuotas
from portal.quotas.holdings import used_at, used_over
from portal.quotas.models import Quota, group_name, selects
from sites.models import Site


def governed() -> bool:
    """Whether any quota exists (without one, every unit passes)."""
    return Quota.objects.exists()


def _limits_of(quotas: Any) -> dict[str, Limit]:
    """The limits of ``quotas`` (a query of ``Quota``) by project name."""
    out = {}
    for q in quotas.select_related("project__fleet_share"):
        share = getattr(q.project, "fleet_share", None)
        out[q.project.name] = Limit(
            nominal=Amount(q.cpu_millicores, q.memory_bytes, q.gpus),
            borrowing=(q.borrow_cpu_millicores, q.borrow_memory_bytes, q.borrow_gpus),
            weight=share.weight if share is not None else Decimal(1),
        )
    return out


def _limits(site: str) -> dict[str, Limit]:
    return _limits_of(Quota.objects.filter(site__name=site))


def site_quotas(site: str) -> SiteQuotas:
    return SiteQuotas(site, _limits(site), used_at(site))


@dataclass(frozen=True)
class Group:
    """A group of sites a quota names by its labels."""

    selector: dict[str, str]
    sites: tuple[str, ...]

    @property
    def name(self) -> str:
        return group_name(self.selector)


def site_labels() -> dict[str, dict[str, str]]:
    return {
        name: (labels if isinstance(labels, dict) else {})
        for name, labels in Site.objects.values_list("name", "labels").order_by()
    }


def groups(labels: Mapping[str, Any] | None = None) -> list[Group]:
    """Every group some quota names, with its sites now (a site labelled later joins it)."""
    selectors: dict[str, dict[str, str]] = {}
    for sel in Quota.objects.filter(site__isnull=True).values_list("site_selector", flat=True):
        if isinstance(sel, dict) and sel:
            selectors[json.dumps(sel, sort_keys=True)] = sel
    if not selectors:
        return []
    labels = site_labels() if labels is None else labels
    return [
        Group(sel, tuple(sorted(n for n, lab in labels.items() if selects(sel, lab))))
        for _, sel in sorted(selectors.items())
    ]


def group_quotas(group: Group) -> SiteQuotas:
    """A group's quotas (by project) and what each project holds across its sites."""
    limits = _limits_of(Quota.objects.filter(site__isnull=True, site_selector=group.selector))
    return SiteQuotas(group.name, limits, used_over(group.sites))


def scopes_at(site: str, all_groups: Sequence[Group] | None = None) -> list[SiteQuotas]:
    """Every quota that covers ``site``: its own, then those of the groups it is in."""
    found = groups() if all_groups is None else all_groups
    return [site_quotas(site)] + [group_quotas(g) for g in found if site in g.sites]


def scopes_covering(
    sites: Sequence[str], all_groups: Sequence[Group]
) -> tuple[dict[str, SiteQuotas], dict[str, list[str]]]:
    """Each quota once by name (a site's, a group's), shared by the sites it covers; and for
    each site, the names of the quotas covering it."""
    scopes: dict[str, SiteQuotas] = {}
    covering: dict[str, list[str]] = {}
    for site in sites:
        for q in scopes_at(site, all_groups):
            scopes.setdefault(q.site, q)
            covering.setdefault(site, []).append(q.site)
    return scopes, covering


def sites_with_groups(sites: Iterable[str]) -> set[str]:
    """``sites`` and every site sharing a quota'd group with one of them: where quota freed
    at ``sites`` may let a unit in."""
    out = set(sites)
    for g in groups():
        if out.intersection(g.sites):
            out.update(g.sites)
    return out


def governed_sites(project_id: int, all_groups: Sequence[Group] | None = None) -> set[str]:
    """The sites where some quota limits the project: its own sites and its groups' sites."""
    out = set(
        Quota.objects.filter(project_id=project_id, site__isnull=False).values_list(
            "site__name", flat=True
        )
    )
    mine = [
        sel
        for sel in Quota.objects.filter(project_id=project_id, site__isnull=True).values_list(
            "site_selector", flat=True
        )
        if isinstance(sel, dict) and sel
    ]
    if mine:
        for g in groups() if all_groups is None else all_groups:
            if g.selector in mine:
                out.update(g.sites)
    return out


def quota_sites(quota: Quota) -> list[str]:
    """The sites a quota covers now: its site, or its group's."""
    if quota.site_id is not None and quota.site is not None:
        return [quota.site.name]
    sel = quota.site_selector if isinstance(quota.site_selector, dict) else {}
    return sorted(n for n, labels in site_labels().items() if selects(sel, labels))
