"""Admission of the units placed at run time, as Kueue assigns a flavor: for the eligible
sites where their quotas have room, among which the webhook then chooses."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from placement.context import PLANNED_UNIT_KEYS
from portal.models import UnitRun, WorkflowRun
from portal.quotas import admission
from portal.quotas.admission import Amount, SiteQuotas
from portal.quotas.holdings import request_of
from portal.quotas.models import Workload
from portal.quotas.priorities import run_priority
from portal.quotas.queue import WORKLOAD_FIELDS, lock_groups, lock_site, say_queued, waiting
from portal.quotas.scopes import Group, scopes_covering


def eligible_sites(
    run: WorkflowRun, unit: UnitRun, units: Sequence[UnitRun]
) -> tuple[list[str], set[str]]:
    """The sites a runtime unit may go to by every hard constraint, best first (the
    planner's order), and those of them with room for it now (as the webhook decides):
    the sites the quota admission chooses among."""
    from portal.controller.submit import runtime_decision  # the controller imports us

    units = list(units)
    rows = [c for c in runtime_decision(run, unit, units).candidates if c.eligible]
    rows.sort(key=lambda c: -(c.score or 0.0))
    now = runtime_decision(run, unit, units, strict_capacity=True)
    return [c.site for c in rows], {c.site for c in now.candidates if c.eligible}


def admit_runtime(
    run: WorkflowRun,
    units: list[UnitRun],
    every: Sequence[UnitRun],
    quota_sites: set[str],
    all_groups: Sequence[Group],
) -> set[int]:
    """Admit runtime units as Kueue assigns a flavor: among the eligible sites (its
    flavors), those where every quota covering the site has room; the unit then holds its
    request at each of them until the webhook places it at one. No eligible site with room:
    queued, with the reason at its best eligible site. One transaction for the run's units,
    the quotas read once and counted forward in memory as units are admitted."""
    project = run.project.name if run.project else ""
    _, priority = run_priority(run)
    ordered = sorted(units, key=lambda u: u.position)
    where = _eligible_by_unit(run, ordered, every)
    governed_here = sorted({s for e, _ in where.values() for s in e} & quota_sites)
    reasons: dict[int, str] = {}
    now = timezone.now()
    with transaction.atomic():
        for site in governed_here:
            lock_site(site)
        lock_groups(g for g in all_groups if set(governed_here) & set(g.sites))
        existing = {w.unit_id: w for w in Workload.objects.filter(unit__in=units)}
        taken = _still_admitted(ordered, existing, where)
        scopes, covering = scopes_covering(governed_here, all_groups)
        higher = _higher_waits(governed_here, int(run.project_id or 0), priority)
        rows: list[Workload] = []
        for u in ordered:
            if u.pk in taken:
                continue
            eligible, free_now = where[u.pk]
            if not eligible:
                taken.add(u.pk)  # its creation says it waits for a site, as without quotas
                continue
            request = request_of(u)
            room, why = _room(project, request, eligible, quota_sites, higher, scopes, covering)
            row = _runtime_row(existing.get(u.pk), u, run, priority, request, now)
            # Where it can start now if any (the webhook places only there); else wherever
            # its quota has room, and the member queues it, as without quotas.
            row.sites = [s for s in room if s in free_now] or room or eligible
            if room:
                row.admitted_at, row.reason = now, ""
                taken.add(u.pk)
                # It holds at each site it was admitted for: each quota covering them, once.
                for name in {n for s in row.sites if s in covering for n in covering[s]}:
                    scopes[name] = admission.admit_with(scopes[name], project, request)
            else:
                row.admitted_at, row.reason = None, why or "waiting for quota"
                reasons[u.pk] = row.reason
            rows.append(row)
        Workload.objects.bulk_create([r for r in rows if r.pk is None], batch_size=500)
        Workload.objects.bulk_update(
            [r for r in rows if r.pk is not None], ["sites", *WORKLOAD_FIELDS], batch_size=500
        )
    say_queued(units, taken, reasons)
    return taken


def _higher_waits(sites: Sequence[str], project_id: int, priority: int) -> set[str]:
    """The ``sites`` where a unit of the project with a higher priority waits."""
    return set(
        waiting()
        .filter(site__in=sites, project_id=project_id, priority__gt=priority)
        .values_list("site", flat=True)
    )


def _still_admitted(
    ordered: Sequence[UnitRun],
    existing: Mapping[int, Workload],
    where: Mapping[int, tuple[list[str], set[str]]],
) -> set[int]:
    """The units admitted before whose step workflow is not created yet, while a site they were
    admitted for is still eligible; the others' admissions (their sites no longer eligible)
    are withdrawn, in the database and on their rows in ``existing``."""
    taken: set[int] = set()
    gone = []
    for u in ordered:
        w = existing.get(u.pk)
        if w is None or w.admitted_at is None or w.attempt != u.attempt or w.site:
            continue
        if set(w.sites or ()) & set(where[u.pk][0]):
            taken.add(u.pk)
        else:
            gone.append(w.pk)
            w.admitted_at = None
    if gone:
        Workload.objects.filter(pk__in=gone).update(admitted_at=None)
    return taken


def _runtime_row(
    w: Workload | None,
    u: UnitRun,
    run: WorkflowRun,
    priority: int,
    request: Amount,
    now: datetime,
) -> Workload:
    """``u``'s Workload row (``w``, or a new one) for its current attempt, not placed at a
    site yet, asking for ``request``; queued anew for a new attempt."""
    project_id = int(run.project_id or 0)
    row = w or Workload(unit=u, run_id=run.pk, project_id=project_id, queued_at=now)
    if w is not None and w.attempt != u.attempt:
        row.queued_at = now
    row.site, row.attempt, row.priority = "", u.attempt, priority
    row.cpu_millicores, row.memory_bytes, row.gpus = request.cpu, request.memory, request.gpu
    row.released_at = None
    return row


def _room(
    project: str,
    request: Amount,
    eligible: Sequence[str],
    quota_sites: set[str],
    higher: set[str],
    scopes: Mapping[str, SiteQuotas],
    covering: Mapping[str, list[str]],
) -> tuple[list[str], str | None]:
    """The eligible sites where ``request`` fits every quota covering the site (any site no
    quota governs; none where a higher-priority unit of the project waits), and why the first
    that has no room has none."""
    room: list[str] = []
    why: str | None = None
    for site in eligible:
        if site not in quota_sites:
            room.append(site)
            continue
        reason = (
            f"{project}: higher-priority units wait for quota at {site}"
            if site in higher
            else admission.fits_all(project, request, [scopes[n] for n in covering[site]])
        )
        if reason is None:
            room.append(site)
        elif why is None:
            why = reason
    return room, why


def _eligible_by_unit(
    run: WorkflowRun, ordered: Sequence[UnitRun], every: Sequence[UnitRun]
) -> dict[int, tuple[list[str], set[str]]]:
    """Each unit's eligible sites and those with room now (``eligible_sites``), by unit id.
    Keyed on what the planner reads of a unit besides its name: the items of a fan-out share
    it, so their eligible sites are computed once per admission."""
    planned: dict[str, tuple[list[str], set[str]]] = {}
    where: dict[int, tuple[list[str], set[str]]] = {}
    for u in ordered:
        key = json.dumps({k: u.spec.get(k) for k in PLANNED_UNIT_KEYS}, sort_keys=True, default=str)
        if key not in planned:
            planned[key] = eligible_sites(run, u, every)
        where[u.pk] = planned[key]
    return where
