"""The quota queue against the database: which ready units of a run may be pushed to Karmada
now (``admit``), the runs to advance once quota frees (``wake``), and what a queued unit shows
(``queue_of``).

Admission at a site is serialised by a transaction-scoped advisory lock on the site's name, so
two workers advancing two runs never both take the last of a quota. A unit admitted holds its
quota from then until it ends (also while its step workflow is being created), counted from
the ``Workload`` rows joined to their unit's phase and attempt: nothing has to be released by
hand, and a unit placed again elsewhere (a new attempt) holds nothing at its old site.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Q, Sum
from django.utils import timezone

from placement.context import PLANNED_UNIT_KEYS
from portal.choices import FINAL_UNIT, UnitPhase, UnitTiming
from portal.models import UnitRun, WorkflowRun
from portal.quotas import admission
from portal.quotas.admission import Amount, Limit, SiteQuotas
from portal.quotas.models import (
    PriorityClass,
    ProjectDefaults,
    Quota,
    Workload,
    group_name,
    selects,
)
from sites.models import Site

log = logging.getLogger(__name__)

# Ordered last: a key never reached by a workload that exists.
_LAST = (0, datetime.max.replace(tzinfo=timezone.get_fixed_timezone(0)), 2**62)


def request_of(unit: UnitRun) -> Amount:
    """What one pod of the unit asks for (its spec, as the parser read the templates)."""
    r = (unit.spec or {}).get("resources") or {}
    return Amount(
        int(r.get("cpu_millicores") or 0), int(r.get("memory_bytes") or 0), int(r.get("gpus") or 0)
    )


def run_priority(run: WorkflowRun) -> tuple[str, int]:
    """The run's priority class (name, value) as it was submitted; ("", 0) without one."""
    pc = (run.compiled or {}).get("priority_class") or {}
    return str(pc.get("name") or ""), int(pc.get("value") or 0)


def priority_for(project: Any, name: str | None) -> PriorityClass | None:
    """The class a submission asks for by ``name``, else its project's default, else none.
    Raises ``PriorityClass.DoesNotExist`` for a name that is not a class."""
    if name:
        return PriorityClass.objects.get(name=name)
    if project is None:
        return None
    defaults = ProjectDefaults.objects.filter(project=project).select_related("priority_class")
    found = defaults.first()
    return found.priority_class if found else None


def _limits_of(quotas: Any) -> dict[str, Limit]:
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


def holding() -> Any:
    """Admitted workloads whose unit has not ended, at the attempt they were admitted for."""
    return Workload.objects.filter(
        admitted_at__isnull=False, unit__attempt=F("attempt"), unit__site=F("site")
    ).exclude(unit__phase__in=list(FINAL_UNIT))


def unplaced() -> Any:
    """Admitted workloads of units placed at run time that the webhook has not placed yet:
    each holds its request at every site it was admitted for (``sites``) until placed."""
    return Workload.objects.filter(
        admitted_at__isnull=False,
        site="",
        unit__site="",
        unit__attempt=F("attempt"),
        unit__timing=UnitTiming.RUNTIME,
    ).exclude(unit__phase__in=list(FINAL_UNIT))


def used_over(sites: Iterable[str]) -> dict[str, Amount]:
    """What each project's admitted, unfinished units hold over ``sites`` (one site, or the
    sites of a group): units placed at submission, units placed at run time, and units
    admitted for run time and not placed yet (counted once, however many of the sites they
    were admitted for are among ``sites``)."""
    names = sorted(set(sites))
    rows = (
        holding()
        .filter(site__in=names)
        .values("project__name")
        .annotate(cpu=Sum("cpu_millicores"), mem=Sum("memory_bytes"), gpu=Sum("gpus"))
        .order_by()
    )
    used = {
        r["project__name"]: Amount(int(r["cpu"] or 0), int(r["mem"] or 0), int(r["gpu"] or 0))
        for r in rows
    }
    wanted = set(names)
    for (site, project), amount in runtime_held().items():
        if site in wanted:
            used[project] = used.get(project, Amount()) + amount
    for project, where, cpu, mem, gpu in unplaced().values_list(
        "project__name", "sites", "cpu_millicores", "memory_bytes", "gpus"
    ):
        if wanted.intersection(where or ()):
            used[project] = used.get(project, Amount()) + Amount(cpu, mem, gpu)
    return used


def used_at(site: str) -> dict[str, Amount]:
    """What each project's admitted, unfinished units hold at ``site``."""
    return used_over([site])


