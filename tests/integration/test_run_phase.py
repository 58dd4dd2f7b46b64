"""A run ends as Argo ends its entrypoint template, on the executing sandbox (the steps really
run) through the portal over REST with the worker and the watcher: a failure handled by a
dependent's ``depends`` leaves the run Succeeded, a leaf's ``continueOn`` is honoured, a
template's ``failFast`` starts nothing more and ends the run with Argo's message, and with
``failFast: false`` the other tasks finish."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from placement.phase import FAIL_FAST_MESSAGE
from portal.models import UnitRun, WorkflowRun
from tests.fixtures_stack import Stack, wait_for

pytestmark = [pytest.mark.integration]

OK = {"name": "ok", "container": {"image": "alpine:3.23", "command": ["sh", "-c", "echo ok"]}}
FAIL = {"name": "fail", "container": {"image": "alpine:3.23", "command": ["sh", "-c", "exit 1"]}}
# Slept on the sandbox's clock: long enough that the failing task ends first.
SLOW = {"name": "slow", "container": {"image": "alpine:3.23", "command": ["sleep", "100"]}}


def manifest(entry: dict[str, Any]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "phase-"},
            "spec": {
                "entrypoint": "main",
                "templates": [{"name": "main", **entry}, OK, FAIL, SLOW],
            },
        }
    )


@pytest.fixture
def api(live_executing: Stack) -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.get(username="scientist"))
    return client


def run_to_the_end(stack: Stack, api: APIClient, entry: dict[str, Any]) -> dict[str, Any]:
    answer = api.post(
        "/api/v1/runs/", {"manifest": manifest(entry), "project": "eo-demo"}, format="json"
    )
    assert answer.status_code == 201, answer.content
    run_id = answer.json()["id"]

    def ended() -> bool:
        return WorkflowRun.objects.get(pk=run_id).finished_at is not None

    try:
        wait_for(ended, 180, "the run to end")
    except AssertionError:
        units = list(UnitRun.objects.filter(run_id=run_id).values_list("name", "phase", "message"))
        raise AssertionError(f"units {units}\n--- worker\n{stack.log('worker')}") from None
    run = api.get(f"/api/v1/runs/{run_id}/").json()
    run["unit_phases"] = dict(
        UnitRun.objects.filter(run_id=run_id).values_list("name", "phase").order_by()
    )
    run["unit_started"] = {
        u.name: bool(u.workflow_name) for u in UnitRun.objects.filter(run_id=run_id)
    }
    return run


def test_a_failure_handled_by_depends_ends_succeeded(live_executing: Stack, api: APIClient) -> None:
    run = run_to_the_end(
        live_executing,
        api,
        {
            "dag": {
                "tasks": [
                    {"name": "B", "template": "fail"},
                    {"name": "C", "template": "ok", "depends": "B.Failed"},
                ]
            }
        },
    )
    assert run["unit_phases"] == {"B": "Failed", "C": "Succeeded"}
    assert run["status"] == "Succeeded", run


def test_continue_on_a_leaf_is_honoured(live_executing: Stack, api: APIClient) -> None:
    run = run_to_the_end(
        live_executing,
        api,
        {
            "dag": {
                "tasks": [
                    {"name": "A", "template": "ok"},
                    {
                        "name": "B",
                        "template": "fail",
                        "dependencies": ["A"],
                        "continueOn": {"failed": True},
                    },
                ]
            }
        },
    )
    assert run["unit_phases"] == {"A": "Succeeded", "B": "Failed"}
    assert run["status"] == "Succeeded", run


def test_fail_fast_starts_nothing_more_and_ends_with_argos_message(
    live_executing: Stack, api: APIClient
) -> None:
    """Argo's TestWorkflowParallelismDAGFailFast, with a third task the parallelism of 2 holds
    back: the running task finishes, the held one never starts."""
    run = run_to_the_end(
        live_executing,
        api,
        {
            "parallelism": 2,
            "failFast": True,
            "dag": {
                "tasks": [
                    {"name": "task1", "template": "fail"},
                    {"name": "task2", "template": "slow"},
                    {"name": "task3", "template": "ok"},
                ]
            },
        },
    )
    assert run["status"] == "Failed"
    assert run["message"].startswith(FAIL_FAST_MESSAGE), run["message"]
    assert run["unit_phases"]["task1"] == "Failed"
    assert run["unit_phases"]["task2"] == "Succeeded"
    assert run["unit_phases"]["task3"] == "Omitted"
    assert run["unit_started"]["task3"] is False


def test_fail_fast_on_steps_ends_with_argos_message(live_executing: Stack, api: APIClient) -> None:
    """Argo's TestWorkflowParallelismStepFailFast: step1 fails, step2 finishes, and the next
    group never starts."""
    run = run_to_the_end(
        live_executing,
        api,
        {
            "parallelism": 2,
            "failFast": True,
            "steps": [
                [{"name": "step1", "template": "fail"}, {"name": "step2", "template": "slow"}],
                [{"name": "step3", "template": "ok"}],
            ],
        },
    )
    assert run["status"] == "Failed"
    assert run["message"].startswith(FAIL_FAST_MESSAGE), run["message"]
    assert run["unit_phases"]["step1"] == "Failed"
    assert run["unit_phases"]["step2"] == "Succeeded"
    assert run["unit_started"]["step3"] is False


def test_without_fail_fast_the_others_finish(live_executing: Stack, api: APIClient) -> None:
    """Argo's TestDagDisableFailFast: C fails early; B, then D and E after it, still run, and
    the DAG fails once they end."""
    run = run_to_the_end(
        live_executing,
        api,
        {
            "dag": {
                "failFast": False,
                "tasks": [
                    {"name": "A", "template": "ok"},
                    {"name": "B", "template": "slow", "dependencies": ["A"]},
                    {"name": "C", "template": "fail", "dependencies": ["A"]},
                    {"name": "D", "template": "ok", "dependencies": ["B"]},
                    {"name": "E", "template": "ok", "dependencies": ["D"]},
                ],
            }
        },
    )
    assert run["unit_phases"] == {
        "A": "Succeeded",
        "B": "Succeeded",
        "C": "Failed",
        "D": "Succeeded",
        "E": "Succeeded",
    }
    assert run["status"] == "Failed"
    assert run["message"].startswith("C:"), run["message"]


def test_steps_go_on_after_a_step_with_continue_on(live_executing: Stack, api: APIClient) -> None:
    """The examples' continue-on-fail.yaml: the next group runs after a step that failed with
    ``continueOn.failed`` (its bare dependency accepts the failure), and the steps succeed."""
    run = run_to_the_end(
        live_executing,
        api,
        {
            "steps": [
                [
                    {"name": "B", "template": "ok"},
                    {"name": "C", "template": "fail", "continueOn": {"failed": True}},
                ],
                [{"name": "D", "template": "ok"}],
            ]
        },
    )
    assert run["unit_phases"] == {"B": "Succeeded", "C": "Failed", "D": "Succeeded"}
    assert run["status"] == "Succeeded", run
