"""Argo's own example workflows (read from ../shared/reference, never copied) run to the
phase they should reach in the sandbox."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests.fixtures_sandbox import ARGO_EXAMPLES, SandboxServer
from tests.sandbox.conftest import NS, Fleet

# Examples whose every step the sandbox can run. Argo's examples that need a WorkflowTemplate
# (templateRef) or the expr language ({{= ...}}) are not in this list, see sandbox/README.md.
SUCCEEDING = [
    "dag-nested.yaml",
    "output-parameter.yaml",
    "exit-handler-with-param.yaml",
    "conditionals.yaml",
    "coinflip-recursive.yaml",
    "loops-sequence.yaml",
    "loops-dag.yaml",
    "parameter-aggregation-dag.yaml",
    "artifact-passing.yaml",
    "retry-container.yaml",
    "parallelism-nested-dag.yaml",
    "k8s-orchestration.yaml",
    "global-parameters.yaml",
    "template-on-exit.yaml",
    "steps-daemon-retry-strategy.yaml",
    "scripts-javascript.yaml",
]


def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ARGO_EXAMPLES / name).read_text())
    assert doc["kind"] == "Workflow"
    return doc


@pytest.fixture
def submit(fleet: Fleet, run_on: Callable[..., dict[str, Any]]) -> Callable[[str, str], str]:
    def go(example: str, site: str = "site-b") -> str:
        return str(run_on(site, load(example))["metadata"]["name"])

    return go


@pytest.mark.parametrize("example", SUCCEEDING)
def test_example_succeeds(example: str, fleet: Fleet, submit: Callable[..., str]) -> None:
    name = submit(example)
    status = fleet.wait_phase(name)
    assert status["phase"] == "Succeeded", status.get("message")
    done, total = status["progress"].split("/")
    assert done == total and int(total) >= 1
    assert all(n["phase"] in ("Succeeded", "Skipped", "Omitted") for n in status["nodes"].values())


def test_example_output_parameter_passes_the_default(
    fleet: Fleet, submit: Callable[..., str]
) -> None:
    status = fleet.wait_phase(submit("output-parameter.yaml"))
    consume = fleet.nodes_by_display(status)["consume-parameter"]
    assert consume["inputs"]["parameters"] == [{"name": "message", "value": "Foobar"}]


def test_example_loops_sequence_expands_every_item(
    fleet: Fleet, submit: Callable[..., str]
) -> None:
    status = fleet.wait_phase(submit("loops-sequence.yaml"))
    names = {n["displayName"] for n in status["nodes"].values() if n["type"] == "Pod"}
    assert any(d.startswith("sequence-count(4:") for d in names)


def test_example_suspend_template_runs_until_resumed(
    sandbox: SandboxServer, fleet: Fleet, submit: Callable[..., str]
) -> None:
    name = submit("suspend-template.yaml")
    sandbox.wait_for(
        lambda: fleet.nodes_by_display(fleet.member_status(name)).get("approve", {}).get("phase")
        == "Running",
        what="approve suspended",
    )
    assert fleet.member_status(name)["phase"] == "Running"
    sandbox.resume(NS, name, "approve")
    assert fleet.wait_phase(name)["phase"] == "Succeeded"


def test_example_fails_when_its_template_is_made_to_fail(
    sandbox: SandboxServer, fleet: Fleet, submit: Callable[..., str]
) -> None:
    sandbox.fault("template-fail", template="echo", message="injected")
    status = fleet.wait_phase(submit("dag-nested.yaml"))
    assert status["phase"] == "Failed"
    failed = [n for n in status["nodes"].values() if n["type"] == "Pod" and n["phase"] == "Failed"]
    assert failed and all(n["message"] == "injected" for n in failed)
