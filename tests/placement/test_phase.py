"""The entrypoint's DAG or steps phase (``placement.phase``), case by case from Argo's own
unit tests of the DAG phase (``workflow/controller/dag_test.go``; each test names the upstream
test it ports, its workflow reduced to the tasks' graph and the phases of their nodes) and from
``steps.go``'s rules."""

from __future__ import annotations

import pytest

from placement import manifests
from placement.phase import (
    FAILED,
    RUNNING,
    SUCCEEDED,
    Task,
    assess_dag,
    assess_steps,
    group_phase,
    leaf_tasks,
    shape_of,
)

DIAMOND = [
    Task("A"),
    Task("B", ("A",)),
    Task("C", ("A",)),
    Task("D", ("B", "C")),
]


def test_dag_xfail() -> None:
    """TestDagXfail (testdata/dag_xfail.yaml): C exits 1, D is omitted; the omitted target
    inherits the failed branch over the succeeded one."""
    nodes = {"A": "Succeeded", "B": "Succeeded", "C": "Failed", "D": "Omitted"}
    assert assess_dag(DIAMOND, nodes) == FAILED


def test_dag_xfail_waits_while_a_branch_runs() -> None:
    """TestDagXfail's workflow one reconciliation earlier: C failed, D not created yet, B still
    running: any node reached that is not fulfilled keeps the DAG Running."""
    nodes = {"A": "Succeeded", "B": "Running", "C": "Failed", "D": None}
    assert assess_dag(DIAMOND, nodes) == RUNNING


def test_dag_retry_succeeded() -> None:
    """TestDagRetrySucceeded (testdata/dag_retry_succeeded.yaml): the task's retries ended
    Succeeded; the DAG succeeds."""
    assert assess_dag([Task("step1")], {"step1": "Succeeded"}) == SUCCEEDED


def test_dag_retry_exhausted_xfail() -> None:
    """TestDagRetryExhaustedXfail (testdata/dag-exhausted-retries-xfail.yaml): a nested DAG
    failed, the task after it was omitted: the target inherits Failed."""
    tasks = [Task("success1"), Task("sub-dag1", ("success1",)), Task("success2", ("sub-dag1",))]
    nodes = {"success1": "Succeeded", "sub-dag1": "Failed", "success2": "Omitted"}
    assert assess_dag(tasks, nodes) == FAILED


DISABLE_FAIL_FAST = [
    Task("A"),
    Task("B", ("A",)),
    Task("C", ("A",)),
    Task("D", ("B",)),
    Task("E", ("D",)),
]


def test_dag_disable_fail_fast() -> None:
    """TestDagDisableFailFast (testdata/dag-disable-fail-fast.yaml): C failed, B, D and E
    finished: with failFast false the DAG still fails, once all ended."""
    nodes = {"A": "Succeeded", "B": "Succeeded", "C": "Failed", "D": "Succeeded", "E": "Succeeded"}
    assert assess_dag(DISABLE_FAIL_FAST, nodes, fail_fast=False) == FAILED


@pytest.mark.parametrize(("fail_fast", "expected"), [(True, FAILED), (False, RUNNING)])
def test_fail_fast_stops_waiting_for_other_targets(fail_fast: bool, expected: str) -> None:
    """TestDagDisableFailFast's DAG before E had a node (nothing running): with failFast a
    failed target decides at once; without it the DAG waits for every target
    (``assessDAGPhase``'s last loop)."""
    nodes = {"A": "Succeeded", "B": "Succeeded", "C": "Failed", "D": "Succeeded", "E": None}
    assert assess_dag(DISABLE_FAIL_FAST, nodes, fail_fast=fail_fast) == expected


def test_fail_fast_decides_with_the_first_failed_target_and_without_the_last() -> None:
    """``assessDAGPhase``: with failFast the first failed target (in target order) gives the
    phase; without it every target is looked at and the last failed one gives it."""
    tasks = [Task("a"), Task("b")]
    nodes = {"a": "Error", "b": "Failed"}
    assert assess_dag(tasks, nodes, fail_fast=True) == "Error"
    assert assess_dag(tasks, nodes, fail_fast=False) == FAILED


