"""Reads of quota admission the webhook may make: this module loads no gateway, no worker
(the webhook's decision path must not; ``tests/portal/test_import_rules.py``)."""

from __future__ import annotations

from typing import Any

from django.db.models import OuterRef, Subquery

from portal.choices import UnitTiming
from portal.models import UnitRun
from portal.quotas.models import Workload


def quota_sites_of_unit() -> Any:
    """``admitted_sites`` as a subquery to annotate a unit query with (the webhook reads the
    unit in one query): the list, or null."""
    return Subquery(
        Workload.objects.filter(
            unit_id=OuterRef("pk"),
            attempt=OuterRef("attempt"),
            site="",
            admitted_at__isnull=False,
        ).values("sites")[:1]
    )


def admitted_sites(unit: UnitRun) -> list[str] | None:
    """The sites a runtime unit was admitted for (the webhook and the fallback site choose
    among them); None when no quota admitted it (any site)."""
    if unit.site or unit.timing != UnitTiming.RUNTIME:
        return None
    found = (
        Workload.objects.filter(
            unit_id=unit.pk, attempt=unit.attempt, site="", admitted_at__isnull=False
        )
        .values_list("sites", flat=True)
        .first()
    )
    return list(found) if found else None