def runtime_held(site: str | None = None) -> dict[tuple[str, str], Amount]:
    """What units placed at run time hold once placed, by (site, project): the webhook chose
    their site among those their quotas admitted them for, and from then they hold their
    requests there only."""
    units = (
        UnitRun.objects.filter(timing=UnitTiming.RUNTIME, run__project__isnull=False)
        .exclude(site="")
        .exclude(workflow_name="")
        .exclude(phase__in=list(FINAL_UNIT))
    )
    if site is not None:
        units = units.filter(site=site)
    out: dict[tuple[str, str], Amount] = {}
    for unit_site, project, resources in units.values_list(
        "site", "run__project__name", "spec__resources"
    ).order_by():
        r = resources or {}
        held = Amount(
            int(r.get("cpu_millicores") or 0),
            int(r.get("memory_bytes") or 0),
            int(r.get("gpus") or 0),
        )
        key = (str(unit_site), str(project))
        out[key] = out.get(key, Amount()) + held
    return out


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


def waiting() -> Any:
    """Queued workloads whose unit still waits, at the attempt they were queued for."""
    return Workload.objects.filter(
        admitted_at__isnull=True, unit__phase=UnitPhase.PENDING, unit__attempt=F("attempt")
    )


def _key(w: Workload) -> tuple[int, datetime, int]:
    return (-w.priority, w.queued_at, w.pk or _LAST[2])


def _lock_site(site: str) -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"portal-quota:{site}"])


def _lock_groups(found: Iterable[Group]) -> None:
    """After the site's lock (every admission takes sites first, then groups, each in name
    order, so two never wait for each other): a group's quota is shared by its sites."""
    for g in sorted(found, key=lambda g: g.name):
        _lock_site(g.name)


def governed() -> bool:
    return Quota.objects.exists()


def admit(
    run: WorkflowRun, ready: Sequence[UnitRun], units: Sequence[UnitRun] = ()
) -> list[UnitRun]:
    """The units of ``ready`` that their project's quota lets start now; the others are
    queued (a ``Workload`` with why) and stay Pending without a step workflow. A unit placed
    at run time is admitted for the eligible sites where its project's quotas have room, and
    the webhook then chooses among those only; over quota at every eligible site it is queued.
    Units of a run without a project, of a site where its project has no quota, and exit
    handlers pass as they are. ``units``: every unit of the run (a runtime unit's eligible
    sites depend on where its upstream ran)."""
    if not ready or run.project_id is None or not governed():
        return list(ready)
    all_groups = groups()
    quota_sites = governed_sites(int(run.project_id), all_groups)
    if not quota_sites:
        return list(ready)
    by_site: dict[str, list[UnitRun]] = {}
    runtime: list[UnitRun] = []
    passed: list[UnitRun] = []
    for u in ready:
        if u.spec.get("kind") == "exit":
            passed.append(u)
        elif u.timing == UnitTiming.SUBMIT and u.site in quota_sites:
            by_site.setdefault(u.site, []).append(u)
        elif u.timing == UnitTiming.RUNTIME and not u.site:
            runtime.append(u)
        else:
            passed.append(u)
    if not by_site and not runtime:
        return passed
    admitted: set[int] = set()
    for site in sorted(by_site):
        admitted |= _admit_at(run, site, by_site[site])
    if runtime:
        admitted |= _admit_runtime(run, runtime, units or ready, quota_sites, all_groups)
    return [u for u in ready if u.pk in admitted or u in passed]


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


# What an admission writes to the Workload rows it keeps (the runtime admission also rewrites
# the sites each row was admitted for).
_WORKLOAD_FIELDS = (
    "site",
    "attempt",
    "priority",
    "queued_at",
    "admitted_at",
    "released_at",
    "reason",
    "cpu_millicores",
    "memory_bytes",
    "gpus",
)


