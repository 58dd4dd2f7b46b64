"""The one writer of run and unit state: every move the tables allow works, every other is
refused and changes nothing."""

from __future__ import annotations

import ast
import importlib
import itertools
from datetime import timedelta
from pathlib import Path

import pytest
from django.apps import apps
from django.utils import timezone

from portal import state
from portal.choices import RUN_TRANSITIONS, UNIT_TRANSITIONS, RunStatus, UnitPhase
from portal.models import RunEvent, UnitRun, WorkflowRun
from tests.factories import UserFactory
from tests.portal.helpers import make_run

pytestmark = pytest.mark.django_db

RUN_MOVES = [(a, b) for a, targets in RUN_TRANSITIONS.items() for b in sorted(targets)]
RUN_REFUSED = [
    (a, b)
    for a, b in itertools.product(RunStatus.values, RunStatus.values)
    if b not in RUN_TRANSITIONS[a]
]
UNIT_MOVES = [(a, b) for a, targets in UNIT_TRANSITIONS.items() for b in sorted(targets)]
UNIT_REFUSED = [
    (a, b)
    for a, b in itertools.product(UnitPhase.values, UnitPhase.values)
    if b not in UNIT_TRANSITIONS[a]
]
# Whether anything may move to a state at all (else asking for it is a bug, not a race).
RUN_TRANSITIONS_TO = {s: any(s in t for t in RUN_TRANSITIONS.values()) for s in RunStatus.values}
UNIT_TRANSITIONS_TO = {s: any(s in t for t in UNIT_TRANSITIONS.values()) for s in UnitPhase.values}


def _run(status: str) -> WorkflowRun:
    return make_run(UserFactory(), status=status, units=[], decisions=False)


def _unit(phase: str) -> UnitRun:
    run = make_run(UserFactory(), units=[("u", "site-a", phase, [])], decisions=False)
    return run.units.get()


def test_every_status_and_phase_has_a_row_in_its_table():
    assert set(RUN_TRANSITIONS) == set(RunStatus.values)
    assert set(UNIT_TRANSITIONS) == set(UnitPhase.values)


@pytest.mark.parametrize(("old", "new"), RUN_MOVES)
def test_it_moves_a_run_along_every_allowed_transition(old, new):
    run = _run(old)
    assert state.run_move(run.pk, new, message="moved")
    run.refresh_from_db()
    assert (run.status, run.message) == (new, "moved")


@pytest.mark.parametrize(("old", "new"), RUN_REFUSED)
def test_it_refuses_a_run_move_the_table_forbids_and_changes_nothing(old, new):
    run = _run(old)
    if RUN_TRANSITIONS_TO[new]:
        assert not state.run_move(run.pk, new, message="moved")
    else:
        with pytest.raises(state.IllegalTransition):
            state.run_move(run.pk, new, message="moved")
    run.refresh_from_db()
    assert (run.status, run.message) == (old, "")


@pytest.mark.parametrize(("old", "new"), RUN_REFUSED)
def test_a_run_move_from_a_forbidden_state_named_by_the_caller_raises(old, new):
    run = _run(old)
    with pytest.raises(state.IllegalTransition):
        state.run_move(run.pk, new, from_=[old])
    run.refresh_from_db()
    assert run.status == old


@pytest.mark.parametrize(("old", "new"), UNIT_MOVES)
def test_it_moves_a_unit_along_every_allowed_transition(old, new):
    unit = _unit(old)
    assert state.unit_move(unit, new, message="moved")
    assert unit.phase == new
    unit.refresh_from_db()
    assert (unit.phase, unit.message) == (new, "moved")
    assert RunEvent.objects.filter(unit=unit, kind="unit-phase").count() == 1


@pytest.mark.parametrize(("old", "new"), UNIT_REFUSED)
def test_it_refuses_a_unit_move_the_table_forbids_and_changes_nothing(old, new):
    unit = _unit(old)
    before = unit.updated_at
    if UNIT_TRANSITIONS_TO[new]:
        assert not state.unit_move(unit, new, message="moved")
        assert not state.units_move(UnitRun.objects.filter(pk=unit.pk), new, message="moved")
    else:
        with pytest.raises(state.IllegalTransition):
            state.unit_move(unit, new, message="moved")
    assert unit.phase == old
    unit.refresh_from_db()
    assert (unit.phase, unit.message, unit.updated_at) == (old, "", before)
    assert not RunEvent.objects.filter(unit=unit).exists()


