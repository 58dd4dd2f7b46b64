"""Whether a pending unit may start: its ``depends`` and ``when`` as Argo evaluates them; a unit
they hold back is omitted, skipped or errored, and waits while its dependencies run."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from celery.exceptions import SoftTimeLimitExceeded

from placement import manifests
from portal import state
from portal.choices import FINAL_UNIT, UnitPhase
from portal.controller.expand import entry_inputs
from portal.models import UnitRun, WorkflowRun

log = logging.getLogger(__name__)


def _phase_of(units: list[UnitRun]) -> str | list[str] | None:
    if len(units) == 1 and units[0].spec.get("item_index") is None:
        return units[0].phase if units[0].phase in FINAL_UNIT else None
    phases = [u.phase for u in units]
    return phases if all(p in FINAL_UNIT for p in phases) else None


def task_phases(units: list[UnitRun]) -> dict[str, str | list[str] | None]:
    by_task: dict[str, list[UnitRun]] = {}
    for u in units:
        if u.expanded:
            continue
        by_task.setdefault(u.spec.get("task") or u.name, []).append(u)
    return {task: _phase_of(rows) for task, rows in by_task.items()}


def held_back(
    run: WorkflowRun,
    unit: UnitRun,
    phases: Mapping[str, str | list[str] | None],
    outputs: Mapping[str, manifests.TaskOutputs],
    allowed: Mapping[str, frozenset[str]],
) -> bool | None:
    """None when ``depends`` and ``when`` let a pending unit start; otherwise whether holding
    it back moved it (omitted, skipped, errored; False while its dependencies run).
    ``allowed``: the phases each task's ``continueOn`` lets its dependents go on after."""
    try:
        verdict = manifests.evaluate_depends(unit.depends or "", phases, allowed)
    except SoftTimeLimitExceeded:
        raise
    except Exception as exc:  # noqa: BLE001 - any evaluator failure ends the unit, with why
        return _expression_failed(unit, "depends", exc)
    if verdict is None:
        return False
    if verdict is False:
        return state.unit_move(unit, UnitPhase.OMITTED, message="depends not satisfied")
    if not unit.when:
        return None
    try:
        go = manifests.evaluate_when(
            unit.when,
            run.compiled.get("parameters") or {},
            outputs,
            item=unit.spec.get("item"),
            has_item=unit.spec.get("item_index") is not None,
            inputs=entry_inputs(run),
        )
    except manifests.WhenError as exc:
        if unit.spec.get("with_param"):
            # Argo's expandStep: a ``when`` that cannot be decided before the loop expands
            # (it reads ``{{item}}``) is decided per item, after expansion.
            return None
        return state.unit_move(unit, UnitPhase.ERROR, message=f"when: {exc}")
    except SoftTimeLimitExceeded:
        raise
    except Exception as exc:  # noqa: BLE001 - ValueError, RecursionError...: see below
        return _expression_failed(unit, "when", exc)
    if not go:
        return state.unit_move(unit, UnitPhase.SKIPPED, message=f"when '{unit.when}' is false")
    return None


def _expression_failed(unit: UnitRun, what: str, exc: BaseException) -> bool:
    """An expression the evaluator could not evaluate (a bad escape, nesting too deep, a bug
    of ours) errors the unit with the message, once, instead of failing the whole advance on
    every retry and leaving the run Running with nothing said."""
    detail = str(exc) or exc.__class__.__name__
    log.info("run %s unit %s: %s expression failed: %r", unit.run_id, unit.name, what, exc)
    return state.unit_move(
        unit,
        UnitPhase.ERROR,
        message=f"{what}: cannot evaluate: {exc.__class__.__name__}: {detail}"[:2000],
    )