def _admit_runtime(
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
    project_id = int(run.project_id or 0)
    _, priority = run_priority(run)
    ordered = sorted(units, key=lambda u: u.position)
    where = _eligible_by_unit(run, ordered, every)
    governed_here = sorted({s for e, _ in where.values() for s in e} & quota_sites)
    taken: set[int] = set()
    reasons: dict[int, str] = {}
    now = timezone.now()
    with transaction.atomic():
        for site in governed_here:
            _lock_site(site)
        _lock_groups(g for g in all_groups if set(governed_here) & set(g.sites))
        existing = {w.unit_id: w for w in Workload.objects.filter(unit__in=units)}
        gone = []
        for u in ordered:
            w = existing.get(u.pk)
            if w is None or w.admitted_at is None or w.attempt != u.attempt or w.site:
                continue
            if set(w.sites or ()) & set(where[u.pk][0]):
                taken.add(u.pk)  # admitted before, its step workflow not created yet
            else:
                gone.append(w.pk)  # the sites it was admitted for are no longer eligible
                w.admitted_at = None
        if gone:
            Workload.objects.filter(pk__in=gone).update(admitted_at=None)
        scopes, covering = _scopes_covering(governed_here, all_groups)
        higher = set(
            waiting()
            .filter(site__in=governed_here, project_id=project_id, priority__gt=priority)
            .values_list("site", flat=True)
        )
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
            w = existing.get(u.pk)
            row = w or Workload(unit=u, run_id=run.pk, project_id=project_id, queued_at=now)
            if w is not None and w.attempt != u.attempt:
                row.queued_at = now
            row.site, row.attempt, row.priority = "", u.attempt, priority
            row.cpu_millicores, row.memory_bytes, row.gpus = (
                request.cpu,
                request.memory,
                request.gpu,
            )
            # Where it can start now if any (the webhook places only there); else wherever
            # its quota has room, and the member queues it, as without quotas.
            row.sites = [s for s in room if s in free_now] or room or eligible
            row.released_at = None
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
            [r for r in rows if r.pk is not None],
            ["sites", *_WORKLOAD_FIELDS],
            batch_size=500,
        )
    _say_queued(units, taken, reasons)
    return taken


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