def test_a_redelivered_move_is_a_no_op():
    unit = _unit(UnitPhase.PENDING)
    stale = UnitRun.objects.get(pk=unit.pk)  # what a second delivery read before the first
    assert state.unit_move(unit, UnitPhase.RUNNING)
    assert not state.unit_move(stale, UnitPhase.RUNNING)
    run = _run(RunStatus.PENDING)
    assert state.run_move(run.pk, RunStatus.RUNNING, from_=[RunStatus.PENDING])
    assert not state.run_move(run.pk, RunStatus.RUNNING, from_=[RunStatus.PENDING])
    assert RunEvent.objects.filter(unit=unit, kind="unit-phase").count() == 1


def test_a_move_of_another_attempt_changes_nothing():
    unit = _unit(UnitPhase.PENDING)
    old = UnitRun.objects.get(pk=unit.pk)
    UnitRun.objects.filter(pk=unit.pk).update(attempt=2)
    assert not state.unit_move(old, UnitPhase.RUNNING)
    unit.refresh_from_db()
    assert (unit.phase, unit.attempt) == (UnitPhase.PENDING, 2)


def test_units_start_moves_only_the_units_still_as_read_each_with_its_start_and_version():
    run = make_run(
        UserFactory(),
        units=[(f"u{i}", "site-a", UnitPhase.PENDING, []) for i in range(4)],
        decisions=False,
    )
    units = list(run.units.order_by("pk"))
    stale = UnitRun.objects.get(pk=units[0].pk)  # what a second delivery read before the first
    t1, t2 = timezone.now() - timedelta(seconds=5), timezone.now() - timedelta(seconds=2)
    # Meanwhile: one started elsewhere (another fold), one is a new attempt.
    UnitRun.objects.filter(pk=units[2].pk).update(phase=UnitPhase.RUNNING)
    UnitRun.objects.filter(pk=units[3].pk).update(attempt=2)
    moved = state.units_start(
        [
            (units[0], t1, "101"),
            (units[1], t2, "102"),
            (units[2], t1, "103"),
            (units[3], None, "104"),
        ]
    )
    assert [u.pk for u in moved] == [units[0].pk, units[1].pk]
    rows = {u.pk: u for u in run.units.all()}
    assert (rows[units[0].pk].phase, rows[units[0].pk].started_at) == (UnitPhase.RUNNING, t1)
    assert (rows[units[1].pk].started_at, rows[units[1].pk].binding_version) == (t2, "102")
    assert rows[units[0].pk].binding_version == "101"
    assert rows[units[2].pk].binding_version == "" and rows[units[3].pk].phase == "Pending"
    events = RunEvent.objects.filter(run=run, kind="unit-phase").order_by("pk")
    assert [e.message for e in events] == ["u0: Pending → Running", "u1: Pending → Running"]
    # Redelivered: nothing moves again.
    assert state.units_start([(stale, t1, "101")]) == []
    assert units[0].phase == UnitPhase.RUNNING  # the instance followed


def test_units_start_raises_for_a_phase_nothing_starts_from():
    unit = _unit(UnitPhase.SUCCEEDED)
    with pytest.raises(state.IllegalTransition):
        state.units_start([(unit, None, "1")])
    assert UnitRun.objects.get(pk=unit.pk).phase == UnitPhase.SUCCEEDED


def test_a_final_phase_stamps_finished_at():
    unit = _unit(UnitPhase.RUNNING)
    UnitRun.objects.filter(pk=unit.pk).update(finished_at=None)
    unit.refresh_from_db()
    assert state.unit_move(unit, UnitPhase.SUCCEEDED)
    unit.refresh_from_db()
    assert unit.finished_at is not None


