"""Work nested inside one unit is counted before anything runs: the pods a unit's step workflow
can create (nested loops multiplied, runtime loops bounded, recursion to Argo's stack depth)
are refused past the limit with the path and the count."""

from __future__ import annotations

from typing import Any

import pytest

from placement.parser import FieldError, Limits, WorkflowInvalid, parse_workflow

LEAF = {"name": "leaf", "container": {"image": "alpine"}}


def workflow(*templates: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "pods-"},
        "spec": {"entrypoint": "main", "templates": [*templates, LEAF]},
    }


def main_dag(*tasks: dict[str, Any]) -> dict[str, Any]:
    return {"name": "main", "dag": {"tasks": list(tasks)}}


def refused(doc: dict[str, Any], **kwargs: Any) -> list[FieldError]:
    with pytest.raises(WorkflowInvalid) as info:
        parse_workflow(doc, **kwargs)
    return info.value.errors


INNER = {
    "name": "inner",
    "steps": [[{"name": "s", "template": "leaf", "withSequence": {"count": "100"}}]],
}
OUTER = {
    "name": "outer",
    "dag": {"tasks": [{"name": "t", "template": "inner", "withItems": list(range(100))}]},
}


def test_nested_loops_multiply_and_are_refused_with_the_path_and_the_count() -> None:
    doc = workflow(
        main_dag({"name": "a", "template": "outer"}, {"name": "b", "template": "leaf"}),
        OUTER,
        INNER,
    )
    (error,) = refused(doc)
    assert error.path == "spec.templates[0].dag.tasks[0]"
    assert "can create 10000 pods" in error.message
    assert "spec.templates[1].dag.tasks[0].withItems: 100 items" in error.message
    assert "spec.templates[2].steps[0][0].withSequence: 100 items" in error.message
    assert "the limit is 5000 pods per unit" in error.message


def test_each_unit_carries_its_count() -> None:
    parsed = parse_workflow(
        workflow(
            main_dag({"name": "a", "template": "inner"}, {"name": "b", "template": "leaf"}), INNER
        )
    )
    assert {u.name: u.pods for u in parsed.units} == {"a": 100, "b": 1}


def test_the_limit_is_a_parser_limit() -> None:
    doc = workflow(main_dag({"name": "a", "template": "inner"}), INNER)
    (error,) = refused(doc, limits=Limits(max_pods_per_unit=99))
    assert "can create 100 pods" in error.message
    assert parse_workflow(doc, limits=Limits(max_pods_per_unit=100)).units[0].pods == 100


def test_a_loop_known_only_at_run_time_counts_as_the_bound() -> None:
    runtime = {
        "name": "inner",
        "steps": [
            [{"name": "gen", "template": "leaf"}],
            [{"name": "s", "template": "leaf", "withParam": "{{steps.gen.outputs.result}}"}],
        ],
    }
    doc = workflow(main_dag({"name": "a", "template": "inner"}), runtime)
    limits = Limits(max_pods_per_unit=50, unknown_loop_items=40)
    assert parse_workflow(doc, limits=limits).units[0].pods == 41
    (error,) = refused(doc, limits=Limits(max_pods_per_unit=40, unknown_loop_items=40))
    assert "can create 41 pods" in error.message
    assert "withParam: 40 items (known only at run time)" in error.message


def test_a_sequence_over_workflow_parameters_is_counted_as_known() -> None:
    seq = {
        "name": "inner",
        "steps": [
            [
                {
                    "name": "s",
                    "template": "leaf",
                    "withSequence": {"count": "{{workflow.parameters.n}}"},
                }
            ]
        ],
    }
    doc = workflow(main_dag({"name": "a", "template": "inner"}), seq)
    doc["spec"]["arguments"] = {"parameters": [{"name": "n", "value": "7"}]}
    assert parse_workflow(doc).units[0].pods == 7


def test_the_whole_workflow_as_one_unit_is_counted_at_the_entrypoint() -> None:
    # A daemon keeps the entrypoint's units together: one unit runs everything.
    daemon = {"name": "db", "daemon": True, "container": {"image": "alpine"}}
    main = {
        "name": "main",
        "steps": [[{"name": "db", "template": "db"}], [{"name": "a", "template": "outer"}]],
    }
    errors = {e.path: e.message for e in refused(workflow(main, OUTER, INNER, daemon))}
    assert "can create 10001 pods" in errors["spec.templates[0]"]


def test_recursion_that_calls_itself_once_is_counted_to_argos_depth() -> None:
    # coinflip-recursive: each level flips once and may call itself again (a `when`).
    rec = {
        "name": "rec",
        "steps": [
            [{"name": "flip", "template": "leaf"}],
            [{"name": "again", "template": "rec", "when": "{{steps.flip.outputs.result}} == t"}],
        ],
    }
    (unit,) = parse_workflow(workflow(main_dag({"name": "a", "template": "rec"}), rec)).units
    assert 90 <= unit.pods <= 100


def test_mutual_recursion_through_the_catalogue_terminates_and_is_refused() -> None:
    def wft(name: str, calls: str) -> dict[str, Any]:
        return {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "WorkflowTemplate",
            "metadata": {"name": name},
            "spec": {
                "templates": [
                    {
                        "name": "fan",
                        "steps": [
                            [{"name": "leaf", "template": "leaf"}],
                            [
                                {
                                    "name": f"again{i}",
                                    "templateRef": {"name": calls, "template": "fan"},
                                }
                                for i in range(2)
                            ],
                        ],
                    },
                    LEAF,
                ]
            },
        }

    catalogue = {"ping": wft("ping", "pong"), "pong": wft("pong", "ping")}
    doc = workflow(main_dag({"name": "a", "templateRef": {"name": "ping", "template": "fan"}}))
    (error,) = refused(doc, catalogue=catalogue)
    assert error.path == "spec.templates[0].dag.tasks[0]"
    assert "can create more than" in error.message
    assert "calls itself, counted to Argo's 100 nested calls" in error.message


def test_mutual_recursion_of_three_templates_is_counted_whatever_the_order_of_the_walk() -> None:
    # Each calls the two others: the walk meets each template at many depths; what it counts
    # deep down, cut by the depth limit, must not stand for the same template higher up.
    names = ["a", "b", "c"]
    templates = [
        {
            "name": n,
            "dag": {
                "tasks": [
                    {"name": "leaf", "template": "leaf"},
                    *({"name": f"to-{m}", "template": m} for m in names if m != n),
                ]
            },
        }
        for n in names
    ]
    (error,) = refused(workflow(main_dag({"name": "go", "template": "a"}), *templates))
    assert "can create more than" in error.message
    assert "calls itself" in error.message
