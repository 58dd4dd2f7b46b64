"""Admission of the units placed at submission: at their site, against every quota covering
it, in queue order."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from portal.models import UnitRun, WorkflowRun
from portal.quotas import admission
from portal.quotas.admission import Amount, SiteQuotas
from portal.quotas.fairness import Waiter, behind, heads, why_it_waits
from portal.quotas.holdings import request_of
from portal.quotas.models import Workload
from portal.quotas.priorities import run_priority
from portal.quotas.queue import (
    WORKLOAD_FIELDS,
    lock_groups,
    lock_site,
    queue_key,
    say_queued,
    waiting,
)
from portal.quotas.scopes import groups, scopes_at


@dataclass
class _Line:
    """A project's walk down its queue at a site, its units in queue order: its own units
    queued ahead of the one deciding (``others``, passed in order into ``ahead``), the other
    projects' heads, and the quotas counted forward as units are admitted. Behind one that
    waits (``blocked``), a few more are tried (``LOOKAHEAD``); the rest wait."""

    project: str
    site: str
    priority: int
    quotas: list[SiteQuotas]
    others: list[Workload]
    heads: dict[str, Waiter]
    passed: int = 0
    ahead: dict[tuple[int, Amount], None] = field(default_factory=dict)
    blocked: str | None = None
    tried: int = 0

    def decide(self, key: tuple[int, datetime, int], request: Amount) -> str | None:
        """Why the unit at ``key`` in the queue, asking for ``request``, waits (None: it is
        admitted, and holds its request from now on)."""
        while self.passed < len(self.others) and queue_key(self.others[self.passed]) < key:
            w = self.others[self.passed]
            self.ahead[(w.priority, Amount(w.cpu_millicores, w.memory_bytes, w.gpus))] = None
            self.passed += 1
        if self.blocked is not None:
            self.tried += 1
        if self.blocked is not None and self.tried > admission.LOOKAHEAD:
            why: str | None = self.blocked
        else:
            why = why_it_waits(
                self.project,
                self.site,
                self.priority,
                request,
                self.quotas,
                self.ahead,
                self.heads,
                self.blocked,
            )
        if why is None:
            self.quotas = admission.admit_all(self.quotas, self.project, request)
        else:
            self.blocked = self.blocked or behind(why, self.project, self.site)
        return why


def _line(
    project: str, site: str, priority: int, units: list[UnitRun], quotas: list[SiteQuotas]
) -> _Line:
    """The queue at ``site`` besides ``units``: this project's part of it that is not ours, in
    its order (what is ahead of ours), and the other projects' heads."""
    ours = {u.pk for u in units}
    queue = list(waiting().filter(site=site).exclude(unit_id__in=ours).select_related("project"))
    others = sorted((w for w in queue if w.project.name == project), key=queue_key)
    return _Line(project, site, priority, quotas, others, heads(queue, project))


def _unit_key(
    u: UnitRun, w: Workload | None, priority: int, now: datetime
) -> tuple[int, datetime, int]:
    """``u``'s place in the queue: where its row waits, else behind everything queued now."""
    if w is not None and w.admitted_at is None and w.attempt == u.attempt:
        return (-priority, w.queued_at, w.pk)
    return (-priority, now, 2**61 + u.position)


def admit_at(run: WorkflowRun, site: str, units: list[UnitRun]) -> set[int]:
    """Admit ``units`` of ``run`` at ``site`` against its quotas, in queue order, under the
    site's (and its groups') locks: the ids of those admitted; the others wait, each saying
    why."""
    project = run.project.name if run.project else ""
    _, priority = run_priority(run)
    now = timezone.now()
    taken: set[int] = set()
    reasons: dict[int, str] = {}
    with transaction.atomic():
        all_groups = groups()
        lock_site(site)
        lock_groups(g for g in all_groups if site in g.sites)
        existing = {w.unit_id: w for w in Workload.objects.filter(unit__in=units)}
        line = _line(project, site, priority, units, scopes_at(site, all_groups))
        create: list[Workload] = []
        update: list[Workload] = []
        for u in sorted(units, key=lambda u: _unit_key(u, existing.get(u.pk), priority, now)):
            w = existing.get(u.pk)
            if (
                w is not None
                and w.admitted_at is not None
                and w.attempt == u.attempt
                and w.site == u.site
            ):
                taken.add(u.pk)  # admitted before, not created yet
                continue
            request = request_of(u)
            why = line.decide(_unit_key(u, w, priority, now), request)
            if why is None:
                taken.add(u.pk)
                fields: dict[str, Any] = {"admitted_at": now, "reason": "", "released_at": None}
            else:
                fields = {"admitted_at": None, "reason": why}
                reasons[u.pk] = why
            row, changed = _site_row(w, u, run, priority, request, now, fields)
            if w is None:
                create.append(row)
            elif changed:
                update.append(row)
        Workload.objects.bulk_create(create, batch_size=500)
        Workload.objects.bulk_update(update, WORKLOAD_FIELDS, batch_size=500)
    say_queued(units, taken, reasons)
    return taken


def _site_row(
    w: Workload | None,
    u: UnitRun,
    run: WorkflowRun,
    priority: int,
    request: Amount,
    now: datetime,
    fields: Mapping[str, Any],
) -> tuple[Workload, bool]:
    """``u``'s Workload row at its site (``w``, or a new one) with ``fields`` written, and
    whether they changed it."""
    project_id = int(run.project_id or 0)
    row = w or Workload(unit=u, run_id=run.pk, project_id=project_id, queued_at=now)
    if w is not None and (w.attempt != u.attempt or w.site != u.site):
        row.queued_at = now
    row.site, row.attempt, row.priority = u.site, u.attempt, priority
    row.cpu_millicores, row.memory_bytes, row.gpus = request.cpu, request.memory, request.gpu
    changed = w is None or any(getattr(w, k) != v for k, v in fields.items())
    for k, v in fields.items():
        setattr(row, k, v)
    return row, changed
