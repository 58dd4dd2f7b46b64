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

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Q, Sum
from django.utils import timezone

from portal.choices import FINAL_UNIT, UnitPhase, UnitTiming
from portal.models import UnitRun, WorkflowRun
from portal.quotas import admission
from portal.quotas.admission import Amount, Limit, SiteQuotas
from portal.quotas.models import PriorityClass, ProjectDefaults, Quota, Workload

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


def _limits(site: str) -> dict[str, Limit]:
    out = {}
    for q in Quota.objects.filter(site__name=site).select_related("project__fleet_share"):
        share = getattr(q.project, "fleet_share", None)
        out[q.project.name] = Limit(
            nominal=Amount(q.cpu_millicores, q.memory_bytes, q.gpus),
            borrowing=(q.borrow_cpu_millicores, q.borrow_memory_bytes, q.borrow_gpus),
            weight=share.weight if share is not None else Decimal(1),
        )
    return out


def holding() -> Any:
    """Admitted workloads whose unit has not ended, at the attempt they were admitted for."""
    return Workload.objects.filter(
        admitted_at__isnull=False, unit__attempt=F("attempt"), unit__site=F("site")
    ).exclude(unit__phase__in=list(FINAL_UNIT))


def used_at(site: str) -> dict[str, Amount]:
    rows = (
        holding()
        .filter(site=site)
        .values("project__name")
        .annotate(cpu=Sum("cpu_millicores"), mem=Sum("memory_bytes"), gpu=Sum("gpus"))
        .order_by()
    )
    used = {
        r["project__name"]: Amount(int(r["cpu"] or 0), int(r["mem"] or 0), int(r["gpu"] or 0))
        for r in rows
    }
    for (_, project), amount in runtime_held(site).items():
        used[project] = used.get(project, Amount()) + amount
    return used


def runtime_held(site: str | None = None) -> dict[tuple[str, str], Amount]:
    """What units placed at run time hold, by (site, project): they are not admitted against
    quotas (the webhook chooses their site; see docs/decisions.md), but once placed they hold
    their requests there, so the quota's use counts them and other units wait for them."""
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


def governed() -> bool:
    return Quota.objects.exists()


def admit(run: WorkflowRun, ready: Sequence[UnitRun]) -> list[UnitRun]:
    """The units of ``ready`` that their project's quota lets start now; the others are
    queued (a ``Workload`` with why) and stay Pending without a step workflow. Units of a run
    without a project, of a site where its project has no quota, and runtime units (placed by
    the webhook later; see docs/decisions.md) pass as they are."""
    if not ready or run.project_id is None or not governed():
        return list(ready)
    quota_sites = set(
        Quota.objects.filter(project_id=run.project_id).values_list("site__name", flat=True)
    )
    by_site: dict[str, list[UnitRun]] = {}
    passed: list[UnitRun] = []
    for u in ready:
        if u.timing == UnitTiming.SUBMIT and u.site in quota_sites and u.spec.get("kind") != "exit":
            by_site.setdefault(u.site, []).append(u)
        else:
            passed.append(u)
    if not by_site:
        return passed
    admitted: set[int] = set()
    for site in sorted(by_site):
        admitted |= _admit_at(run, site, by_site[site])
    return [u for u in ready if u.pk in admitted or u in passed]


@dataclass
class _Waiter:
    project: str
    request: Amount


