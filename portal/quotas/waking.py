"""Waking the runs that wait for quota once some frees (a unit ends, moves, or is placed) or a
quota changes."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from portal.choices import FINAL_UNIT, UnitTiming
from portal.models import WorkflowRun
from portal.quotas.models import Workload
from portal.quotas.queue import waiting
from portal.quotas.scopes import sites_with_groups

log = logging.getLogger(__name__)


def wake(run: WorkflowRun) -> list[int]:
    """Runs with units queued where units of ``run`` just freed quota: called from the
    advance that follows a unit's end, so queued units are admitted as quota frees, not at
    the next resync. Freed: at the site of a unit that ended or moved (for a unit placed at
    run time, where the webhook placed it and every site it was admitted for), at the sites
    a runtime unit was admitted for and not placed at once it is placed, and at every site
    sharing a quota'd group with those. Returns their ids (the caller asks for their
    advance)."""
    mine = Workload.objects.filter(
        run_id=run.pk, admitted_at__isnull=False, released_at__isnull=True
    )
    freed = mine.filter(Q(unit__phase__in=list(FINAL_UNIT)) | ~Q(unit__attempt=F("attempt")))
    sites: set[str] = set()
    for site, unit_site, where in freed.values_list("site", "unit__site", "sites"):
        sites.update(s for s in (site, unit_site, *(where or ())) if s)
    ended = list(freed.values_list("pk", flat=True))
    # Placed by the webhook: what it held at the other sites it was admitted for is free.
    narrowed: list[tuple[int, str]] = []
    for pk, unit_site, where in (
        mine.filter(site="", unit__timing=UnitTiming.RUNTIME, unit__attempt=F("attempt"))
        .exclude(unit__site="")
        .exclude(pk__in=ended)
        .values_list("pk", "unit__site", "sites")
    ):
        others = [s for s in where or () if s != unit_site]
        if others:
            sites.update(others)
            narrowed.append((pk, unit_site))
    for pk, unit_site in narrowed:
        Workload.objects.filter(pk=pk).update(sites=[unit_site])
    if not sites:
        return []
    if ended:
        Workload.objects.filter(pk__in=ended).update(released_at=timezone.now())
    return sorted(set(queued_runs_in(sites_with_groups(sites))) - {run.pk})


def queued_runs_in(sites: Iterable[str]) -> list[int]:
    """Runs with units queued at ``sites``, or (placed at run time) for one of them."""
    names = sorted(set(sites))
    if not names:
        return []
    where = Q(site__in=names)
    for name in names:
        where |= Q(site="", sites__contains=[name])
    return sorted(set(waiting().filter(where).values_list("run_id", flat=True).distinct()))


def quota_changed_at(sites: Iterable[str]) -> None:
    """A quota covering ``sites`` changed: the runs queued there (or, placed at run time,
    for one of them) are advanced once the change is committed."""
    from portal.controller import workqueue

    names = sorted(set(sites))

    def wake_them() -> None:
        for run_id in queued_runs_in(names):
            try:
                workqueue.add(run_id)
            except Exception:  # noqa: BLE001 - broker down: the resync advances waiting runs
                log.warning("could not wake run %s queued for quota", run_id, exc_info=True)

    transaction.on_commit(wake_them)
