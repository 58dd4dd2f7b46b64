"""Reads of quota admission the webhook may make: this module loads no gateway, no worker
(the webhook's decision path must not; ``tests/portal/test_import_rules.py``)."""

from __future__ import annotations

from collections.abc import Iterable
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
    return admitted_sites_of([unit]).get(unit.pk)


def admitted_sites_of(units: Iterable[UnitRun]) -> dict[int, list[str] | None]:
    """``admitted_sites`` of many units in one query, by pk (a runtime unit only: the others
    are absent, None for ``get``). A chunk of a runtime fan-out reads its units' at once: two
    queries per unit were a third of what building its step workflows cost."""
    runtime = {u.pk: u for u in units if not u.site and u.timing == UnitTiming.RUNTIME}
    found: dict[int, Any] = {}
    rows = Workload.objects.filter(
        unit_id__in=list(runtime), site="", admitted_at__isnull=False
    ).values_list("unit_id", "attempt", "sites")
    for unit_id, attempt, sites in rows.order_by("pk"):  # the first row, as ``first()``
        if attempt == runtime[unit_id].attempt and unit_id not in found:
            found[unit_id] = sites
    return {pk: list(found[pk]) if found.get(pk) else None for pk in runtime}
