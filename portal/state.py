"""The one writer of a run's status and a unit's phase (and of the site a unit was placed at).

Every move is a conditional UPDATE: the row changes only while it is in a state from which the
transition tables (``RUN_TRANSITIONS``, ``UNIT_TRANSITIONS`` in ``portal.choices``) allow the
move, and only in the states the caller says it saw. A move the row's state does not allow is
refused by changing nothing and answering False (or 0): a redelivered task, or two workers
racing, find the row already moved and do nothing. A call that asks for a move no named
state allows is a bug in the caller, not a race, and raises ``IllegalTransition``.

A move writes the status or phase and only the columns its caller names; a unit's ``site``
is never one of them: ``unit_place`` alone writes it, over the sites the caller read
(``from_sites``), so a move cannot undo a placement made meanwhile. A move naming ``site``
raises ``IllegalTransition``.

Services (``portal.services``), the controller and the webhook's decision recorder
(``portal.admission.queue``) call these; nothing else writes ``status``, ``phase`` or a
unit's ``site``. ``unit_move`` also writes the unit's "unit-phase" event; other events stay
with the callers, who know what to say.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.db import transaction
from django.db.models import Case, CharField, QuerySet, Value, When
from django.utils import timezone

from portal.choices import FINAL_UNIT, RUN_TRANSITIONS, UNIT_TRANSITIONS, UnitPhase
from portal.models import RunEvent, UnitRun, WorkflowRun


class IllegalTransition(ValueError):
    """A move that the transition table allows from none of the states named."""


def _allowed_from(
    table: Mapping[str, set[str]], to: str, from_: Iterable[str] | None, what: str
) -> list[str]:
    if to not in table:
        raise IllegalTransition(f"{to!r} is not a {what}")
    named = list(table) if from_ is None else list(dict.fromkeys(from_))
    allowed = [s for s in named if to in table.get(s, set())]
    if not allowed:
        raise IllegalTransition(f"no {what} move to {to} from {', '.join(named) or 'nothing'}")
    return allowed


# Columns a move may not write: each has its own guarded writer here.
GUARDED = {"site": "unit_place", "status": "run_move", "phase": "units_move"}


def _refuse_guarded(fields: Mapping[str, Any]) -> None:
    for name in fields:
        if name in GUARDED:
            raise IllegalTransition(
                f"a move may not write {name!r}: {GUARDED[name]} is its only writer"
            )


def run_allowed_from(to: str, from_: Iterable[str] | None = None) -> list[str]:
    """The statuses (of ``from_``, default all) from which a run may move to ``to``."""
    return _allowed_from(RUN_TRANSITIONS, to, from_, "run status")


def unit_allowed_from(to: str, from_: Iterable[str] | None = None) -> list[str]:
    """The phases (of ``from_``, default all) from which a unit may move to ``to``."""
    return _allowed_from(UNIT_TRANSITIONS, to, from_, "unit phase")


def run_move(run_id: int, to: str, *, from_: Iterable[str] | None = None, **fields: Any) -> bool:
    """Move a run to status ``to`` (with ``fields``) if it is in an allowed status among
    ``from_``. True when it moved."""
    _refuse_guarded(fields)
    allowed = run_allowed_from(to, from_)
    return bool(
        WorkflowRun.objects.filter(pk=run_id, status__in=allowed).update(status=to, **fields)
    )


def units_move(
    units: QuerySet[UnitRun], to: str, *, from_: Iterable[str] | None = None, **fields: Any
) -> int:
    """Move the units of ``units`` (narrowed by the caller: a pk, an attempt) to phase ``to``
    (with ``fields``), those in an allowed phase among ``from_``. Returns how many moved."""
    _refuse_guarded(fields)
    allowed = unit_allowed_from(to, from_)
    return units.filter(phase__in=allowed).update(phase=to, **fields)


def unit_move(unit: UnitRun, to: str, *, message: str = "", **fields: Any) -> bool:
    """Move one unit, as last read (its phase and attempt), to phase ``to``; the instance
    follows and an event says so. A final phase stamps ``finished_at`` unless given."""
    _refuse_guarded(fields)
    now = timezone.now()
    extra: dict[str, Any] = {"updated_at": now, **fields}
    if message:
        extra["message"] = message
    if to in FINAL_UNIT and "finished_at" not in fields:
        extra["finished_at"] = now
    if unit.phase not in unit_allowed_from(to):  # raises for a phase nothing moves to
        return False  # refused: nothing changes
    moved = units_move(
        UnitRun.objects.filter(pk=unit.pk, attempt=unit.attempt), to, from_=[unit.phase], **extra
    )
    if moved:
        old = unit.phase
        unit.phase = to
        for k, v in extra.items():
            setattr(unit, k, v)
        _phase_event(unit, old, to, message).save()
    return bool(moved)


def _phase_event(unit: UnitRun, old: str, to: str, message: str = "") -> RunEvent:
    """The "unit-phase" event of a move (not saved)."""
    text = f"{unit.name}: {old} → {to}" + (f" ({message})" if message else "")
    return RunEvent(run_id=unit.run_id, unit=unit, kind="unit-phase", message=text)


def units_start(starts: Iterable[tuple[UnitRun, Any, str]]) -> list[UnitRun]:
    """``unit_move`` to Running for many units at once, each ``(unit, started_at or None,
    binding_version)`` as last read (its phase and attempt): the units still in that phase
    and attempt move (their rows locked, then updated per start time), one event each, and
    the instances follow. Returns the units that moved. A fan-out's ten thousand steps start
    within seconds of each other: three statements per unit were most of what the watcher
    did under one."""
    to = UnitPhase.RUNNING
    by_pk = {unit.pk: (unit, started, version) for unit, started, version in starts}
    for unit, _, _ in by_pk.values():
        if unit.phase not in unit_allowed_from(to):  # raises for a phase nothing moves to
            raise IllegalTransition(f"{unit.name}: no unit phase move to {to} from {unit.phase}")
    if not by_pk:
        return []
    now = timezone.now()
    with transaction.atomic():
        locked = _locked_as_read({pk: u for pk, (u, _, _) in by_pk.items()})
        by_start: dict[Any, list[int]] = {}
        for pk in locked:
            by_start.setdefault(by_pk[pk][1], []).append(pk)
        for started, pks in by_start.items():
            fields: dict[str, Any] = {
                "updated_at": now,
                **({"started_at": started} if started else {}),
            }
            versions = [When(pk=pk, then=Value(by_pk[pk][2])) for pk in pks]
            UnitRun.objects.filter(pk__in=pks).update(
                phase=to, binding_version=Case(*versions, output_field=CharField()), **fields
            )
        moved = [by_pk[pk][0] for pk in locked]
        RunEvent.objects.bulk_create([_phase_event(u, u.phase, to) for u in moved])
    for unit in moved:
        _, started, version = by_pk[unit.pk]
        unit.phase, unit.updated_at, unit.binding_version = to, now, version
        unit.started_at = started or unit.started_at
    return moved


def _locked_as_read(units: Mapping[int, UnitRun]) -> list[int]:
    """The pks of ``units`` whose rows are still at the phase and attempt read, locked until
    the transaction ends."""
    rows = (
        UnitRun.objects.select_for_update()
        .filter(pk__in=list(units))
        .order_by("pk")
        .values_list("pk", "attempt", "phase")
    )
    return [
        pk
        for pk, attempt, phase in rows
        if (attempt, phase) == (units[pk].attempt, units[pk].phase)
    ]


def unit_place(
    units: QuerySet[UnitRun], site: str, *, from_sites: Iterable[str], **fields: Any
) -> int:
    """Record where the units of ``units`` (narrowed by the caller to one attempt) run: only
    over a site among ``from_sites``, so a later or a concurrent placement is not undone.
    ``fields`` go with the placement (its reason, its time), never a status or phase."""
    _refuse_guarded(fields)
    return units.filter(site__in=list(from_sites)).update(site=site, **fields)
