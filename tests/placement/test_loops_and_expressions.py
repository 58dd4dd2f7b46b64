"""Loops and expressions across the split (issue 18 items 1, 2, 16, 17): what is known at
submission is expanded there (preview equals run), what reads an upstream output is expanded
once known, a looped ``when`` is decided per item, and ``{{= expr}}`` tags are evaluated."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from placement.manifests import (
    TaskOutputs,
    Unresolved,
    WhenError,
    evaluate_when,
    resolve_arguments,
    step_workflow,
    substitute,
)
from placement.parser import (
    Arguments,
    Parameter,
    WorkflowInvalid,
    entry_inputs,
    expand_with_param,
    parse_with_param_value,
    parse_workflow,
)
from tests.placement.schemas import EXAMPLES, need_reference


def _example(name: str) -> dict[str, Any]:
    need_reference()
    return yaml.safe_load((EXAMPLES / name).read_text())


def _wf(tasks: list[dict[str, Any]], params: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "entrypoint": "main",
        "templates": [
            {"name": "main", "dag": {"tasks": tasks}},
            {
                "name": "echo",
                "inputs": {"parameters": [{"name": "m", "default": "x"}]},
                "container": {"image": "alpine", "command": ["echo", "{{inputs.parameters.m}}"]},
            },
        ],
    }
    if params:
        spec["arguments"] = {"parameters": [{"name": k, "value": v} for k, v in params.items()]}
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "loops-"},
        "spec": spec,
    }


def test_a_withparam_over_an_entrypoint_input_is_expanded_at_submission() -> None:
    # parallelism-nested.yaml: withParam "{{inputs.parameters.parallel-list}}" of the entrypoint.
    parsed = parse_workflow(_example("parallelism-nested.yaml"))
    names = [u.name for u in parsed.units]
    assert names == [f"parallel-worker({i}:{i + 1})" for i in range(4)]
    assert not any(u.runtime_expansion for u in parsed.units)
    # The entrypoint's input is filled in the call's arguments: the step workflow has no way to.
    seq = {p.name: p.value for p in parsed.units[0].arguments.parameters}["seq-list"]
    assert json.loads(seq) == ["a", "b", "c", "d"]
    assert {p.name: p.value for p in parsed.units[2].arguments.parameters}["parallel-id"] == "3"


def test_an_entrypoint_input_without_an_argument_takes_its_default() -> None:
    doc = _wf([{"name": "t", "template": "echo", "withParam": "{{inputs.parameters.xs}}"}])
    doc["spec"]["templates"][0]["inputs"] = {"parameters": [{"name": "xs", "default": "[7, 8]"}]}
    assert [u.item for u in parse_workflow(doc).units] == [7, 8]


def test_a_literal_withparam_list_is_expanded_at_submission() -> None:
    doc = _wf([{"name": "t", "template": "echo", "withParam": '["a", "b", "c"]'}])
    units = parse_workflow(doc).units
    assert [u.item for u in units] == ["a", "b", "c"]
    assert [u.item_index for u in units] == [0, 1, 2]


def test_a_withsequence_over_a_workflow_parameter_is_expanded_at_submission() -> None:
    # loops-sequence.yaml: count "{{workflow.parameters.count}}".
    parsed = parse_workflow(_example("loops-sequence.yaml"))
    items = [u.item for u in parsed.units if u.task == "sequence-param"]
    assert items == ["200", "201", "202"]
    fmt = [u.item for u in parsed.units if u.task == "sequence-format"]
    assert fmt == ["testuser00", "testuser01", "testuser02", "testuser03", "testuser04"]


def test_an_expression_withparam_over_the_runs_parameters_is_expanded_at_submission() -> None:
    parsed = parse_workflow(_example("expression-tag-template-workflow.yaml"))
    assert [(u.name, u.item) for u in parsed.units] == [("task-0(0:3)", 3)]


def test_a_withsequence_from_an_earlier_output_is_expanded_once_known() -> None:
    doc = _wf(
        [
            {"name": "n", "template": "echo"},
            {
                "name": "fan",
                "template": "echo",
                "depends": "n",
                "arguments": {"parameters": [{"name": "m", "value": "{{item}}"}]},
                "withSequence": {"start": "1", "count": "{{tasks.n.outputs.result}}"},
            },
        ]
    )
    fan = next(u for u in parse_workflow(doc).units if u.task == "fan")
    assert fan.runtime_expansion  # one row until the count is known
    outputs = {"n": TaskOutputs(result="3")}
    value = substitute(fan.with_param or "", {}, outputs)
    items = parse_with_param_value(value)
    assert items == ["1", "2", "3"]
    children = expand_with_param(fan, items)
    args = [resolve_arguments(c.arguments, {}, outputs)["parameters"][0] for c in children]
    assert [a["value"] for a in args] == ["1", "2", "3"]
    with pytest.raises(ValueError, match="count"):
        parse_with_param_value(substitute(fan.with_param or "", {}, {"n": TaskOutputs(result="x")}))


def test_a_looped_when_is_decided_per_item() -> None:
    # parameter-aggregation-script.yaml: when "{{item.evenness}} == even" over a step's result.
    when = "{{item.evenness}} == even"
    with pytest.raises(WhenError, match=r"item\.evenness"):
        evaluate_when(when)  # before expansion: not decidable, Argo waits for the items
    decided = [
        evaluate_when(when, item={"num": n, "evenness": e}, has_item=True)
        for n, e in [(1, "odd"), (2, "even")]
    ]
    assert decided == [False, True]
    parsed = parse_workflow(_example("parameter-aggregation-script.yaml"))
    divide = next(u for u in parsed.units if u.task == "divide-by-2")
    assert divide.runtime_expansion and divide.when == when
    children = expand_with_param(divide, [{"num": 1, "evenness": "odd"}])
    assert children[0].when == when and children[0].item_index == 0


def test_expression_when_reads_inputs_parameters_and_json() -> None:
    # conditionals.yaml: the govaluate form with an entrypoint input, and both expr forms.
    parsed = parse_workflow(_example("conditionals.yaml"))
    whens = {u.task: u.when for u in parsed.units}
    assert whens["print-hello-govaluate"] == "true == true"  # the input filled at submission
    params = parsed.workflow_parameters()
    assert all(evaluate_when(w or "", params) for w in whens.values())
    assert not evaluate_when(whens["print-hello-expr"] or "", {"should-print": "false"})


def test_expression_tags_in_when_see_outputs_and_items() -> None:
    outputs = {"flip": TaskOutputs(result="heads", parameters={"n": "4"})}
    assert evaluate_when("{{=tasks.flip.outputs.result == 'heads'}}", {}, outputs)
    assert evaluate_when("{{= asInt(tasks.flip.outputs.parameters.n) > 3 }}", {}, outputs)
    assert evaluate_when("{{=item.n > 1}} && true", item={"n": 2}, has_item=True)
    assert not evaluate_when("{{=item in [1, 2]}}", item=3, has_item=True)
    with pytest.raises(WhenError, match="invalid operation"):
        evaluate_when("{{=tasks.flip.outputs.result && true}}", {}, outputs)
    with pytest.raises(WhenError, match=r"unresolved: tasks\.gone"):
        evaluate_when("{{=tasks.gone.outputs.result == 'x'}}", {}, outputs)


def test_expression_tags_in_arguments_are_filled_or_left_for_argo() -> None:
    doc = _wf(
        [
            {
                "name": "t",
                "template": "echo",
                "arguments": {"parameters": [{"name": "m", "value": "{{=item * 10}}"}]},
                "withItems": [1, 2],
            }
        ]
    )
    units = parse_workflow(doc).units
    values = [resolve_arguments(u.arguments, item=u.item, has_item=True) for u in units]
    assert [v["parameters"][0]["value"] for v in values] == ["10", "20"]
    # What only Argo holds at the site (pod.name) is left in the tag for Argo.
    assert substitute("{{=pod.name}}-{{=1+1}}") == "{{=pod.name}}-2"
    with pytest.raises(Unresolved, match="invalid syntax"):
        resolve_arguments(Arguments(parameters=(Parameter("m", "{{=asInt('x')}}"),)))


def test_an_expression_that_cannot_be_read_is_refused_at_submission_with_its_path() -> None:
    doc = _wf(
        [
            {
                "name": "t",
                "template": "echo",
                "when": "{{= 1 + }}",
                "arguments": {"parameters": [{"name": "m", "value": "{{=(1}}"}]},
            }
        ]
    )
    with pytest.raises(WorkflowInvalid) as err:
        parse_workflow(doc)
    fields = {e.path for e in err.value.errors}
    assert fields == {
        "spec.templates[0].dag.tasks[0].when",
        "spec.templates[0].dag.tasks[0].arguments.parameters[0].value",
    }, err.value.errors


def test_the_examples_that_use_these_features_parse() -> None:
    for name in (
        "conditionals.yaml",
        "loops-sequence.yaml",
        "parallelism-nested.yaml",
        "parameter-aggregation-dag.yaml",
        "parameter-aggregation-script.yaml",
        "expression-tag-template-workflow.yaml",
    ):
        assert parse_workflow(_example(name)).units, name


def test_a_loop_known_only_at_run_time_is_a_preview_warning_naming_the_field() -> None:
    parsed = parse_workflow(_example("parameter-aggregation-dag.yaml"))
    paths = sorted(w.path for w in parsed.warnings)
    assert paths == [
        "spec.templates[0].dag.tasks[3].withParam",
        "spec.templates[0].dag.tasks[4].withParam",
    ]
    assert "one row" in parsed.warnings[0].message
    # Loops known at submission are expanded, with nothing to warn about.
    assert parse_workflow(_example("parallelism-nested.yaml")).warnings == ()


@pytest.mark.parametrize("literal", ["not json", '{"a": 1}', "[1, 2"])
def test_a_literal_withparam_that_is_not_a_list_is_refused_with_its_path(literal: str) -> None:
    doc = _wf([{"name": "t", "template": "echo", "withParam": literal}])
    with pytest.raises(WorkflowInvalid) as err:
        parse_workflow(doc)
    assert [e.path for e in err.value.errors] == ["spec.templates[0].dag.tasks[0].withParam"]
    assert "JSON list" in err.value.errors[0].message


def test_an_absent_output_is_nil_for_the_fallback_operator() -> None:
    skipped = {"p": TaskOutputs(phase="Skipped")}
    assert substitute("{{=tasks.p.outputs.result ?? 'fallback'}}", {}, skipped) == "fallback"
    # A producer that ran but printed no result: the expression waits for what Argo holds.
    missing: list[str] = []
    ran = {"p": TaskOutputs(phase="Succeeded")}
    assert substitute("{{=tasks.p.outputs.result + 'x'}}", {}, ran, missing=missing).startswith(
        "{{="
    )
    assert missing == ["tasks.p.outputs.result"]


def test_an_expression_reads_an_entrypoint_input_that_only_has_a_default() -> None:
    doc = _wf(
        [
            {
                "name": "t",
                "template": "echo",
                "when": "{{= inputs.parameters.flag == 'on' }}",
                "arguments": {"parameters": [{"name": "m", "value": "{{=inputs.parameters.n}}"}]},
            }
        ]
    )
    doc["spec"]["templates"][0]["inputs"] = {
        "parameters": [{"name": "flag", "default": "on"}, {"name": "n", "value": "7"}]
    }
    parsed = parse_workflow(doc)
    inputs = entry_inputs(parsed.templates[parsed.entrypoint], parsed.workflow_parameters())
    assert inputs == {"flag": "on", "n": "7"}
    unit = parsed.units[0]
    assert evaluate_when(unit.when or "", {}, {}, inputs=inputs)
    with pytest.raises(WhenError):
        evaluate_when(unit.when or "", {}, {})  # without them, the tag cannot be decided
    body = step_workflow(
        parsed, unit, run_name="r", run_id=1, namespace="ns", site="site-a", reason="test"
    )
    assert body["spec"]["arguments"]["parameters"] == [{"name": "m", "value": "7"}]