@pytest.mark.parametrize("phase", ["Succeeded", "Failed", "Skipped"])
def test_single_dependency(phase: str) -> None:
    """TestSingleDependency: ``depends: A.<phase>`` runs TestSingle after A ended so; while
    TestSingle runs, the DAG is Running."""
    tasks = [Task("A"), Task("TestSingle", ("A",))]
    assert manifests.evaluate_depends(f"A.{phase}", {"A": phase}) is True
    assert assess_dag(tasks, {"A": phase, "TestSingle": "Pending"}) == RUNNING
    assert assess_dag(tasks, {"A": phase, "TestSingle": "Succeeded"}) == SUCCEEDED


def test_assess_phase_continue_on_expanded_task() -> None:
    """TestDagAssessPhaseContinueOnExpandedTask: one item of a loop with ``continueOn.failed``
    fails; the task after it (a bare dependency) runs and succeeds: Succeeded."""
    loop = Task("one-will-fail", continue_on_failed=True)
    tasks = [loop, Task("whalesay", ("one-will-fail",), continue_on_failed=True)]
    items = ["Failed", "Succeeded"]
    allowed = {"one-will-fail": frozenset({FAILED})}
    assert manifests.evaluate_depends("one-will-fail", {"one-will-fail": items}, allowed)
    assert not manifests.evaluate_depends("one-will-fail", {"one-will-fail": items})
    assert assess_dag(tasks, {"one-will-fail": items, "whalesay": "Succeeded"}) == SUCCEEDED


def test_assess_phase_continue_on_expanded_task_variables() -> None:
    """TestDagAssessPhaseContinueOnExpandedTaskVariables: the loop's items come from an
    earlier task's output; the same outcome."""
    tasks = [
        Task("generate", continue_on_failed=True),
        Task("one-will-fail", ("generate",), continue_on_failed=True),
        Task("whalesay", ("one-will-fail",), continue_on_failed=True),
    ]
    nodes = {
        "generate": "Succeeded",
        "one-will-fail": ["Succeeded", "Failed", "Succeeded"],
        "whalesay": "Succeeded",
    }
    assert assess_dag(tasks, nodes) == SUCCEEDED


def test_empty_with_param_dag() -> None:
    """TestEmptyWithParamDAG: a loop over an empty list, then a task after it: Succeeded."""
    tasks = [
        Task("scheduler"),
        Task("children", ("scheduler",)),
        Task("postprocess", ("children",)),
    ]
    nodes = {"scheduler": "Succeeded", "children": [], "postprocess": "Succeeded"}
    assert group_phase([]) == "Skipped"
    assert assess_dag(tasks, nodes) == SUCCEEDED


def test_fails_with_param_dag() -> None:
    """TestFailsWithParamDAG: an item of the loop failed, the task after it was omitted:
    Failed (the omitted target inherits the failed item's branch)."""
    tasks = [
        Task("gen-tasks"),
        Task("process-tasks", ("gen-tasks",)),
        Task("finish", ("process-tasks",)),
    ]
    nodes = {
        "gen-tasks": "Succeeded",
        "process-tasks": ["Succeeded", "Failed", "Succeeded"],
        "finish": "Omitted",
    }
    assert assess_dag(tasks, nodes) == FAILED


def test_leaf_continue_on() -> None:
    """TestLeafContinueOn: a leaf with ``continueOn.failed`` fails; the DAG succeeds."""
    tasks = [Task("A"), Task("B", ("A",), continue_on_failed=True)]
    assert assess_dag(tasks, {"A": "Succeeded", "B": "Failed"}) == SUCCEEDED
    # Only the phase continueOn names: an error is not a failure.
    assert assess_dag(tasks, {"A": "Succeeded", "B": "Error"}) == "Error"


def test_orphaned_task_group_completes() -> None:
    """TestDAGOrphanedTaskGroupCompletes: a task group whose items are all fulfilled is
    complete (``completableTaskGroupPhase``), Failed when an item failed."""
    tasks = [Task("fan"), Task("after", ("fan",))]
    assert group_phase(["Succeeded", "Failed"]) == FAILED
    assert group_phase(["Succeeded", "Running"]) == RUNNING
    assert assess_dag(tasks, {"fan": ["Succeeded", "Succeeded"], "after": "Succeeded"}) == (
        SUCCEEDED
    )


