"""Argo's ``synchronization`` held by the portal: a workflow-level mutex or
semaphore is the run's from its first step until it ends; a template-level one, on the
template a unit runs, is the unit's while its step workflow runs. Argo's controller keeps
these locks for the workflows of one cluster; a run's units run at several sites, each with
its own controller, so the portal keeps them instead (and removes ``synchronization`` from
the step workflows, ``placement.manifests.runlevel``).

Argo (``workflow/sync/lock_name.go``) names a lock ``<namespace>/Mutex/<name>`` or
``<namespace>/ConfigMap/<configmap>/<key>``, and every workflow of a namespace shares it. The
portal's namespace is the project, so a lock is named after the run's project
(``<project>/Mutex/<name>``; ``~<owner>`` for a run in no project) and runs of other projects
never share it; a lock is fleet-wide (``*/Mutex/<name>``) only where an operator declared it
(``FleetLock``). A ``namespace`` on a lock may name only the run's own (its project, or the
portal's namespace on karmada-apiserver). A semaphore's limit is read, when it is taken, from
the ConfigMap in the portal's namespace on karmada-apiserver; a mutex is a semaphore of 1.
Waiters are served by the run's ``spec.priority`` (higher first, clamped to the range its
project allows, ``sites.models.priority_clamp``), then in the order they asked, as Argo's
queue does.

Taking a lock is one transaction under a PostgreSQL advisory lock on the lock's name, so two
workers never both take its last slot. A run's holds end when its units end or it ends
(``release``), when a unit's step workflow vanished (``release_unit``), and at the run's
deadline (``spec.activeDeadlineSeconds``): a place whose run ended, whose unit ended, or whose
deadline passed is cleared when the lock is next taken and by the resync (``sweep``). Runs
waiting for a freed lock, and runs whose hold expired, are asked to advance.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from portal.choices import ACTIVE_RUN, FINAL_UNIT
from portal.controller import workqueue
from portal.controller.common import event
from portal.karmada import client, errors
from portal.models import FleetLock, SyncHold, UnitRun, WorkflowRun
from sites.models import priority_clamp

log = logging.getLogger(__name__)

RUN_SCOPE = ""
FLEET = "*"  # the namespace of a fleet-wide lock: no project name has it


class LockInvalid(Exception):
    """A lock whose limit cannot be known (its ConfigMap or key missing, not a number), or
    that names a namespace other than the run's own."""


@dataclass(frozen=True)
class Lock:
    name: str  # as Argo names it, without the namespace: Mutex/<name>, ConfigMap/<cm>/<key>
    field: str  # the field path it comes from, for messages
    owner: str  # whose lock it is unless declared fleet-wide: the run's project
    configmap: tuple[str, str] | None = None  # name, key of a semaphore's ConfigMap
    database_semaphore: bool = False
    problem: str | None = None  # why it cannot be taken at all
    fleet_wide: bool = False

    @property
    def key(self) -> str:
        return f"{FLEET if self.fleet_wide else self.owner}/{self.name}"


def _items(sync: Any) -> Iterable[tuple[str, Mapping[str, Any]]]:
    if not isinstance(sync, Mapping):
        return
    for kind in ("semaphores", "mutexes"):
        for i, item in enumerate(sync.get(kind) or []):
            if isinstance(item, Mapping):
                yield f"{kind}[{i}]", item
    for kind in ("semaphore", "mutex"):  # deprecated singular forms (v3.5 and before)
        if isinstance(sync.get(kind), Mapping):
            yield kind, sync[kind]


def locks_of(sync: Any, path: str, owner: str) -> list[Lock]:
    """The locks a ``synchronization`` block asks for, named after ``owner`` (the run's
    project) as Argo names them after the namespace."""
    out = []
    for where, item in _items(sync):
        field = f"{path}.synchronization.{where}"
        ns = item.get("namespace")
        problem = None
        if ns not in (None, "", owner, namespace()):
            problem = (
                f"{field}.namespace: a lock is its project's own ({owner!r}); runs of "
                f"another namespace ({ns!r}) share a lock only when an operator declared it "
                "fleet-wide: name it without a namespace"
            )
        if where.startswith("semaphore"):
            ref = item.get("configMapKeyRef")
            if isinstance(ref, Mapping):
                name, key = str(ref.get("name")), str(ref.get("key"))
                out.append(
                    Lock(f"ConfigMap/{name}/{key}", field, owner, (name, key), False, problem)
                )
            else:
                database = item.get("database")
                db_key = database.get("key") if isinstance(database, Mapping) else None
                out.append(Lock(f"Database/{db_key}", field, owner, None, True, problem))
        else:
            kind = "Database" if item.get("database") is True else "Mutex"
            out.append(Lock(f"{kind}/{item.get('name')}", field, owner, problem=problem))
    return out


