"""A step workflow deleted on karmada-apiserver while its unit runs (as `kubectl delete` or a
Karmada that lost its state leaves it): the resync records why and, as the run's retry policy
says, runs the unit again as a new attempt or ends it (and its run) with the message, releasing
the mutex it held. Every real part: REST, PostgreSQL, Redis, a Celery worker with beat, the
watcher, and the sandbox over HTTP with steps that really run; the deletion goes through the
official `kubernetes` client."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from django.conf import settings
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from portal.choices import RunStatus, UnitPhase
from portal.models import RunEvent, UnitRun, WorkflowRun
from tests.fixtures_stack import Stack, wait_for

pytestmark = [pytest.mark.integration]


def body(*, retry: dict[str, Any] | None = None, mutex: str | None = None, seconds: int = 4) -> str:
    """One step that really runs for ``seconds``: long enough to be deleted while it runs."""
    work: dict[str, Any] = {
        "name": "work",
        "container": {
            "image": "alpine:3.19",
            "command": ["sh", "-c", f"sleep {seconds}; echo done"],
        },
    }
    if retry is not None:
        work["retryStrategy"] = retry
    if mutex is not None:
        work["synchronization"] = {"mutexes": [{"name": mutex}]}
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "vanish-"},
            "spec": {
                "entrypoint": "main",
                "templates": [
                    {"name": "main", "dag": {"tasks": [{"name": "a", "template": "work"}]}},
                    work,
                ],
            },
        }
    )


@pytest.fixture
def api(live_executing: Stack) -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.get(username="scientist"))
    return client


def submit(api: APIClient, text: str) -> int:
    answer = api.post("/api/v1/runs/?project=eo-demo", data=text, content_type="application/yaml")
    assert answer.status_code == 201, answer.json()
    return int(answer.json()["id"])


def running(run_id: int) -> UnitRun | None:
    unit = UnitRun.objects.get(run_id=run_id, name="a")
    return unit if unit.phase == UnitPhase.RUNNING and unit.workflow_name else None


def delete_on_karmada(stack: Stack, name: str) -> None:
    from kubernetes import client

    custom = client.CustomObjectsApi(stack.sandbox.api_client())
    custom.delete_namespaced_custom_object(
        "argoproj.io", "v1alpha1", settings.KARMADA_NAMESPACE, "workflows", name
    )


def finished(run_id: int) -> WorkflowRun | None:
    run = WorkflowRun.objects.get(pk=run_id)
    return run if run.finished_at is not None else None


def until_finished(stack: Stack, run_id: int) -> WorkflowRun:
    try:
        return wait_for(lambda: finished(run_id), 240, "the run to end")
    except AssertionError:
        units = list(UnitRun.objects.filter(run_id=run_id).values("name", "phase", "attempt"))
        events = list(RunEvent.objects.filter(run_id=run_id).values_list("kind", "message"))
        raise AssertionError(
            f"run {run_id} did not end: units {units}, events {events}\n"
            f"--- worker\n{stack.log('worker')}\n--- watcher\n{stack.log('watcher')}"
        ) from None


def test_with_a_retry_strategy_the_unit_runs_again_as_a_new_attempt(
    live_executing: Stack, api: APIClient
) -> None:
    run_id = submit(api, body(retry={"limit": 1, "retryPolicy": "OnError"}, seconds=10))
    unit = wait_for(lambda: running(run_id), 120, "the step to run")
    delete_on_karmada(live_executing, unit.workflow_name)
    run = until_finished(live_executing, run_id)
    again = UnitRun.objects.get(pk=unit.pk)
    assert run.status == RunStatus.SUCCEEDED, (run.message, live_executing.log("worker"))
    assert again.phase == UnitPhase.SUCCEEDED and again.attempt == unit.attempt + 1
    assert again.workflow_name != unit.workflow_name
    (vanished,) = RunEvent.objects.filter(run_id=run_id, kind="unit-vanished")
    assert (
        f"step workflow {unit.workflow_name} and its ResourceBinding are gone" in vanished.message
    )
    assert f"attempt {unit.attempt + 1}" in vanished.message
    assert vanished.data["ended_attempt"]["workflow"] == unit.workflow_name
    # The unit's attempts over the API: the vanished one, then the one that ran.
    detail = api.get(f"/api/v1/runs/{run_id}/units/a/").json()
    attempts = [(a["number"], a["ended"], a["workflow"]) for a in detail["attempts"]]
    assert attempts == [
        (unit.attempt, "vanished", unit.workflow_name),
        (again.attempt, "", again.workflow_name),
    ]


def test_without_one_the_unit_and_run_fail_with_why_and_its_mutex_is_released(
    live_executing: Stack, api: APIClient
) -> None:
    first = submit(api, body(mutex="vanishing", seconds=30))
    unit = wait_for(lambda: running(first), 120, "the first run's step to run")
    second = submit(api, body(mutex="vanishing", seconds=1))
    waiting = wait_for(
        lambda: UnitRun.objects.filter(
            run_id=second, name="a", message__contains="vanishing"
        ).first(),
        60,
        "the second run to wait for the mutex",
    )
    assert waiting.workflow_name == ""
    delete_on_karmada(live_executing, unit.workflow_name)
    run = until_finished(live_executing, first)
    ended = UnitRun.objects.get(pk=unit.pk)
    assert ended.phase == UnitPhase.ERROR and ended.attempt == unit.attempt
    assert "and its ResourceBinding are gone from karmada-apiserver" in ended.message
    assert "it has no retryStrategy" in ended.message
    assert run.status == RunStatus.ERROR and ended.message in run.message
    assert RunEvent.objects.filter(run_id=first, kind="unit-vanished").count() == 1
    # The mutex it held is free: the second run takes it and runs to the end.
    other = until_finished(live_executing, second)
    assert other.status == RunStatus.SUCCEEDED
