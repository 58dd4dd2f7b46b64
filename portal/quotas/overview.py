"""What the pages show of the quotas: a queued unit's place and reason, and every quota with
what is held and queued under it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from portal.choices import UnitPhase
from portal.models import UnitRun
from portal.quotas.admission import Amount
from portal.quotas.holdings import used_over
from portal.quotas.models import Quota, selects
from portal.quotas.queue import waiting
from portal.quotas.scopes import governed, site_labels


@dataclass(frozen=True)
class QueueEntry:
    position: int
    reason: str


def queue_of(units: Sequence[UnitRun]) -> dict[int, QueueEntry]:
    """For each queued unit of ``units`` (by id): its position in its project's queue at its
    site (1: next) and why it waits. Nothing waits where no quota exists: no read of the queue
    then (a 10,000-unit run's answer names its units in one array, ``__any``, when one does)."""
    pending = [u.pk for u in units if u.phase == UnitPhase.PENDING and not u.workflow_name]
    if not pending or not governed():
        return {}
    mine = {
        w.unit_id: w
        for w in waiting()
        .filter(unit_id__any=pending)
        .only("unit_id", "site", "project_id", "reason")
    }
    if not mine:
        return {}
    # One read of each queue concerned, in its order: a position is an index, not a count
    # per unit (which would be a query per queued tile of the run page).
    queues = {(w.site, w.project_id) for w in mine.values()}
    out: dict[int, QueueEntry] = {}
    for site, project_id in queues:
        order = (
            waiting()
            .filter(site=site, project_id=project_id)
            .order_by("-priority", "queued_at", "id")
            .values_list("unit_id", flat=True)
        )
        for position, unit_id in enumerate(order.iterator(chunk_size=5000), start=1):
            w = mine.get(unit_id)
            if w is not None:
                out[unit_id] = QueueEntry(position=position, reason=w.reason)
    return out


def quota_rows() -> list[dict[str, Any]]:
    """Every quota with what its project holds at its site (or across its group's sites) now,
    and how many of its units wait there."""
    labels = site_labels()
    # Which units wait where (a runtime one at each site it waits for, counted once per
    # quota however many of its sites the quota covers).
    queued_at: dict[tuple[str, str], set[int]] = {}
    for r in waiting().values("pk", "site", "sites", "project__name").order_by():
        for site in [r["site"]] if r["site"] else list(r["sites"] or ()):
            queued_at.setdefault((site, r["project__name"]), set()).add(r["pk"])
    cache: dict[tuple[str, ...], dict[str, Amount]] = {}
    rows = []
    for q in Quota.objects.select_related("project", "site"):
        if q.site_id is not None and q.site is not None:
            members: tuple[str, ...] = (q.site.name,)
        else:
            sel = q.site_selector if isinstance(q.site_selector, dict) else {}
            members = tuple(sorted(n for n, lab in labels.items() if selects(sel, lab)))
        if members not in cache:
            cache[members] = used_over(members)
        rows.append(
            {
                "quota": q,
                "where": q.where,
                "sites": list(members),
                "used": cache[members].get(q.project.name, Amount()),
                "queued": len(
                    set().union(*(queued_at.get((s, q.project.name), set()) for s in members))
                ),
            }
        )
    return rows
