"""The phase of the entrypoint's DAG or steps template, decided as Argo's controller decides it
from the phases of its tasks or steps (pure: no Django, no I/O).

The portal runs each task or step as a unit at some site; what Argo's controller would say of
the template that holds them is decided here, from the units' phases.

* A DAG follows ``assessDAGPhase`` (``workflow/controller/dag.go``): a walk from the DAG's
  boundary along each task's dependents, where a task that completed (Succeeded, Failed,
  Error) sets its branch's phase and a skipped or omitted task inherits it; only the target
  tasks (``dag.target``, else the leaves: ``findLeafTaskNames``) decide, a failed or errored
  branch winning over a succeeded one. A target whose phase its ``continueOn`` allows does not
  fail the DAG. With ``dag.failFast`` (default true) a failed target decides at once; without
  it, the DAG waits until every target has a node. Any node reached that is not fulfilled
  keeps the DAG Running.
* A steps template follows ``executeSteps`` / ``executeStepGroup`` (``steps.go``): groups in
  order, each done when all its steps are fulfilled, failed when one of them Failed or Errored
  and its ``continueOn`` does not allow it; a failed group fails the template (Failed, whatever
  the child's phase), and no later group runs.
* ``Task.continues_on`` also feeds Argo's ``expandDependency`` (``workflow/common/ancestry.go``):
  a bare task name in ``depends`` (and every name of ``dependencies``) accepts the failure or
  error that task's ``continueOn`` allows (``placement.manifests.evaluate_depends``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from placement.parser.depends import DependsSyntaxError, parse_depends

SUCCEEDED = "Succeeded"
FAILED = "Failed"
ERROR = "Error"
SKIPPED = "Skipped"
OMITTED = "Omitted"
RUNNING = "Running"

# ``NodePhase.Completed``: skipped and omitted nodes are fulfilled but not completed.
COMPLETED = frozenset({SUCCEEDED, FAILED, ERROR})
FULFILLED = COMPLETED | {SKIPPED, OMITTED}

# Argo's message when a template with ``failFast: true`` ends after a child failed
# (``checkParallelism``, ``workflow/controller/operator.go``).
FAIL_FAST_MESSAGE = "template has failed or errored children and failFast enabled"


def failed_or_error(phase: str | None) -> bool:
    return phase in (FAILED, ERROR)


@dataclass(frozen=True)
class Task:
    """A DAG task or a step: its name, the tasks it depends on (a DAG's ``dependencies`` or
    the names in its ``depends``), and the phases its ``continueOn`` lets the template go on
    after."""

    name: str
    dependencies: tuple[str, ...] = ()
    continue_on_failed: bool = False
    continue_on_error: bool = False

    def continues_on(self, phase: str | None) -> bool:
        """``DAGTask.ContinuesOn`` / ``WorkflowStep.ContinuesOn``."""
        return (phase == FAILED and self.continue_on_failed) or (
            phase == ERROR and self.continue_on_error
        )


# What one task's nodes are: None when it has no node yet (not started), a phase for a task
# of one node, a list of its items' phases for an expanded task (``withItems``...).
TaskNodes = str | Sequence[str] | None


def group_phase(items: Sequence[str]) -> str:
    """A TaskGroup's phase once all its items are fulfilled (``executeDAGTask``: Succeeded,
    unless an item Failed or Errored, the last such item's phase); Running before. An empty
    loop is Skipped ("Skipped, empty params")."""
    if not items:
        return SKIPPED
    if any(p not in FULFILLED for p in items):
        return RUNNING
    phase = SUCCEEDED
    for p in items:
        if failed_or_error(p):
            phase = p
    return phase


def leaf_tasks(tasks: Sequence[Task]) -> list[str]:
    """``findLeafTaskNames``: the tasks no other task depends on, sorted."""
    depended = {d for t in tasks for d in t.dependencies}
    return sorted(t.name for t in tasks if t.name not in depended)


def assess_dag(
    tasks: Sequence[Task],
    nodes: Mapping[str, TaskNodes],
    *,
    targets: Sequence[str] | None = None,
    fail_fast: bool = True,
) -> str:
    """``assessDAGPhase``: Running, Succeeded, Failed or Error."""
    by_name = {t.name: t for t in tasks}
    wanted = list(targets) if targets else leaf_tasks(tasks)
    dependents: dict[str, list[str]] = {t.name: [] for t in tasks}
    for t in tasks:
        for d in dict.fromkeys(t.dependencies):
            if d in dependents:
                dependents[d].append(t.name)
    # The boundary's children: the tasks without dependencies that have a node.
    queue: deque[tuple[str, str]] = deque()
    seen: set[tuple[str, str]] = set()

    def add(names: Iterable[str], phase: str) -> None:
        # ``uniquePhaseNodeQueue``: a node is walked once per branch phase reaching it.
        for name in names:
            if nodes.get(name) is None or (name, phase) in seen:
                continue
            seen.add((name, phase))
            queue.append((name, phase))

    add((t.name for t in tasks if not any(d in by_name for d in t.dependencies)), SUCCEEDED)
    deduced: dict[str, str] = {}
    while queue:
        name, branch = queue.popleft()
        found = nodes.get(name)
        items: Sequence[str] | None = None
        if isinstance(found, str):
            phase = found
        else:
            items = list(found or ())
            phase = group_phase(items)
        if phase not in FULFILLED:
            return RUNNING
        if phase in COMPLETED:
            branch = phase
        if name in wanted and not failed_or_error(deduced.get(name)):
            deduced[name] = branch
        if items:
            # A TaskGroup's children are its items; the items' children are the dependents.
            for item in items:
                add(dependents[name], item if item in COMPLETED else branch)
        else:
            add(dependents[name], branch)
    return _dag_result(wanted, deduced, by_name, fail_fast)


def _dag_result(
    wanted: Sequence[str],
    deduced: Mapping[str, str],
    by_name: Mapping[str, Task],
    fail_fast: bool,
) -> str:
    """The DAG's phase from the branch phase each target task was reached with (``deduced``):
    Running for a task not reached yet, Failed or Error for one its ``continueOn`` does not
    let fail; with ``fail_fast`` the first failure decides, without it a task not reached."""
    result = SUCCEEDED
    for name in wanted:
        branch_phase = deduced.get(name, "")
        if branch_phase == "":
            result = RUNNING
            if not fail_fast:
                break
        elif failed_or_error(branch_phase):
            task = by_name.get(name)
            if task is not None and task.continues_on(branch_phase):
                continue
            result = branch_phase
            if fail_fast:
                break
    return result


def assess_steps(groups: Sequence[Sequence[Task]], nodes: Mapping[str, TaskNodes]) -> str:
    """``executeSteps``: Running, Succeeded or Failed."""
    for group in groups:
        children: list[tuple[Task, str]] = []
        for step in group:
            found = nodes.get(step.name)
            if found is None:
                return RUNNING
            for phase in [found] if isinstance(found, str) else found:
                children.append((step, phase))
        if any(phase not in FULFILLED for _, phase in children):
            return RUNNING
        if any(failed_or_error(p) and not step.continues_on(p) for step, p in children):
            return FAILED
    return SUCCEEDED


def _continue_on(call: Mapping[str, Any]) -> tuple[bool, bool]:
    found = call.get("continueOn")
    if not isinstance(found, Mapping):
        return False, False
    return found.get("failed") is True, found.get("error") is True


def _dependencies(call: Mapping[str, Any]) -> tuple[str, ...]:
    depends = call.get("depends")
    if isinstance(depends, str) and depends.strip():
        try:
            return tuple(sorted(parse_depends(depends.strip()).tasks()))
        except DependsSyntaxError:
            return ()
    deps = call.get("dependencies")
    return tuple(str(d) for d in deps) if isinstance(deps, list) else ()


def task_of(call: Mapping[str, Any], *, with_dependencies: bool = True) -> Task:
    failed, error = _continue_on(call)
    return Task(
        name=str(call.get("name")),
        dependencies=_dependencies(call) if with_dependencies else (),
        continue_on_failed=failed,
        continue_on_error=error,
    )


@dataclass(frozen=True)
class Shape:
    """What of the entrypoint template decides its phase: a DAG's tasks (with its targets and
    ``dag.failFast``) or a steps template's groups."""

    tasks: tuple[Task, ...] = ()
    targets: tuple[str, ...] = ()
    fail_fast: bool = True
    groups: tuple[tuple[Task, ...], ...] | None = None

    def task(self, name: str) -> Task | None:
        for t in self.tasks:
            if t.name == name:
                return t
        for group in self.groups or ():
            for t in group:
                if t.name == name:
                    return t
        return None

    def assess(self, nodes: Mapping[str, TaskNodes]) -> str:
        if self.groups is not None:
            return assess_steps(self.groups, nodes)
        return assess_dag(self.tasks, nodes, targets=self.targets or None, fail_fast=self.fail_fast)