def _scopes_covering(
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


@dataclass
class _Waiter:
    project: str
    request: Amount


def _admit_at(run: WorkflowRun, site: str, units: list[UnitRun]) -> set[int]:
    """Admit ``units`` of ``run`` at ``site`` against its quotas, in queue order, under the
    site's (and its groups') locks: the ids of those admitted; the others wait, each saying
    why."""
    project = run.project.name if run.project else ""
    _, priority = run_priority(run)
    now = timezone.now()
    with transaction.atomic():
        all_groups = groups()
        _lock_site(site)
        _lock_groups(g for g in all_groups if site in g.sites)
        existing = {w.unit_id: w for w in Workload.objects.filter(unit__in=units)}
        quotas = scopes_at(site, all_groups)
        ours = {u.pk for u in units}
        queue = list(
            waiting().filter(site=site).exclude(unit_id__in=ours).select_related("project")
        )
        # This project's queue at the site that is not ours, in its order: what is ahead of ours.
        others = sorted((w for w in queue if w.project.name == project), key=_key)
        passed = 0
        ahead: dict[tuple[int, Amount], None] = {}
        heads = _heads(queue, project)

        def key(u: UnitRun) -> tuple[int, datetime, int]:
            w = existing.get(u.pk)
            if w is not None and w.admitted_at is None and w.attempt == u.attempt:
                return (-priority, w.queued_at, w.pk)
            return (-priority, now, 2**61 + u.position)

        taken: set[int] = set()
        create: list[Workload] = []
        update: list[Workload] = []
        blocked: str | None = None
        tried = 0
        reasons: dict[int, str] = {}
        for u in sorted(units, key=key):
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
            mine = key(u)
            while passed < len(others) and _key(others[passed]) < mine:
                w_ahead = others[passed]
                size = Amount(w_ahead.cpu_millicores, w_ahead.memory_bytes, w_ahead.gpus)
                ahead[(w_ahead.priority, size)] = None
                passed += 1
            if blocked is not None:
                tried += 1
            if blocked is not None and tried > admission.LOOKAHEAD:
                why: str | None = blocked
            else:
                why = _why_it_waits(project, site, priority, request, quotas, ahead, heads, blocked)
            if why is None:
                quotas = admission.admit_all(quotas, project, request)
                taken.add(u.pk)
                fields = {"admitted_at": now, "reason": "", "released_at": None}
            else:
                # Behind one that waits, a few more are tried (``LOOKAHEAD``); the rest wait.
                blocked = blocked or _behind(why, project, site)
                fields = {"admitted_at": None, "reason": why}
                reasons[u.pk] = why
            row, changed = _site_row(w, u, run, priority, request, now, fields)
            if w is None:
                create.append(row)
            elif changed:
                update.append(row)
        Workload.objects.bulk_create(create, batch_size=500)
        Workload.objects.bulk_update(
            update,
            _WORKLOAD_FIELDS,
            batch_size=500,
        )
    _say_queued(units, taken, reasons)
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


def _heads(queue: Iterable[Workload], project: str) -> dict[str, _Waiter]:
    """Other projects' heads of the queue at a site, for fair sharing of what is borrowed."""
    heads: dict[str, _Waiter] = {}
    for w in sorted(queue, key=_key):
        if w.project.name != project and w.project.name not in heads:
            heads[w.project.name] = _Waiter(
                w.project.name, Amount(w.cpu_millicores, w.memory_bytes, w.gpus)
            )
    return heads


def _why_it_waits(
    project: str,
    site: str,
    priority: int,
    request: Amount,
    quotas: Sequence[SiteQuotas],
    ahead: Mapping[tuple[int, Amount], None],
    heads: Mapping[str, _Waiter],
    blocked: str | None,
) -> str | None:
    """Why a unit of ``project`` waits at ``site`` (None: it is admitted): the project's units
    queued ahead of it, its quotas, and, when it borrows, whether it passes what waits (only
    units within the nominal quota do) and its fair turn among the projects that borrow."""
    why = _ahead_waits(project, site, priority, ahead, quotas)
    if why is None:
        why = admission.fits_all(project, request, quotas)
    if (
        why is None
        and (ahead or blocked is not None)
        and admission.borrows_any(project, request, quotas)
    ):
        return blocked or f"{project}: earlier units wait for quota at {site} before this one"
    if why is None and admission.borrows_any(project, request, quotas):
        borrowers = [
            h.project
            for h in heads.values()
            if admission.fits_all(h.project, h.request, quotas) is None
            and admission.borrows_any(h.project, h.request, quotas)
        ]
        if not admission.fair_turn_all(project, borrowers, quotas):
            return (
                f"{project} borrows at {site} while projects borrowing less wait; "
                "waiting for its fair share"
            )
    return why


def _ahead_waits(
    project: str,
    site: str,
    priority: int,
    ahead: Mapping[tuple[int, Amount], None],
    quotas: Sequence[SiteQuotas],
) -> str | None:
    """Why a unit must wait for the project's units queued before it at the site (None: it
    may go). A unit of higher priority always goes first; one of the same priority that
    fits now goes first (its run is being advanced too); one that does not fit is passed by a
    smaller unit that fits within the nominal quota (Kueue's BestEffortFIFO)."""
    if any(p > priority for p, _ in ahead):
        return f"{project}: higher-priority units wait for quota at {site} before this one"
    if any(admission.fits_all(project, size, quotas) is None for _, size in ahead):
        return f"{project}: earlier units wait for quota at {site} before this one"
    return None


def _behind(why: str, project: str, site: str) -> str:
    if why.endswith("waiting for quota") or "before this one" in why:
        return why
    return f"{project}: earlier units wait for quota at {site} before this one"


def _say_queued(units: Iterable[UnitRun], taken: set[int], why: dict[int, str]) -> None:
    """A queued unit's message says why it waits (the run page's table and logs show it);
    cleared on admission. Written only where it changes."""
    told: dict[str, list[int]] = {}
    cleared: list[int] = []
    for u in units:
        if u.pk in taken:
            if u.message.startswith(QUEUED):
                cleared.append(u.pk)
                u.message = ""
            continue
        text = f"{QUEUED}{why.get(u.pk, 'waiting for quota')}"[:2000]
        if u.message != text:
            told.setdefault(text, []).append(u.pk)
            u.message = text
    for text, ids in told.items():
        UnitRun.objects.filter(pk__in=ids, phase=UnitPhase.PENDING, workflow_name="").update(
            message=text
        )
    if cleared:
        UnitRun.objects.filter(pk__in=cleared, message__startswith=QUEUED).update(message="")


QUEUED = "queued: "


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


def quota_sites(quota: Quota) -> list[str]:
    """The sites a quota covers now: its site, or its group's."""
    if quota.site_id is not None and quota.site is not None:
        return [quota.site.name]
    sel = quota.site_selector if isinstance(quota.site_selector, dict) else {}
    return sorted(n for n, labels in site_labels().items() if selects(sel, labels))


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


@dataclass(frozen=True)
class QueueEntry:
    position: int
    reason: str


def queue_of(units: Sequence[UnitRun]) -> dict[int, QueueEntry]:
    """For each queued unit of ``units`` (by id): its position in its project's queue at its
    site (1: next) and why it waits."""
    pending = [u.pk for u in units if u.phase == UnitPhase.PENDING and not u.workflow_name]
    if not pending:
        return {}
    mine = {
        w.unit_id: w
        for w in waiting()
        .filter(unit_id__in=pending)
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