@pytest.mark.parametrize(
    ("depends", "c_phase", "d_phase", "expected"),
    [
        ("C.Failed", "Failed", "Succeeded", SUCCEEDED),
        ("C.Succeeded || C.Failed", "Failed", "Succeeded", SUCCEEDED),
        ("B || C", "Failed", "Succeeded", SUCCEEDED),
        ("C.Failed", "Succeeded", "Omitted", SUCCEEDED),
    ],
)
def test_a_failure_handled_by_depends_does_not_fail_the_dag(
    depends: str, c_phase: str, d_phase: str, expected: str
) -> None:
    """``assessDAGPhase``: only target tasks decide; a completed task sets its branch's
    phase, so a target that ran after C's failure (or was omitted after C's success, on a
    succeeded branch) leaves the DAG Succeeded."""
    tasks = [Task("A"), Task("B", ("A",)), Task("C", ("A",)), Task("D", ("B", "C"))]
    nodes = {"A": "Succeeded", "B": "Succeeded", "C": c_phase, "D": d_phase}
    phases = {"B": "Succeeded", "C": c_phase}
    assert manifests.evaluate_depends(depends, phases) is (d_phase != "Omitted")
    assert assess_dag(tasks, nodes) == expected


def test_an_omitted_target_on_a_failed_branch_fails_the_dag() -> None:
    """The handler was the target, and it was omitted after a failure it does not handle."""
    tasks = [Task("A"), Task("handler", ("A",))]
    assert assess_dag(tasks, {"A": "Failed", "handler": "Omitted"}) == FAILED


def test_dag_target_decides_alone() -> None:
    """``dag.target``: only the named tasks decide, not the leaves."""
    tasks = [Task("A"), Task("B", ("A",)), Task("C", ("A",))]
    nodes = {"A": "Succeeded", "B": "Succeeded", "C": "Failed"}
    assert assess_dag(tasks, nodes, targets=["B"]) == SUCCEEDED
    assert assess_dag(tasks, nodes) == FAILED
    assert leaf_tasks(tasks) == ["B", "C"]


def test_steps_fail_with_the_first_failed_group() -> None:
    """``executeStepGroup``: a group fails when a step Failed or Errored without continueOn
    for that phase, and the steps template fails (Failed, even for an error)."""
    groups = [[Task("A")], [Task("B"), Task("C")], [Task("D")]]
    assert assess_steps(groups, {"A": "Succeeded", "B": "Succeeded", "C": "Error"}) == FAILED
    assert assess_steps(groups, {"A": "Succeeded", "B": "Running", "C": "Failed"}) == RUNNING


def test_steps_continue_on() -> None:
    """The examples' continue-on-fail.yaml: C fails with ``continueOn.failed``, D runs after
    it (its bare dependency accepts C's failure), the steps succeed."""
    groups = [[Task("A")], [Task("B"), Task("C", continue_on_failed=True)], [Task("D")]]
    nodes = {"A": "Succeeded", "B": "Succeeded", "C": "Failed", "D": "Succeeded"}
    assert assess_steps(groups, nodes) == SUCCEEDED
    allowed = {"C": frozenset({FAILED})}
    assert manifests.evaluate_depends("B && C", {"B": "Succeeded", "C": "Failed"}, allowed)
    assert assess_steps(groups, {**nodes, "D": None}) == RUNNING


def test_shape_of_reads_the_entrypoint() -> None:
    entry = {
        "name": "main",
        "dag": {
            "failFast": False,
            "target": "B",
            "tasks": [
                {"name": "A", "template": "t"},
                {
                    "name": "B",
                    "depends": "A.Failed",
                    "template": "t",
                    "continueOn": {"error": True},
                },
                {"name": "C", "dependencies": ["A"], "template": "t"},
            ],
        },
    }
    shape = shape_of(entry, present={"A", "B"})
    assert shape is not None
    assert [t.name for t in shape.tasks] == ["A", "B"]
    assert shape.targets == ("B",)
    assert shape.fail_fast is False
    b = shape.task("B")
    assert b is not None and b.dependencies == ("A",) and b.continue_on_error
    steps = shape_of({"steps": [[{"name": "x", "continueOn": {"failed": True}}]]})
    assert steps is not None and steps.groups is not None
    assert steps.groups[0][0].continue_on_failed
    assert shape_of({"container": {"image": "busybox"}}) is None
