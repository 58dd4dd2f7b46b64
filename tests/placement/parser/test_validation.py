"""Intake: structural and semantic validation, every problem reported with its path."""

from __future__ import annotations

from placement.parser import (
    FieldError,
)
from tests.placement.parser.helpers import HEAD, errors, paths


def test_it_reports_every_problem_at_once_with_paths() -> None:
    errs = errors(
        HEAD
        + """
    spec:
      entrypoint: missing
      templates:
      - name: main
        dag:
          tasks:
          - name: a
            template: nope
          - name: b
            dependencies: [zzz]
            template: leaf
          - name: c
            depends: "a && (b.Succeeded ||"
            template: leaf
      - name: leaf
        container: {image: x}
      - name: leaf
        container: {image: y}
    """
    )
    assert {
        "spec.entrypoint",
        "spec.templates[0].dag.tasks[0].template",
        "spec.templates[0].dag.tasks[1].dependencies[0]",
        "spec.templates[0].dag.tasks[2].depends",
        "spec.templates[2].name",
    } <= paths(errs)


def test_schema_errors_carry_field_paths() -> None:
    errs = errors(
        HEAD
        + """
    spec:
      entrypoint: main
      templates:
      - name: main
        container: {image: x, args: notalist}
        retryStrategy: {limit: [1]}
      - container: {image: y}
    """
    )
    by_path = {e.path: e.message for e in errs}
    assert by_path["spec.templates[0].container.args"] == "must be of type array, found a string"
    assert "spec.templates[0].retryStrategy.limit" in by_path
    # Meaning is checked once the structure is sound (a nameless template is a meaning error).
    nameless = errors(
        HEAD
        + """
    spec:
      entrypoint: main
      templates:
      - name: main
        container: {image: x}
      - container: {image: y}
    """
    )
    assert nameless == [FieldError("spec.templates[1].name", "a template needs a name")]


def test_it_needs_a_name_and_valid_names() -> None:
    errs = errors("""
    apiVersion: argoproj.io/v1alpha1
    kind: Workflow
    metadata: {labels: {a: b}}
    spec:
      entrypoint: Main_1
      templates:
      - {name: Main_1, container: {image: x}}
    """)
    assert {"metadata", "spec.templates[0].name"} <= paths(errs)
    bad = errors(
        HEAD.replace("generateName: t-", "name: Not_Valid")
        + "spec: {entrypoint: a, templates: [{name: a, container: {image: x}}]}"
    )
    assert paths(bad) == {"metadata.name"}


def test_it_refuses_dependency_cycles() -> None:
    errs = errors(
        HEAD
        + """
    spec:
      entrypoint: main
      templates:
      - name: main
        dag:
          tasks:
          - {name: a, template: leaf, depends: c}
          - {name: b, template: leaf, depends: a}
          - {name: c, template: leaf, dependencies: [b]}
          - {name: d, template: leaf}
      - {name: leaf, container: {image: x}}
    """
    )
    cycle = [e for e in errs if "cycle" in e.message]
    assert len(cycle) == 1
    assert cycle[0].path.startswith("spec.templates[0].dag.tasks[")
    assert (
        "a -> b -> c -> a" in cycle[0].message
        or "c -> a -> b -> c" in cycle[0].message
        or "b -> c -> a -> b" in cycle[0].message
    )


def test_it_refuses_a_task_with_both_depends_and_dependencies() -> None:
    errs = errors(
        HEAD
        + """
    spec:
      entrypoint: main
      templates:
      - name: main
        dag:
          tasks:
          - {name: a, template: leaf}
          - {name: b, template: leaf, depends: a, dependencies: [a]}
      - {name: leaf, container: {image: x}}
    """
    )
    assert "spec.templates[0].dag.tasks[1]" in paths(errs)


def test_a_template_has_exactly_one_type() -> None:
    errs = errors(
        HEAD
        + """
    spec:
      entrypoint: main
      templates:
      - {name: main, container: {image: x}, script: {image: y, source: z}}
    """
    )
    assert errs == [
        FieldError("spec.templates[0]", "a template has exactly one type; found container, script")
    ]
