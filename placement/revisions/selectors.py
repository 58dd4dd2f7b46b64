"""Reading revisions and the configuration the tables hold now."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from placement.choices import RevisionState
from placement.models import PlacementRule
from placement.revisions import config as cfg
from placement.revisions.models import RuleRevision
from sites.models import Dataset, Site, SiteLink


def active_revision(*, for_update: bool = False) -> RuleRevision | None:
    """The revision applied last (None before the first one)."""
    qs = RuleRevision.objects.filter(state=RevisionState.APPLIED)
    if for_update:
        qs = qs.select_for_update()
    return qs.order_by("-applied_at", "-id").first()


def active_revision_id() -> int | None:
    return (
        RuleRevision.objects.filter(state=RevisionState.APPLIED)
        .order_by("-applied_at", "-id")
        .values_list("pk", flat=True)
        .first()
    )


def revisions_list() -> QuerySet[RuleRevision]:
    return RuleRevision.objects.select_related("author", "approved_by", "applied_by").order_by(
        "-id"
    )


def inventory_names() -> tuple[set[str], set[str]]:
    return (
        set(Site.objects.values_list("name", flat=True)),
        set(Dataset.objects.values_list("name", flat=True)),
    )


def current_config() -> dict[str, Any]:
    """The configuration the tables hold, canonical."""
    rules = [
        {f: getattr(r, f) for f in cfg.RULE_FIELDS}
        for r in PlacementRule.objects.order_by("order", "name")
    ]
    sites = [
        {
            "name": s.name,
            "cordoned": s.cordoned,
            "labels": dict(s.labels or {}),
            "capabilities": list(s.capabilities or []),
            "overrides": dict(s.overrides or {}),
        }
        for s in Site.objects.order_by("name")
    ]
    datasets = [
        {"name": name, "residency": list(residency or [])}
        for name, residency in Dataset.objects.order_by("name").values_list("name", "residency")
    ]
    links = [
        {
            "source": src,
            "target": dst,
            "bandwidth_mbps": float(bw),
            "cost_per_gb": float(cost),
            "latency_ms": float(lat),
            "artifacts_reachable": bool(reachable),
        }
        for src, dst, bw, cost, lat, reachable in SiteLink.objects.values_list(
            "source__name",
            "target__name",
            "bandwidth_mbps",
            "cost_per_gb",
            "latency_ms",
            "artifacts_reachable",
        )
    ]
    return cfg.canonical(
        {
            "schema": cfg.SCHEMA_VERSION,
            "rules": rules,
            "sites": sites,
            "datasets": datasets,
            "links": links,
        }
    )