def test_a_name_that_is_no_phase_raises():
    unit = _unit(UnitPhase.PENDING)
    with pytest.raises(state.IllegalTransition):
        state.unit_move(unit, "Exploded")
    with pytest.raises(state.IllegalTransition):
        state.run_move(unit.run_id, "Exploded")


def test_a_unit_is_placed_only_over_the_sites_named():
    unit = _unit(UnitPhase.PENDING)
    UnitRun.objects.filter(pk=unit.pk).update(site="")
    one = UnitRun.objects.filter(pk=unit.pk, attempt=unit.attempt)
    assert state.unit_place(one, "site-b", from_sites=[""]) == 1
    assert state.unit_place(one, "site-c", from_sites=["", "site-c"]) == 0
    unit.refresh_from_db()
    assert unit.site == "site-b"


@pytest.mark.parametrize("move", ["run_move", "units_move", "unit_move"])
def test_a_move_naming_a_site_is_refused_and_changes_nothing(move):
    unit = _unit(UnitPhase.PENDING)
    with pytest.raises(state.IllegalTransition, match="unit_place"):
        if move == "run_move":
            state.run_move(unit.run_id, RunStatus.SUCCEEDED, site="site-z")
        elif move == "units_move":
            state.units_move(UnitRun.objects.filter(pk=unit.pk), UnitPhase.RUNNING, site="site-z")
        else:
            state.unit_move(unit, UnitPhase.RUNNING, site="site-z")
    unit.refresh_from_db()
    assert (unit.phase, unit.site, unit.run.status) == (UnitPhase.PENDING, "", RunStatus.RUNNING)


def _substates_migration():
    return importlib.import_module("portal.migrations.0020_unit_substates")


def test_the_migration_fills_the_substate_columns_from_the_spec_and_back():
    run = make_run(
        UserFactory(),
        units=[(n, "site-a", UnitPhase.RUNNING, []) for n in ("t", "x", "c", "g", "e", "s")],
        decisions=False,
    )
    specs = {
        "t": {"kind": "task", "task": "t"},
        "x": {"kind": "exit", "task": "onExit"},
        "c": {"kind": "transfer", "transfer": {"from": "site-a"}},
        "g": {"kind": "task", "expanded": ["g(0:a)", "g(1:b)"]},
        "e": {"kind": "step", "expanded": []},
        "s": {"kind": "workflow", "shutdown_sent": True},
    }
    for name, spec in specs.items():
        UnitRun.objects.filter(run=run, name=name).update(spec=spec)
    migration = _substates_migration()
    migration.substates_to_columns(apps, None)
    rows = {u.name: u for u in run.units.all()}
    assert {n: u.kind for n, u in rows.items()} == {
        "t": "task",
        "x": "exit",
        "c": "transfer",
        "g": "task",
        "e": "step",
        "s": "workflow",
    }
    assert {n for n, u in rows.items() if u.expanded} == {"g"}  # an empty loop is no group
    assert rows["g"].item_names == ["g(0:a)", "g(1:b)"] and rows["e"].item_names == []
    assert {n for n, u in rows.items() if u.shutdown_sent} == {"s"}
    assert not any("expanded" in u.spec or "shutdown_sent" in u.spec for u in rows.values())
    migration.substates_to_spec(apps, None)
    assert {u.name: u.spec for u in run.units.all()} == specs


def test_only_the_state_module_writes_a_status_or_a_phase():
    """Every ``.update(status=...)`` / ``.update(phase=...)`` (and ``site=``) of the portal is in
    ``portal/state.py``: a second writer would bypass the transition tables."""
    root = Path(__file__).resolve().parents[2] / "portal"
    writers = set()
    for path in root.rglob("*.py"):
        if path.name == "state.py" or "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "update"
                and {k.arg for k in node.keywords} & {"status", "phase", "site"}
            ):
                writers.add(f"{path.relative_to(root)}:{node.lineno}")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("run_move", "units_move", "unit_move")
                and "site" in {k.arg for k in node.keywords}
            ):
                writers.add(f"{path.relative_to(root)}:{node.lineno} (a move naming site)")
    assert writers == set()
