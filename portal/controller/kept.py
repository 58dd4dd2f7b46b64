"""A big run's units kept between the turns of its advance in one worker process.

Every turn of a fan-out's advance read all of its units again (ten thousand rows, their specs
decoded, an instance built for each): a fifth to a third of the worker's time while a
10,000-item fan-out was created, for rows of which a turn changes a few hundred. Now a turn
reads each unit's row version (PostgreSQL's ``xmin``: a new one with every write, whoever
makes it: the watcher's folds, failover, a stop, another worker) and re-reads only the rows
whose version moved, the rows added, and the rows whose instance the last turn changed in
memory (an attribute assigned: its write may have been rolled back). What a turn gets is
what ``units_of`` would have read, at the cost of what changed.

Kept per thread (a Celery worker process runs one task at a time; nothing is shared between
threads), for runs of at least ``PORTAL_ADVANCE_KEEP_UNITS`` units while they have step
workflows left to create, at most ``KEPT_UNITS`` units in all (a bigger run is not kept; the
run kept longest ago goes first). On SQLite (the embedded
demo), or inside a transaction (a version read there may be the transaction's own), every
turn reads everything.
"""

from __future__ import annotations

import operator
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection

from portal.controller.common import ROW_VERSION, units_of
from portal.models import UnitRun, WorkflowRun

# What one thread keeps at most (units of all its runs): a bigger run is read whole every turn,
# as before. Kept units cost a worker process about 30 MB per 10,000 between turns, and a
# turn that re-reads part of them holds both for a while: 50,000 kept took the largest
# worker process from about 300 to 800 MB (bench_fanout.py --items 50000).
KEPT_UNITS = 20_000
# More than this share of a run's rows changed: one full read costs no more (measured on a
# 10,000-unit run: 0 % changed 44 ms against 553 ms, 10 % 115 ms, 45 % about the same).
FULL_READ_SHARE = 0.4


@dataclass
class _Kept:
    versions: dict[int, str] = field(default_factory=dict)
    units: dict[int, UnitRun] = field(default_factory=dict)
    # Each instance's attribute values as read (references, so that none is freed and its
    # id reused): a turn that assigned one changed the instance, whether or not its write
    # held.
    marks: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    # The units in the order ``units_of`` gives them (sorted again when rows are added).
    order: list[UnitRun] = field(default_factory=list)


_local = threading.local()


def _store() -> OrderedDict[tuple[int, datetime], _Kept]:
    if not hasattr(_local, "runs"):
        _local.runs = OrderedDict()
    runs: OrderedDict[tuple[int, datetime], _Kept] = _local.runs
    return runs


def forget(run: WorkflowRun | None = None) -> None:
    """Drop what this thread keeps of ``run`` (of every run when None). The advance drops a
    run once a turn leaves nothing to create: its next advance comes when units end, maybe
    much later, and a worker's memory stays what its turns need (a second fan-out peaks no
    higher than the first)."""
    if run is None:
        _store().clear()
    else:
        _store().pop((run.pk, run.created_at), None)


def kept(run: WorkflowRun) -> bool:
    """Whether this thread keeps ``run``'s units."""
    return (run.pk, run.created_at) in _store()


def kept_units_of(run: WorkflowRun) -> list[UnitRun]:
    """The run's units as ``units_of`` reads them, re-reading only the rows that changed
    since this thread last read them."""
    runs = _store()
    key = (run.pk, run.created_at)
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        runs.pop(key, None)
        return units_of(run)
    versions = dict(run.units.order_by().annotate(v=ROW_VERSION).values_list("pk", "v"))
    if not settings.PORTAL_ADVANCE_KEEP_UNITS <= len(versions) <= KEPT_UNITS:
        runs.pop(key, None)
        return units_of(run)
    entry = runs.pop(key, None) or _Kept()
    stale = [pk for pk, v in versions.items() if entry.versions.get(pk) != v or _touched(entry, pk)]
    if len(stale) > FULL_READ_SHARE * len(versions):
        entry = _Kept()
        fresh = units_of(run, versioned=True)
    else:
        fresh = units_of(run, pks=stale, versioned=True) if stale else []
    gone = [pk for pk in entry.units if pk not in versions]  # none, normally
    for pk in gone:
        _drop(entry, pk)
    added = bool(gone)
    for unit in fresh:
        entry.versions[unit.pk] = unit.__dict__.pop("row_version")
        added |= unit.pk not in entry.units
        entry.units[unit.pk] = unit
    if added or len(entry.order) != len(entry.units):
        entry.order = sorted(entry.units.values(), key=lambda u: (u.position, u.pk))
    else:  # the same rows, some read again: each in its place
        entry.order = [entry.units[u.pk] for u in entry.order]
    for unit in entry.order:
        unit._state.fields_cache = {}  # a related row read last turn may have changed since
        entry.marks[unit.pk] = tuple(unit.__dict__.values())
    runs[key] = entry
    _bound(runs)
    return list(entry.order)


def _touched(kept: _Kept, pk: int) -> bool:
    unit, mark = kept.units.get(pk), kept.marks.get(pk)
    if unit is None or mark is None:
        return True
    now = unit.__dict__
    # In C (a loop in Python over every attribute of ten thousand units took 60 ms a turn).
    return len(now) != len(mark) or any(map(operator.is_not, now.values(), mark))


def _drop(kept: _Kept, pk: int) -> None:
    kept.units.pop(pk, None)
    kept.versions.pop(pk, None)
    kept.marks.pop(pk, None)


def _bound(runs: OrderedDict[tuple[int, datetime], _Kept]) -> None:
    total = sum(len(k.units) for k in runs.values())
    while total > KEPT_UNITS:
        _, oldest = runs.popitem(last=False)
        total -= len(oldest.units)