def owner_of(run: WorkflowRun) -> str:
    """The namespace of the run's locks: its project's name, or ``~<owner>`` for a run in no
    project (a character no project name has)."""
    if run.project_id and run.project is not None:
        return run.project.name
    return f"~{run.owner.get_username()}"


def run_locks(run: WorkflowRun) -> list[Lock]:
    return locks_of((run.compiled.get("spec") or {}).get("synchronization"), "spec", owner_of(run))


def unit_locks(run: WorkflowRun, unit: UnitRun) -> list[Lock]:
    template = (run.compiled.get("templates") or {}).get(unit.template) or {}
    return locks_of(template.get("synchronization"), f"templates.{unit.template}", owner_of(run))


def namespace() -> str:
    return client.namespace()


def _declared(locks: Sequence[Lock]) -> list[Lock]:
    """``locks`` with those an operator declared fleet-wide marked so (one query)."""
    names = {lock.name for lock in locks}
    fleet = set(FleetLock.objects.filter(name__in=names).values_list("name", flat=True))
    return [replace(lock, fleet_wide=lock.name in fleet) for lock in locks]


def priority_of(run: WorkflowRun) -> int:
    """The run's ``spec.priority`` within the range its project allows."""
    asked = _int((run.compiled.get("spec") or {}).get("priority"))
    return priority_clamp(asked, run.project if run.project_id else None)


def expiry_of(run: WorkflowRun) -> datetime | None:
    """When the run's ``spec.activeDeadlineSeconds`` passes (from submission, as
    ``gates.deadline_left`` counts it): its holds end then."""
    seconds = (run.compiled.get("spec") or {}).get("activeDeadlineSeconds")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, str)):
        return None
    if isinstance(seconds, str) and not seconds.strip().isdigit():
        return None
    return run.created_at + timedelta(seconds=int(seconds))


def synchronized(run: WorkflowRun) -> bool:
    """Whether the run or any template of it asks for a lock (no query)."""
    if (run.compiled.get("spec") or {}).get("synchronization"):
        return True
    return any(
        isinstance(t, Mapping) and t.get("synchronization")
        for t in (run.compiled.get("templates") or {}).values()
    )


def limit_of(lock: Lock) -> int:
    if lock.problem:
        raise LockInvalid(lock.problem)
    if lock.database_semaphore:
        # Its limit lives in Argo's sync_limit table, which the portal does not have.
        raise LockInvalid(
            f"{lock.field}.database: a database semaphore's limit is in Argo's sync_limit "
            "table, which the portal does not have; use a ConfigMap semaphore"
        )
    if lock.configmap is None:
        return 1  # a mutex
    ns = namespace()
    name, key = lock.configmap
    try:
        data = client.config_map_data(name, ns)
    except errors.NotFound as exc:
        raise LockInvalid(
            f"{lock.field}.configMapKeyRef: no ConfigMap {name!r} in namespace {ns!r} on "
            "karmada-apiserver"
        ) from exc
    except errors.Forbidden as exc:
        raise LockInvalid(f"{lock.field}.configMapKeyRef: {exc.message}") from exc
    raw = str(data.get(key, "")).strip()
    if not raw.isdigit():
        raise LockInvalid(
            f"{lock.field}.configMapKeyRef: ConfigMap {name!r} has no numeric key {key!r}"
        )
    return int(raw)


def acquire(run: WorkflowRun, scope: str, locks: Sequence[Lock]) -> str | None:
    """Take every lock for ``run`` (``scope``: "" for the run, else a unit's name), or none:
    None when all are held, else what it waits for. Raises ``LockInvalid``."""
    if not locks:
        return None
    locks = _declared(locks)
    limits = {lock.key: limit_of(lock) for lock in locks}  # Karmada read outside the transaction
    priority = priority_of(run)
    expires = expiry_of(run)
    if expires is not None and expires <= timezone.now():
        # Only the exit handler starts past the deadline (as Argo runs onExit then): its
        # place lasts until it ends, not a moment.
        expires = None
    with transaction.atomic():
        waiting: list[str] = []
        rows = []
        for lock in sorted(locks, key=lambda x: x.key):  # one order: no deadlock between runs
            _lock_name(lock.key)
            _clear_stale(lock.key)
            row, _ = SyncHold.objects.get_or_create(
                key=lock.key,
                run=run,
                scope=scope,
                defaults={"priority": priority, "expires_at": expires},
            )
            rows.append(row)
            if not row.held and not _first_in_line(row, limits[lock.key]):
                waiting.append(f"{lock.key} ({lock.field})")
        if waiting:
            return "waiting for the lock " + ", ".join(waiting)
        SyncHold.objects.filter(pk__in=[r.pk for r in rows]).update(held=True)
    return None


