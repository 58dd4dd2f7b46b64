"""A run's status from its units (``portal.controller.outcome``), without the database: the
units' rows as the advance reads them, the entrypoint's DAG or steps from the compiled spec."""

from __future__ import annotations

from typing import Any

from placement.phase import FAIL_FAST_MESSAGE
from portal.choices import RunStatus
from portal.controller import outcome
from portal.models import UnitRun, WorkflowRun


def run_of(entry: dict[str, Any]) -> WorkflowRun:
    return WorkflowRun(compiled={"entrypoint": "main", "templates": {"main": entry}})


def unit(name: str, phase: str, **spec: Any) -> UnitRun:
    return UnitRun(name=name, phase=phase, workflow_name=f"wf-{name}", spec={"task": name, **spec})


HANDLED = {
    "dag": {
        "tasks": [
            {"name": "B", "template": "t"},
            {"name": "C", "template": "t", "depends": "B.Failed"},
        ]
    }
}


def test_a_handled_failure_succeeds() -> None:
    decided = outcome.decide(run_of(HANDLED), [unit("B", "Failed"), unit("C", "Succeeded")])
    assert decided == outcome.Outcome(RunStatus.SUCCEEDED, ())


def test_a_handler_omitted_on_a_succeeded_branch_succeeds() -> None:
    units = [unit("B", "Succeeded"), unit("C", "Omitted")]
    assert outcome.decide(run_of(HANDLED), units).status == RunStatus.SUCCEEDED


def test_an_unhandled_failure_fails_and_names_the_unit() -> None:
    chain = {"dag": {"tasks": [{"name": "A"}, {"name": "B", "dependencies": ["A"]}]}}
    decided = outcome.decide(run_of(chain), [unit("A", "Failed"), unit("B", "Omitted")])
    assert decided.status == RunStatus.FAILED
    assert outcome.message(decided) == "A: Failed"


def test_a_loops_items_are_its_task_group() -> None:
    entry = {
        "dag": {
            "tasks": [
                {"name": "fan", "continueOn": {"failed": True}},
                {"name": "after", "dependencies": ["fan"]},
            ]
        }
    }
    units = [
        UnitRun(
            name="fan",
            phase="Failed",
            expanded=True,
            spec={"task": "fan", "item_names": ["fan(0)", "fan(1)"]},
        ),
        unit("fan(0)", "Failed", task="fan", item_index=0),
        unit("fan(1)", "Succeeded", task="fan", item_index=1),
        unit("after", "Succeeded"),
    ]
    assert outcome.task_nodes(units)["fan"] == ["Failed", "Succeeded"]
    assert outcome.decide(run_of(entry), units).status == RunStatus.SUCCEEDED
    assert outcome.continues(run_of(entry)) == {"fan": frozenset({"Failed"})}


def test_a_template_with_fail_fast_ends_with_argos_message() -> None:
    entry = {"failFast": True, **HANDLED}
    decided = outcome.decide(run_of(entry), [unit("B", "Failed"), unit("C", "Succeeded")])
    assert decided.status == RunStatus.FAILED
    assert outcome.message(decided).startswith(FAIL_FAST_MESSAGE + "; B:")


def test_steps_fail_even_for_an_error() -> None:
    entry = {"steps": [[{"name": "a"}], [{"name": "b"}]]}
    decided = outcome.decide(run_of(entry), [unit("a", "Error"), unit("b", "Omitted")])
    assert decided.status == RunStatus.FAILED


def test_a_run_of_one_unit_takes_its_phase() -> None:
    whole = UnitRun(name="main", phase="Error", kind="workflow", spec={"task": "main"})
    assert outcome.decide(run_of(HANDLED), [whole]).status == RunStatus.ERROR
