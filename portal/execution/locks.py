"""Argo's ``synchronization`` held by the portal (issue 18, item 13): a workflow-level mutex or
semaphore is the run's from its first step until it ends; a template-level one, on the
template a unit runs, is the unit's while its step workflow runs. Argo's controller keeps
these locks for the workflows of one cluster; a run's units run at several sites, each with
its own controller, so the portal keeps them instead (and removes ``synchronization`` from
the step workflows, ``placement.manifests.runlevel``).

As in Argo (``workflow/sync/lock_name.go``) a lock is named ``<namespace>/Mutex/<name>`` or
``<namespace>/ConfigMap/<configmap>/<key>``, the namespace being the lock's own or else the
workflow's: here the portal's namespace on karmada-apiserver, where every step workflow
lives. So runs of every project and user share a lock, as every workflow of a namespace
shares it in Argo. A semaphore's limit is read, when it is taken, from the ConfigMap on
karmada-apiserver; a mutex is a semaphore of 1. Waiters are served by the run's
``spec.priority`` (higher first), then in the order they asked, as Argo's queue does.

Taking a lock is one transaction under a PostgreSQL advisory lock on the lock's name, so two
workers never both take its last slot. A run's holds end when its units end or it ends
(``release``), and a holder that vanished without releasing (its run ended meanwhile) is
cleared when the lock is next taken. Runs waiting for a released lock are asked to advance.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models import Exists, OuterRef

from portal import gateway
from portal.choices import ACTIVE_RUN, FINAL_UNIT
from portal.models import SyncHold, UnitRun, WorkflowRun

log = logging.getLogger(__name__)

RUN_SCOPE = ""


class LockInvalid(Exception):
    """A lock whose limit cannot be known (its ConfigMap or key missing, not a number)."""


@dataclass(frozen=True)
class Lock:
    key: str
    field: str  # the field path it comes from, for messages
    configmap: tuple[str, str, str] | None = None  # namespace, name, key of a semaphore
    database_semaphore: bool = False


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


def locks_of(sync: Any, path: str, namespace: str) -> list[Lock]:
    """The locks a ``synchronization`` block asks for, named as Argo names them."""
    out = []
    for where, item in _items(sync):
        field = f"{path}.synchronization.{where}"
        ns = str(item.get("namespace") or namespace)
        if where.startswith("semaphore"):
            ref = item.get("configMapKeyRef")
            if isinstance(ref, Mapping):
                name, key = str(ref.get("name")), str(ref.get("key"))
                out.append(Lock(f"{ns}/ConfigMap/{name}/{key}", field, (ns, name, key)))
            else:
                database = item.get("database")
                db_key = database.get("key") if isinstance(database, Mapping) else None
                out.append(Lock(f"{ns}/Database/{db_key}", field, database_semaphore=True))
        else:
            kind = "Database" if item.get("database") is True else "Mutex"
            out.append(Lock(f"{ns}/{kind}/{item.get('name')}", field))
    return out


def run_locks(run: WorkflowRun) -> list[Lock]:
    return locks_of((run.compiled.get("spec") or {}).get("synchronization"), "spec", namespace())


def unit_locks(run: WorkflowRun, unit: UnitRun) -> list[Lock]:
    template = (run.compiled.get("templates") or {}).get(unit.template) or {}
    return locks_of(template.get("synchronization"), f"templates.{unit.template}", namespace())


def namespace() -> str:
    return gateway.namespace()


def synchronized(run: WorkflowRun) -> bool:
    """Whether the run or any template of it asks for a lock (no query)."""
    if (run.compiled.get("spec") or {}).get("synchronization"):
        return True
    return any(
        isinstance(t, Mapping) and t.get("synchronization")
        for t in (run.compiled.get("templates") or {}).values()
    )


def limit_of(lock: Lock) -> int:
    if lock.database_semaphore:
        # Its limit lives in Argo's sync_limit table, which the portal does not have.
        raise LockInvalid(
            f"{lock.field}.database: a database semaphore's limit is in Argo's sync_limit "
            "table, which the portal does not have; use a ConfigMap semaphore"
        )
    if lock.configmap is None:
        return 1  # a mutex
    ns, name, key = lock.configmap
    try:
        data = gateway.config_map_data(name, ns)
    except gateway.NotFound as exc:
        raise LockInvalid(
            f"{lock.field}.configMapKeyRef: no ConfigMap {name!r} in namespace {ns!r} on "
            "karmada-apiserver"
        ) from exc
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
    limits = {lock.key: limit_of(lock) for lock in locks}  # Karmada read outside the transaction
    priority = _int((run.compiled.get("spec") or {}).get("priority"))
    with transaction.atomic():
        waiting: list[str] = []
        rows = []
        for lock in sorted(locks, key=lambda x: x.key):  # one order: no deadlock between runs
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [lock.key])
            _clear_stale(lock.key)
            row, _ = SyncHold.objects.get_or_create(
                key=lock.key, run=run, scope=scope, defaults={"priority": priority}
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


def _clear_stale(key: str) -> None:
    """Holds of runs that ended, and of units that ended, free their slot (two statements,
    whatever the number of holders and waiters)."""
    SyncHold.objects.filter(key=key).exclude(run__status__in=ACTIVE_RUN).delete()
    ended = UnitRun.objects.filter(
        run_id=OuterRef("run_id"), name=OuterRef("scope"), phase__in=list(FINAL_UNIT)
    )
    SyncHold.objects.filter(key=key).exclude(scope=RUN_SCOPE).filter(Exists(ended)).delete()


def release(run: WorkflowRun, units: Iterable[UnitRun], *, run_ended: bool) -> None:
    """End the holds of units that ended (and the run's own once it ended); runs waiting for
    a lock that was freed are asked to advance."""
    holds = SyncHold.objects.filter(run=run)
    if not run_ended:
        ended = [u.name for u in units if u.phase in FINAL_UNIT]
        holds = holds.filter(scope__in=ended)
    keys = list(holds.filter(held=True).values_list("key", flat=True))
    holds.delete()
    if keys:
        waiters = (
            SyncHold.objects.filter(key__in=keys, held=False)
            .exclude(run=run)
            .values_list("run_id", flat=True)
            .distinct()
        )
        run_ids = list(waiters)
        transaction.on_commit(lambda: _wake(run_ids))


def _wake(run_ids: list[int]) -> None:
    from portal import tasks

    for run_id in run_ids:
        try:
            tasks.advance_request(run_id)
        except Exception:  # noqa: BLE001 - broker down: the resync advances waiting runs
            log.warning("could not wake run %s waiting for a lock", run_id, exc_info=True)


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
