"""Argo's `{{= expr}}` tags and expr-lang expressions in the member clusters: evaluated where
Argo's controller evaluates them (a step's `when`, arguments and `withParam`; hooks'
`expression`), and failing the step as Argo does when they cannot be evaluated."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.sandbox.conftest import DOMAIN, Fleet, leaf, unique, workflow

RunOn = Callable[..., dict[str, Any]]


def flip(result: str) -> dict[str, Any]:
    return {
        "name": "flip",
        "metadata": {"annotations": {f"{DOMAIN}/sandbox-result": result}},
        "script": {"image": "python", "source": f"print({result!r})"},
    }


def echo() -> dict[str, Any]:
    """A leaf that records the parameter it was given as its output."""
    return leaf(
        "echo",
        inputs={"parameters": [{"name": "msg"}]},
        annotations={
            f"{DOMAIN}/sandbox-outputs": json.dumps({"said": "{{inputs.parameters.msg}}"})
        },
        outputs={"parameters": [{"name": "said", "valueFrom": {"path": "/tmp/said"}}]},
    )


def steps_after_flip(result: str, *second: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"name": "main", "steps": [[{"name": "flip", "template": "flip"}], list(second)]},
        flip(result),
        leaf("work"),
        echo(),
    ]


def test_a_false_expression_skips_the_step_and_a_true_one_runs_it(
    fleet: Fleet, run_on: RunOn
) -> None:
    name = unique("expr-when")
    templates = steps_after_flip(
        "tails",
        {
            "name": "heads",
            "template": "work",
            "when": "{{= steps.flip.outputs.result == 'heads' }}",
        },
        {
            "name": "tails",
            "template": "work",
            "when": "{{=sprig.upper(steps.flip.outputs.result) == 'TAILS'}}",
        },
    )
    run_on("site-b", workflow(name, templates))
    status = fleet.wait_phase(name)
    assert status["phase"] == "Succeeded"
    nodes = fleet.nodes_by_display(status)
    assert nodes["heads"]["phase"] == "Skipped"
    # The message Argo gives: the when after substitution (steps.go).
    assert nodes["heads"]["message"] == "when 'false' evaluated false"
    assert nodes["tails"]["phase"] == "Succeeded"


def test_arguments_and_with_param_are_evaluated(fleet: Fleet, run_on: RunOn) -> None:
    name = unique("expr-args")
    templates = steps_after_flip(
        "tails",
        {
            "name": "say",
            "template": "echo",
            "arguments": {
                "parameters": [
                    {"name": "msg", "value": "got {{=sprig.upper(steps.flip.outputs.result)}}"}
                ]
            },
        },
        {
            "name": "loop",
            "template": "work",
            "withParam": "{{=toJson(sprig.splitList(',', 'a,b,c'))}}",
        },
    )
    run_on("site-b", workflow(name, templates))
    status = fleet.wait_phase(name)
    assert status["phase"] == "Succeeded", status.get("message")
    nodes = fleet.nodes_by_display(status)
    assert nodes["say"]["inputs"]["parameters"] == [{"name": "msg", "value": "got TAILS"}]
    looped = sorted(d for d in nodes if d.startswith("loop("))
    assert looped == ["loop(0:a)", "loop(1:b)", "loop(2:c)"]


def test_an_expression_that_cannot_be_evaluated_errors_the_step(
    fleet: Fleet, run_on: RunOn
) -> None:
    name = unique("expr-error")
    templates = steps_after_flip(
        "tails",
        {
            "name": "bad",
            "template": "work",
            "when": "{{=asInt(steps.flip.outputs.result) > 1}}",
        },
    )
    run_on("site-b", workflow(name, templates))
    status = fleet.wait_phase(name)
    assert status["phase"] in ("Failed", "Error")
    assert "bad" not in fleet.nodes_by_display(status)
    messages = [n.get("message", "") for n in status["nodes"].values()]
    assert any(
        m.startswith("failed to resolve references: failed to evaluate expression:")
        and 'parsing "tails"' in m
        for m in messages
    ), messages


def test_a_missing_step_output_is_an_error_not_a_silent_skip(fleet: Fleet, run_on: RunOn) -> None:
    name = unique("expr-missing")
    templates = steps_after_flip(
        "tails",
        {
            "name": "bad",
            "template": "work",
            "when": "{{=steps.flip.outputs.parameters.none == 'x'}}",
        },
    )
    run_on("site-b", workflow(name, templates))
    status = fleet.wait_phase(name)
    assert status["phase"] in ("Failed", "Error")
    messages = [n.get("message", "") for n in status["nodes"].values()]
    assert any(
        "failed to evaluate expression: steps.flip.outputs.parameters.none is missing" in m
        for m in messages
    ), messages


def test_hook_expressions_are_argos_expression_language(fleet: Fleet, run_on: RunOn) -> None:
    name = unique("expr-hooks")
    templates = [
        {
            "name": "main",
            "steps": [
                [
                    {
                        "name": "step",
                        "template": "work",
                        "hooks": {
                            "done": {
                                "template": "work",
                                "expression": "steps['step'].status in ['Succeeded', 'Failed']",
                            },
                            "never": {
                                "template": "work",
                                "expression": "steps.step.status == 'Omitted'",
                            },
                        },
                    }
                ]
            ],
        },
        leaf("work"),
    ]
    run_on("site-b", workflow(name, templates))
    status = fleet.wait_phase(name)
    assert status["phase"] == "Succeeded", status.get("message")
    hooks = sorted(
        n["name"].rsplit(".", 1)[-1] for n in status["nodes"].values() if ".hooks." in n["name"]
    )
    assert hooks == ["done"]


def test_a_hook_expression_that_is_not_a_boolean_errors_the_step(
    fleet: Fleet, run_on: RunOn
) -> None:
    name = unique("expr-hook-bad")
    templates = [
        {
            "name": "main",
            "steps": [
                [
                    {
                        "name": "step",
                        "template": "work",
                        "hooks": {"h": {"template": "work", "expression": "steps.step.status"}},
                    }
                ]
            ],
        },
        leaf("work"),
    ]
    run_on("site-b", workflow(name, templates))
    status = fleet.wait_phase(name)
    assert status["phase"] in ("Failed", "Error")
    messages = [n.get("message", "") for n in status["nodes"].values()]
    assert any("to bool" in m for m in messages), messages


def test_an_output_expression_reads_a_skipped_steps_absent_output_with_a_fallback(
    fleet: Fleet, run_on: RunOn
) -> None:
    name = unique("expr-output")
    templates = [
        {
            "name": "main",
            "dag": {"tasks": [{"name": "producer", "template": "echo", "when": "false"}]},
            "outputs": {
                "parameters": [
                    {
                        "name": "result",
                        "valueFrom": {
                            "expression": "tasks.producer.outputs.parameters.said ?? 'fallback'"
                        },
                    },
                    {
                        "name": "strict",
                        "valueFrom": {
                            "expression": "tasks.producer.outputs.parameters.said",
                            "default": "dflt",
                        },
                    },
                ]
            },
        },
        echo(),
    ]
    run_on("site-b", workflow(name, templates))
    status = fleet.wait_phase(name)
    assert status["phase"] == "Succeeded", status.get("message")
    assert status["nodes"][name]["outputs"]["parameters"] == [
        {"name": "result", "value": "fallback"},
        {"name": "strict", "value": "dflt"},
    ]


def test_a_retry_expression_that_does_not_evaluate_errors_the_node(
    fleet: Fleet, run_on: RunOn
) -> None:
    name = unique("expr-retry")
    flaky = leaf("flaky", retryStrategy={"limit": 3, "expression": "asInt(lastRetry.status) > 1"})
    templates = [{"name": "main", "steps": [[{"name": "try", "template": "flaky"}]]}, flaky]
    # Every attempt fails, so the expression is read after the first one.
    fleet.sandbox.fault("template-fail", template="flaky", workflow=name)
    run_on("site-b", workflow(name, templates))
    status = fleet.wait_phase(name)
    retry = fleet.nodes_by_display(status)["try"]
    assert retry["type"] == "Retry" and retry["phase"] == "Error"
    assert "unable to evaluate expression" in retry["message"]