def _first_in_line(row: SyncHold, limit: int) -> bool:
    holders = SyncHold.objects.filter(key=row.key, held=True).count()
    free = limit - holders
    if free <= 0:
        return False
    ahead = list(
        SyncHold.objects.filter(key=row.key, held=False)
        .order_by("-priority", "created_at", "id")
        .values_list("pk", flat=True)[:free]
    )
    return row.pk in ahead


def _stale(holds: QuerySet[SyncHold]) -> tuple[QuerySet[SyncHold], QuerySet[SyncHold]]:
    """Of ``holds``: those of runs or units that ended, and those past their run's deadline."""
    ended = UnitRun.objects.filter(
        run_id=OuterRef("run_id"), name=OuterRef("scope"), phase__in=list(FINAL_UNIT)
    )
    over = holds.exclude(run__status__in=ACTIVE_RUN) | holds.exclude(scope=RUN_SCOPE).filter(
        Exists(ended)
    )
    return over, holds.filter(expires_at__lte=timezone.now())


def _clear_stale(key: str) -> tuple[bool, set[int]]:
    """Holds of ``key`` whose run or unit ended, or whose run's deadline passed, free their
    slot; the caller holds the lock's advisory lock. Returns whether a held slot was freed and
    the runs whose place expired (each gets an event saying so)."""
    over, expired = _stale(SyncHold.objects.filter(key=key))
    found = list(expired.values_list("pk", "run_id", "held"))
    freed = any(held for _, _, held in found)
    if found:
        SyncHold.objects.filter(pk__in=[pk for pk, _, _ in found]).delete()
    runs = {run_id for _, run_id, _ in found}
    for run_id in sorted(runs):
        event(run_id, "lock-expired", _EXPIRED)
    freed |= over.filter(held=True).exists()
    over.delete()
    return freed, runs


_EXPIRED = (
    "its place on a lock was given up: the run's activeDeadlineSeconds passed "
    "(a hold lasts at most until the run's deadline)"
)


def release(run: WorkflowRun, units: Iterable[UnitRun], *, run_ended: bool) -> None:
    """End the holds of units that ended (and the run's own once it ended); runs waiting for
    a lock that was freed are asked to advance."""
    holds = SyncHold.objects.filter(run=run)
    if not run_ended:
        ended = [u.name for u in units if u.phase in FINAL_UNIT]
        holds = holds.filter(scope__in=ended)
    _free(holds, run.pk)


def release_unit(run_id: int, unit: str) -> bool:
    """End the holds of one unit whose step workflow vanished (deleted on Karmada, or lost
    with its state), whatever happens to the unit next: a new attempt asks for its locks
    again, in line behind those already waiting. True when a hold ended."""
    return _free(SyncHold.objects.filter(run_id=run_id, scope=unit), run_id)


def _free(holds: QuerySet[SyncHold], run_id: int) -> bool:
    keys = list(holds.filter(held=True).values_list("key", flat=True))
    removed, _ = holds.delete()
    if keys:
        _wake_waiters(set(keys), exclude=run_id)
    return removed > 0


def _wake_waiters(keys: set[str], exclude: int | None = None) -> None:
    waiters = SyncHold.objects.filter(key__in=keys, held=False)
    if exclude is not None:
        waiters = waiters.exclude(run_id=exclude)
    run_ids = list(waiters.values_list("run_id", flat=True).distinct())
    if run_ids:
        transaction.on_commit(lambda: _wake(run_ids))


def sweep() -> list[int]:
    """For the resync: clear the stale holds (see ``_clear_stale``) of every lock, one lock at
    a time under its advisory lock, in the order ``acquire`` takes them (no deadlock with it).
    Returns the runs to advance: those waiting for a freed lock, and those whose place expired
    (their advance ends them at their deadline)."""
    over, expired = _stale(SyncHold.objects.all())
    keys = sorted(
        set(over.values_list("key", flat=True)) | set(expired.values_list("key", flat=True))
    )
    run_ids: set[int] = set()
    for key in keys:
        with transaction.atomic():
            _lock_name(key)
            freed, ended = _clear_stale(key)
            run_ids |= ended
            if freed:
                waiting = SyncHold.objects.filter(key=key, held=False)
                run_ids |= set(waiting.values_list("run_id", flat=True))
    return sorted(run_ids)


def _lock_name(key: str) -> None:
    """Serialise every change to the holds of one lock (until the transaction ends)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [key])


def _wake(run_ids: list[int]) -> None:
    for run_id in run_ids:
        try:
            workqueue.add(run_id)
        except Exception:  # noqa: BLE001 - broker down: the resync advances waiting runs
            log.warning("could not wake run %s waiting for a lock", run_id, exc_info=True)


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
