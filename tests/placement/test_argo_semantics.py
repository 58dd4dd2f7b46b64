"""Argo's meaning kept across the split into step workflows (issue 18): run-level
``{{workflow.*}}`` variables, loop outputs, ..."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from placement.manifests import (
    GlobalOutputs,
    TaskOutputs,
    Unresolved,
    aggregate_outputs,
    fill_run_variables,
    global_outputs,
    run_variables,
    step_workflow,
    substitute,
)
from placement.parser import parse_workflow

CREATED = datetime(2026, 12, 3, 17, 4, 5, tzinfo=UTC)

VARS_WF = {
    "apiVersion": "argoproj.io/v1alpha1",
    "kind": "Workflow",
    "metadata": {
        "generateName": "vars-",
        "labels": {"team": "eo"},
        "annotations": {"owner": "ada"},
    },
    "spec": {
        "entrypoint": "main",
        "templates": [
            {
                "name": "main",
                "dag": {"tasks": [{"name": "a", "template": "echo"}]},
            },
            {
                "name": "echo",
                "container": {
                    "image": "alpine",
                    "command": ["echo"],
                    "args": [
                        "{{workflow.name}} {{workflow.namespace}} {{workflow.uid}}",
                        "{{workflow.creationTimestamp}} {{workflow.creationTimestamp.Y}}",
                        "{{workflow.labels.team}} {{workflow.annotations.owner}}",
                        "{{workflow.duration}} {{workflow.failures}}",
                        "{{inputs.parameters.x}} {{pod.name}} {{workflow.status}}",
                    ],
                },
            },
        ],
    },
}


def _run_vars(failures: list[dict[str, str]] | None = None) -> dict[str, str]:
    return run_variables(
        name="vars-abcde",
        namespace="science",
        uid="6f1c1c3e-0000-5000-8000-000000000001",
        created=CREATED,
        labels={"team": "eo"},
        annotations={"owner": "ada"},
        duration_seconds=12.5,
        failures=failures or [],
    )


def test_workflow_variables_mean_the_run_not_the_step_workflow() -> None:
    parsed = parse_workflow(VARS_WF)
    wf = step_workflow(
        parsed,
        parsed.units[0],
        run_name="vars-abcde",
        run_id=7,
        namespace="portal",
        site="site-a",
        reason="r",
        run_vars=_run_vars(),
    )
    assert wf["metadata"]["name"] == "vars-abcde-a-1"  # the step workflow keeps its own name
    (echo,) = wf["spec"]["templates"]
    args = echo["container"]["args"]
    assert args[0] == "vars-abcde science 6f1c1c3e-0000-5000-8000-000000000001"
    assert args[1] == "2026-12-03T17:04:05Z 2026"
    assert args[2] == "eo ada"
    assert args[3] == "12.500000 []"
    # What Argo fills inside the step workflow stays for Argo.
    assert args[4] == "{{inputs.parameters.x}} {{pod.name}} {{workflow.status}}"


def test_workflow_failures_with_quotes_stay_a_valid_document() -> None:
    failed = [{"displayName": 'say "hi"', "phase": "Failed", "message": "exit 1"}]
    filled = fill_run_variables({"args": ["{{workflow.failures}}"]}, _run_vars(failed))
    assert json.loads(filled["args"][0]) == failed


def test_without_run_variables_argo_fills_them() -> None:
    parsed = parse_workflow(VARS_WF)
    wf = step_workflow(
        parsed, parsed.units[0], run_name="r", run_id=1, namespace="p", site=None, reason="r"
    )
    assert "{{workflow.name}}" in wf["spec"]["templates"][0]["container"]["args"][0]


# -- item 3: outputs of a looped task ------------------------------------------------------


def test_loop_outputs_are_argos_lists_in_item_order() -> None:
    agg = aggregate_outputs(
        [
            TaskOutputs(parameters={"p": "a"}, result="1"),
            TaskOutputs(phase="Failed", parameters={"p": "lost"}, result="9"),
            TaskOutputs(parameters={"p": "c"}, result='{"k": 3}'),
        ]
    )
    # Only Succeeded items count, in item order; results parsed as JSON like Argo's Item.
    assert agg.parameters["p"] == '["a","c"]'
    assert json.loads(agg.result or "") == [1, {"k": 3}]
    assert agg.phase == "Failed"
    outs = {"x": agg}
    assert substitute("{{tasks.x.outputs.parameters.p}}", {}, outs) == '["a","c"]'
    assert json.loads(substitute("{{tasks.x.outputs.parameters}}", {}, outs)) == [
        {"p": "a"},
        {"p": "c"},
    ]


def test_loop_outputs_that_are_json_objects_are_nested_not_quoted() -> None:
    agg = aggregate_outputs(
        [TaskOutputs(parameters={"p": '{"a": 1}'}), TaskOutputs(parameters={"p": "[2]"})]
    )
    assert json.loads(agg.parameters["p"]) == [{"a": 1}, [2]]
    mixed = aggregate_outputs(
        [TaskOutputs(parameters={"p": '{"a": 1}'}), TaskOutputs(parameters={"p": "3"})]
    )
    assert json.loads(mixed.parameters["p"]) == ['{"a": 1}', "3"]


# -- item 4: input defaults when the producer did not run -----------------------------------


def _skip_wf(consumer_input: dict[str, str], producer_output: dict | None = None) -> dict:
    out_param = producer_output or {"name": "p", "valueFrom": {"path": "/tmp/p"}}
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "skip"},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {
                    "name": "main",
                    "dag": {
                        "tasks": [
                            {"name": "a", "template": "produce", "when": "false"},
                            {
                                "name": "b",
                                "template": "consume",
                                "depends": "a",
                                "arguments": {
                                    "parameters": [
                                        {"name": "x", "value": "{{tasks.a.outputs.parameters.p}}"}
                                    ]
                                },
                            },
                        ]
                    },
                },
                {
                    "name": "produce",
                    "container": {"image": "alpine"},
                    "outputs": {"parameters": [out_param]},
                },
                {
                    "name": "consume",
                    "inputs": {"parameters": [consumer_input]},
                    "container": {"image": "alpine", "args": ["{{inputs.parameters.x}}"]},
                },
            ],
        },
    }


def _consumer_args(doc: dict, phase: str = "Skipped") -> dict[str, str]:
    parsed = parse_workflow(doc)
    b = next(u for u in parsed.units if u.task == "b")
    wf = step_workflow(
        parsed,
        b,
        run_name="skip",
        run_id=1,
        namespace="p",
        site="site-a",
        reason="r",
        outputs={"a": TaskOutputs(phase=phase, template="produce")},
    )
    return {p["name"]: p["value"] for p in wf["spec"]["arguments"]["parameters"]}


@pytest.mark.parametrize("phase", ["Skipped", "Omitted"])
def test_a_consumer_of_a_skipped_producer_uses_its_input_default(phase: str) -> None:
    assert _consumer_args(_skip_wf({"name": "x", "default": "fallback"}), phase)["x"] == "fallback"


def test_a_skipped_producers_declared_output_default_wins() -> None:
    doc = _skip_wf(
        {"name": "x", "default": "fallback"},
        {"name": "p", "valueFrom": {"path": "/tmp/p", "default": "from-producer"}},
    )
    assert _consumer_args(doc)["x"] == "from-producer"


def test_without_any_default_the_unit_fails_naming_the_reference() -> None:
    with pytest.raises(Unresolved) as info:
        _consumer_args(_skip_wf({"name": "x"}))
    assert "tasks.a.outputs.parameters.p" in str(info.value)
    assert "no default" in str(info.value)


def test_a_failed_producers_missing_output_is_still_unresolved() -> None:
    with pytest.raises(Unresolved):
        _consumer_args(_skip_wf({"name": "x", "default": "fallback"}), "Failed")


# -- item 7: dag.target ---------------------------------------------------------------------


def _target_wf(target: str, param: str | None = None) -> dict:
    echo = {"name": "echo", "container": {"image": "alpine"}}

    def task(name: str, deps: list[str] | None = None, depends: str | None = None) -> dict:
        t: dict = {"name": name, "template": "echo"}
        if deps:
            t["dependencies"] = deps
        if depends:
            t["depends"] = depends
        return t

    spec: dict = {
        "entrypoint": "main",
        "templates": [
            {
                "name": "main",
                "dag": {
                    "target": target,
                    "tasks": [
                        task("A"),
                        task("B", ["A"]),
                        task("C", ["A"]),
                        task("D", depends="B && C"),
                        task("E", ["C"]),
                    ],
                },
            },
            echo,
        ],
    }
    if param is not None:
        spec["arguments"] = {"parameters": [{"name": "target", "value": param}]}
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "targets"},
        "spec": spec,
    }


def test_dag_target_runs_only_the_named_tasks_and_their_dependencies() -> None:
    parsed = parse_workflow(_target_wf("E"))
    assert [u.name for u in parsed.units] == ["A", "C", "E"]
    parsed = parse_workflow(_target_wf("D E"))
    assert sorted(u.name for u in parsed.units) == ["A", "B", "C", "D", "E"]


def test_dag_target_from_the_workflow_argument() -> None:
    parsed = parse_workflow(_target_wf("{{workflow.parameters.target}}", "B"))
    assert [u.name for u in parsed.units] == ["A", "B"]


def test_an_unknown_dag_target_is_refused_with_its_path() -> None:
    from placement.parser import WorkflowInvalid

    with pytest.raises(WorkflowInvalid) as info:
        parse_workflow(_target_wf("Z"))
    (err,) = info.value.errors
    assert err.path.endswith("dag.target") and "'Z'" in err.message


# -- item 9: global outputs -----------------------------------------------------------------


def test_global_outputs_come_from_globalname_and_a_later_value_wins() -> None:
    prepare = {
        "name": "prepare",
        "outputs": {
            "parameters": [{"name": "p", "globalName": "prepared-param"}],
            "artifacts": [{"name": "a", "path": "/tmp/a", "globalName": "prepared"}],
        },
    }
    first = {
        "parameters": [{"name": "p", "value": "one"}, {"name": "local", "value": "x"}],
        "artifacts": [{"name": "a", "path": "/tmp/a", "s3": {"key": "k1"}}],
    }
    second = {"parameters": [{"name": "q", "value": "two", "globalName": "prepared-param"}]}
    g = global_outputs([(first, prepare), (second, None)])
    assert g.parameters == {"prepared-param": "two"}
    assert g.artifacts == {"prepared": {"s3": {"key": "k1"}}}
    assert g.as_argo() == {
        "parameters": [{"name": "prepared-param", "value": "two"}],
        "artifacts": [{"name": "prepared", "s3": {"key": "k1"}}],
    }


GLOBAL_A = "{{workflow.outputs.artifacts.a}}"


def test_later_units_see_the_runs_global_outputs() -> None:
    doc = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "globals"},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {"name": "main", "steps": [[{"name": "use", "template": "use"}]]},
                {
                    "name": "use",
                    "inputs": {
                        "artifacts": [
                            {
                                "name": "in",
                                "path": "/in",
                                "from": "{{workflow.outputs.artifacts.a}}",
                            }
                        ]
                    },
                    "container": {
                        "image": "alpine",
                        "args": ["{{workflow.outputs.parameters.p}}"],
                    },
                },
            ],
        },
    }
    parsed = parse_workflow(doc)
    g = GlobalOutputs(parameters={"p": "42"}, artifacts={"a": {"s3": {"key": "run/a.tgz"}}})
    wf = step_workflow(
        parsed,
        parsed.units[0],
        run_name="globals",
        run_id=1,
        namespace="p",
        site="site-b",
        reason="r",
        globals_=g,
    )
    (use,) = wf["spec"]["templates"]
    assert use["container"]["args"] == ["42"]
    assert use["inputs"]["artifacts"] == [{"name": "in", "path": "/in", "s3": {"key": "run/a.tgz"}}]
