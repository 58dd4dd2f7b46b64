"""How a run ends, once its units have: the entrypoint's DAG or steps template assessed as
Argo's controller assesses it (``placement.phase``), not "any unit failed".

A failure that the DAG handles (a dependent's ``depends: "A.Failed"``, ``A.Succeeded ||
A.Failed``, ``A || B``), or a target's ``continueOn``, leaves the run Succeeded when every
target task succeeded; a steps template fails with its first group that failed. The entrypoint
template's own ``failFast: true`` ends it Failed with Argo's message once a child failed or
errored, whatever else happened (``checkParallelism``, ``workflow/controller/operator.go``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from placement import phase
from portal.choices import AUX_KINDS, FINAL_UNIT, RunStatus, UnitKind, UnitPhase
from portal.controller import gates
from portal.models import UnitRun, WorkflowRun

_STATUS = {
    phase.SUCCEEDED: RunStatus.SUCCEEDED,
    phase.FAILED: RunStatus.FAILED,
    phase.ERROR: RunStatus.ERROR,
}


@dataclass(frozen=True)
class Outcome:
    """The run's status once its units ended, the units that made it fail (for the message),
    and the message itself when Argo gives one of its own."""

    status: str
    bad: tuple[UnitRun, ...]
    message: str = ""


def _counts(unit: UnitRun) -> bool:
    """One of the entrypoint's tasks or steps (or an item of one), not a fan-out's group row
    and not the exit handler."""
    return not unit.expanded and unit.kind not in AUX_KINDS


def _node(unit: UnitRun) -> str | None:
    """The phase of the unit's node as Argo would have it: None before it was started (Argo
    has no node yet), Running while its step workflow runs."""
    if unit.phase in FINAL_UNIT:
        return str(unit.phase)
    if unit.workflow_name or unit.phase == UnitPhase.RUNNING:
        return phase.RUNNING
    return None


def task_nodes(units: Sequence[UnitRun]) -> dict[str, phase.TaskNodes]:
    """Each task's nodes, for ``placement.phase``: a loop's items as a list (an item not
    started yet counts as running: its task group exists), one unit as its phase."""
    rows: dict[str, list[UnitRun]] = {}
    groups: dict[str, UnitRun] = {}
    for u in units:
        if u.kind in AUX_KINDS:
            continue  # not a node of the entrypoint (a transfer serves one)
        task = str(u.spec.get("task") or u.name)
        if u.expanded:
            groups[task] = u
            continue
        rows.setdefault(task, []).append(u)
    nodes: dict[str, phase.TaskNodes] = {}
    for task, found in rows.items():
        if len(found) == 1 and found[0].spec.get("item_index") is None:
            if found[0].spec.get("with_param") and found[0].phase not in FINAL_UNIT:
                nodes[task] = None  # a loop not expanded yet
            else:
                nodes[task] = _node(found[0])
            continue
        nodes[task] = [_node(u) or phase.RUNNING for u in found]
    for task, group in groups.items():
        if task not in rows:
            # Expanded to no item (an empty list): Argo's "Skipped, empty params".
            nodes[task] = [] if group.phase in FINAL_UNIT else None
    return nodes


def shape(run: WorkflowRun, units: Sequence[UnitRun]) -> phase.Shape | None:
    """The entrypoint's DAG or steps, when the run's units are its tasks or steps (not one
    unit running the whole entrypoint)."""
    if any(u.kind == UnitKind.WORKFLOW for u in units):
        return None
    present = {str(u.spec.get("task") or u.name) for u in units if u.kind not in AUX_KINDS}
    return phase.shape_of(gates.entry_template(run), present)


def continues(run: WorkflowRun) -> dict[str, frozenset[str]]:
    """The phases each task's ``continueOn`` lets its dependents go on after."""
    found = phase.shape_of(gates.entry_template(run))
    if found is None:
        return {}
    out: dict[str, frozenset[str]] = {}
    for task in [*found.tasks, *(t for g in found.groups or () for t in g)]:
        allowed = {p for p in (phase.FAILED, phase.ERROR) if task.continues_on(p)}
        if allowed:
            out[task.name] = frozenset(allowed)
    return out


def _failed(units: Sequence[UnitRun]) -> list[UnitRun]:
    return [u for u in units if _counts(u) and u.phase in (UnitPhase.FAILED, UnitPhase.ERROR)]


def _fallback(units: Sequence[UnitRun]) -> Outcome:
    """One unit for the whole entrypoint (or no DAG/steps to assess): its own phase."""
    bad = [u for u in _failed(units) if not u.spec.get("continue_on_failed")]
    if any(u.phase == UnitPhase.ERROR for u in bad):
        return Outcome(RunStatus.ERROR, tuple(bad))
    return Outcome(RunStatus.FAILED if bad else RunStatus.SUCCEEDED, tuple(bad))


def decide(run: WorkflowRun, units: Sequence[UnitRun]) -> Outcome:
    """The run's status once every unit (the exit handler aside) has ended."""
    failed = _failed(units)
    if failed and gates.fail_fast(gates.entry_template(run)):
        return Outcome(RunStatus.FAILED, tuple(failed), phase.FAIL_FAST_MESSAGE)
    found = shape(run, units)
    if found is None:
        return _fallback(units)
    verdict = found.assess(task_nodes(units))
    status = _STATUS.get(verdict)
    if status is None:
        # Running with every unit ended: a task the portal does not hold (it should not
        # happen); the units' own phases decide rather than leaving the run Running.
        return _fallback(units)
    if status == RunStatus.SUCCEEDED:
        return Outcome(status, ())
    allowed = continues(run)
    bad = [
        u
        for u in failed
        if u.phase not in allowed.get(str(u.spec.get("task") or u.name), frozenset())
    ]
    return Outcome(status, tuple(bad or failed))


def message(outcome: Outcome, extra: Sequence[UnitRun] = ()) -> str:
    parts = [outcome.message] if outcome.message else []
    parts += [f"{u.name}: {u.message or u.phase}" for u in (*outcome.bad, *extra)]
    return "; ".join(parts)[:2000]