def shape_of(entry: Mapping[str, Any], present: Iterable[str] | None = None) -> Shape | None:
    """The shape of a DAG or steps ``entry`` template (None for any other). ``present``: the
    task names that exist (``dag.target`` keeps only its targets and their ancestors); the
    targets are those of ``dag.target`` when it names present tasks, else the leaves."""
    dag = entry.get("dag")
    if isinstance(dag, Mapping):
        calls = [t for t in dag.get("tasks") or [] if isinstance(t, Mapping) and t.get("name")]
        keep = set(present) if present is not None else None
        tasks = tuple(task_of(c) for c in calls if keep is None or str(c["name"]) in keep)
        names = {t.name for t in tasks}
        target = dag.get("target")
        targets: tuple[str, ...] = ()
        if isinstance(target, str) and target.strip():
            named = tuple(n for n in target.split(" ") if n in names)
            targets = named if named else ()
        return Shape(tasks=tasks, targets=targets, fail_fast=dag.get("failFast") is not False)
    steps = entry.get("steps")
    if isinstance(steps, list):
        groups = tuple(
            tuple(
                task_of(s, with_dependencies=False)
                for s in group
                if isinstance(s, Mapping) and s.get("name")
            )
            for group in steps
            if isinstance(group, list)
        )
        return Shape(groups=groups)
    return None