def _admit_at(run: WorkflowRun, site: str, units: list[UnitRun]) -> set[int]:
    project = run.project.name if run.project else ""
    project_id = int(run.project_id or 0)
    _, priority = run_priority(run)
    now = timezone.now()
    with transaction.atomic():
        _lock_site(site)
        existing = {w.unit_id: w for w in Workload.objects.filter(unit__in=units)}
        quotas = site_quotas(site)
        ours = {u.pk for u in units}
        queue = list(
            waiting().filter(site=site).exclude(unit_id__in=ours).select_related("project")
        )
        # This project's queue at the site that is not ours, in its order: what is ahead of ours.
        others = sorted((w for w in queue if w.project.name == project), key=_key)
        passed = 0
        ahead: dict[tuple[int, Amount], None] = {}
        # Other projects' heads, for fair sharing of what is borrowed.
        heads: dict[str, _Waiter] = {}
        for w in sorted(queue, key=_key):
            if w.project.name != project and w.project.name not in heads:
                heads[w.project.name] = _Waiter(
                    w.project.name, Amount(w.cpu_millicores, w.memory_bytes, w.gpus)
                )

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
            why = None
            if blocked is not None:
                tried += 1
                if tried > admission.LOOKAHEAD:
                    why = blocked
            if why is None:
                why = _ahead_waits(project, site, priority, ahead, quotas)
            if why is None:
                why = admission.fits(project, request, quotas)
            if (
                why is None
                and (ahead or blocked is not None)
                and admission.borrows(project, request, quotas)
            ):
                # Passing what waits is for units within the nominal quota only.
                why = (
                    blocked or f"{project}: earlier units wait for quota at {site} before this one"
                )
            if why is None and admission.borrows(project, request, quotas):
                borrowers = [
                    h.project
                    for h in heads.values()
                    if admission.fits(h.project, h.request, quotas) is None
                    and admission.borrows(h.project, h.request, quotas)
                ]
                if not admission.fair_turn(project, borrowers, quotas):
                    why = (
                        f"{project} borrows at {site} while projects borrowing less wait; "
                        "waiting for its fair share"
                    )
            if why is None:
                quotas = admission.admit_with(quotas, project, request)
                taken.add(u.pk)
                fields = {"admitted_at": now, "reason": "", "released_at": None}
            else:
                # Behind one that waits, a few more are tried (``LOOKAHEAD``); the rest wait.
                blocked = blocked or _behind(why, project, site)
                fields = {"admitted_at": None, "reason": why}
                reasons[u.pk] = why
            row = w or Workload(unit=u, run_id=run.pk, project_id=project_id, queued_at=now)
            if w is not None and (w.attempt != u.attempt or w.site != u.site):
                row.queued_at = now
            row.site, row.attempt, row.priority = u.site, u.attempt, priority
            row.cpu_millicores, row.memory_bytes, row.gpus = (
                request.cpu,
                request.memory,
                request.gpu,
            )
            changed = w is None or any(getattr(w, k) != v for k, v in fields.items())
            for k, v in fields.items():
                setattr(row, k, v)
            if w is None:
                create.append(row)
            elif changed or row.site != w.site:
                update.append(row)
        Workload.objects.bulk_create(create, batch_size=500)
        Workload.objects.bulk_update(
            update,
            [
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
            ],
            batch_size=500,
        )
    _say_queued(units, taken, reasons)
    return taken


def _ahead_waits(
    project: str,
    site: str,
    priority: int,
    ahead: Mapping[tuple[int, Amount], None],
    quotas: SiteQuotas,
) -> str | None:
    """Why a unit must wait for the project's units queued before it at the site (None: it
    may go). A unit of higher priority always goes first; one of the same priority that
    fits now goes first (its run is being advanced too); one that does not fit is passed by a
    smaller unit that fits within the nominal quota (Kueue's BestEffortFIFO)."""
    if any(p > priority for p, _ in ahead):
        return f"{project}: higher-priority units wait for quota at {site} before this one"
    if any(admission.fits(project, size, quotas) is None for _, size in ahead):
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
    """Runs with units queued at the sites where units of ``run`` just freed quota: called
    from the advance that follows a unit's end, so queued units are admitted as quota frees,
    not at the next resync. Returns their ids (the caller asks for their advance)."""
    freed = Workload.objects.filter(
        run_id=run.pk, admitted_at__isnull=False, released_at__isnull=True
    ).filter(Q(unit__phase__in=list(FINAL_UNIT)) | ~Q(unit__attempt=F("attempt")))
    sites = set(freed.values_list("site", flat=True))
    if not sites:
        return []
    freed.update(released_at=timezone.now())
    return sorted(
        set(
            waiting()
            .filter(site__in=sites)
            .exclude(run_id=run.pk)
            .values_list("run_id", flat=True)
            .distinct()
        )
    )


def queued_runs_at(site: str) -> list[int]:
    """Runs with units queued at ``site``: to advance when its quotas change."""
    return sorted(set(waiting().filter(site=site).values_list("run_id", flat=True).distinct()))


def quota_changed(site: str) -> None:
    """An operator raised, lowered or removed a quota at ``site``: the runs queued there are
    advanced now (once the change is committed), not at the next resync."""
    from portal import tasks

    def wake_them() -> None:
        for run_id in queued_runs_at(site):
            try:
                tasks.advance_request(run_id)
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
    # per unit (a run page of 10,000 queued tiles would have made 10,000 queries).
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
    """Every quota with what its project holds at the site now."""
    used: dict[tuple[str, str], Amount] = {}
    for r in (
        holding()
        .values("site", "project__name")
        .annotate(cpu=Sum("cpu_millicores"), mem=Sum("memory_bytes"), gpu=Sum("gpus"))
        .order_by()
    ):
        used[(r["site"], r["project__name"])] = Amount(
            int(r["cpu"] or 0), int(r["mem"] or 0), int(r["gpu"] or 0)
        )
    for key, amount in runtime_held().items():
        used[key] = used.get(key, Amount()) + amount
    queued: dict[tuple[str, str], int] = {}
    for r in waiting().values("site", "project__name").annotate(n=Sum(1)).order_by():
        queued[(r["site"], r["project__name"])] = int(r["n"] or 0)
    rows = []
    for q in Quota.objects.select_related("project", "site"):
        key = (q.site.name, q.project.name)
        rows.append({"quota": q, "used": used.get(key, Amount()), "queued": queued.get(key, 0)})
    return rows
