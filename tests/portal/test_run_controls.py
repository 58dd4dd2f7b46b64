"""Run-level controls the portal holds across units: parallelism,
failFast, spec.suspend and resume, spec.shutdown, the run's activeDeadlineSeconds and
artifactGC, against the sandbox fleet over HTTP (PostgreSQL, no worker: the advance and the
binding reader run in this process, as the worker and the watcher would)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import yaml
from django.contrib.auth import get_user_model

from portal import services
from portal.choices import FINAL_UNIT, RunStatus, UnitPhase
from portal.controller.advance import run_advance
from portal.controller.bindings import bindings_observe
from portal.controller.cleanup import step_workflows_cleanup
from portal.karmada import client, errors, lists, resources
from portal.models import UnitRun, WorkflowRun
from tests.fixtures_sandbox import ARGO_EXAMPLES, SandboxServer


@pytest.fixture
def fleet(demo_fleet: SandboxServer) -> SandboxServer:
    return demo_fleet


def leaf(sandbox: SandboxServer, name: str, *, fail: bool = False, **extra: Any) -> dict[str, Any]:
    annotations = {sandbox.annotation("duration"): "2s"}
    if fail:
        annotations[sandbox.annotation("fail")] = "true"
    return {
        "name": name,
        "metadata": {"annotations": annotations},
        "container": {"image": "busybox", "command": ["true"]},
        **extra,
    }


def workflow(entry: dict[str, Any], *templates: dict[str, Any], **spec: Any) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "controls-"},
            "spec": {"entrypoint": entry["name"], **spec, "templates": [entry, *templates]},
        }
    )


def dag(tasks: list[dict[str, Any]], **template: Any) -> dict[str, Any]:
    return {"name": "main", "dag": {"tasks": tasks}, **template}


def submit(body: str) -> WorkflowRun:
    user = get_user_model().objects.get(username="scientist")
    return services.run_submit(user=user, body=body, project="eo-demo")


def observe() -> None:
    items, _ = lists.list_objects(resources.RESOURCE_BINDING)
    bindings_observe(items)


def created(run: WorkflowRun) -> set[str]:
    return set(
        UnitRun.objects.filter(run=run).exclude(workflow_name="").values_list("name", flat=True)
    )


def until(sandbox: SandboxServer, predicate: Callable[[], Any], what: str) -> Any:
    def step() -> Any:
        observe()
        return predicate()

    return sandbox.wait_for(step, what=what)


def waiting_gate(run: WorkflowRun, name: str = "approve") -> UnitRun | None:
    """After an advance, the run's suspend step ``name`` once it runs (waits to be resumed)."""
    run_advance(run.pk)
    unit = UnitRun.objects.get(run=run, name=name)
    return unit if unit.phase == UnitPhase.RUNNING else None


def run_to_the_end(sandbox: SandboxServer, run: WorkflowRun, most: int | None = None) -> int:
    """Advance and observe until the run ends; the most units seen running at once."""
    peak = 0

    def ended() -> bool:
        nonlocal peak
        run_advance(run.pk)
        running = UnitRun.objects.filter(run=run).exclude(workflow_name="")
        peak = max(peak, running.exclude(phase__in=list(FINAL_UNIT)).count())
        if most is not None:
            assert peak <= most
        run.refresh_from_db()
        return run.status not in (RunStatus.PENDING, RunStatus.RUNNING)

    until(sandbox, ended, "the run to end")
    return peak


FOUR = [{"name": n, "template": "work"} for n in "abcd"]


def test_template_parallelism_holds_across_units(fleet: SandboxServer) -> None:
    run = submit(workflow(dag(FOUR, parallelism=2), leaf(fleet, "work")))
    run_advance(run.pk)
    assert len(created(run)) == 2
    assert run_to_the_end(fleet, run, most=2) == 2
    assert run.status == RunStatus.SUCCEEDED
    assert len(created(run)) == 4


def test_workflow_parallelism_holds_across_a_loops_units(fleet: SandboxServer) -> None:
    steps = {
        "name": "main",
        "steps": [[{"name": "item", "template": "work", "withItems": [1, 2, 3]}]],
    }
    run = submit(workflow(steps, leaf(fleet, "work"), parallelism=1))
    run_advance(run.pk)
    assert len(created(run)) == 1
    assert run_to_the_end(fleet, run, most=1) == 1
    assert run.status == RunStatus.SUCCEEDED


def test_a_template_with_fail_fast_starts_nothing_after_a_failure(fleet: SandboxServer) -> None:
    tasks = [{"name": "bad", "template": "broken"}, {"name": "good", "template": "work"}]
    body = workflow(
        dag(tasks, parallelism=1, failFast=True),
        leaf(fleet, "broken", fail=True),
        leaf(fleet, "work"),
        onExit="work",
    )
    run = submit(body)
    run_to_the_end(fleet, run)
    assert run.status == RunStatus.FAILED
    good = UnitRun.objects.get(run=run, name="good")
    assert good.phase == UnitPhase.OMITTED
    assert not good.workflow_name
    assert "failFast" in good.message
    # The exit handler still runs (and the parallelism of 1 left it room).
    assert UnitRun.objects.get(run=run, name="onExit").phase == UnitPhase.SUCCEEDED


def test_dag_fail_fast_by_default_still_starts_ready_tasks(fleet: SandboxServer) -> None:
    """``dag.failFast`` (default true) is the DAG's verdict, not a scheduling gate."""
    tasks = [{"name": "bad", "template": "broken"}, {"name": "good", "template": "work"}]
    run = submit(
        workflow(dag(tasks, parallelism=1), leaf(fleet, "broken", fail=True), leaf(fleet, "work"))
    )
    run_to_the_end(fleet, run)
    assert run.status == RunStatus.FAILED
    assert UnitRun.objects.get(run=run, name="good").phase == UnitPhase.SUCCEEDED


def test_a_suspended_run_starts_nothing_until_resumed(fleet: SandboxServer, scientist_api) -> None:
    run = submit(workflow(dag(FOUR[:1]), leaf(fleet, "work"), suspend=True))
    run_advance(run.pk)
    assert created(run) == set()
    answer = scientist_api.get(f"/api/v1/runs/{run.pk}/")
    assert answer.json()["suspended"] is True
    assert (
        scientist_api.post(f"/api/v1/runs/{run.pk}/resume/", {}, format="json").status_code == 200
    )
    run.refresh_from_db()
    assert not run.suspended
    run_to_the_end(fleet, run)
    assert run.status == RunStatus.SUCCEEDED


def test_resuming_a_run_that_is_neither_suspended_nor_running_is_refused(
    fleet: SandboxServer, scientist_api
) -> None:
    run = submit(workflow(dag(FOUR[:1]), leaf(fleet, "work")))
    answer = scientist_api.post(f"/api/v1/runs/{run.pk}/resume/", {}, format="json")
    assert answer.status_code == 409


@pytest.mark.parametrize("strategy", ["Stop", "Terminate"])
def test_a_run_submitted_with_shutdown_starts_nothing(fleet: SandboxServer, strategy: str) -> None:
    run = submit(workflow(dag(FOUR[:2]), leaf(fleet, "work"), shutdown=strategy))
    run_advance(run.pk)
    run.refresh_from_db()
    assert run.status == RunStatus.STOPPED
    assert f"strategy '{strategy}'" in run.message
    assert created(run) == set()
    assert set(run.units.values_list("phase", flat=True)) == {UnitPhase.OMITTED}


def test_the_deadline_is_the_runs_not_each_steps(fleet: SandboxServer) -> None:
    chain = [{"name": "a", "template": "work"}, {"name": "b", "template": "work", "depends": "a"}]
    run = submit(workflow(dag(chain), leaf(fleet, "work"), activeDeadlineSeconds=600))
    # The run started 500 s ago: its first step may run for what is left, not 600 s more.
    WorkflowRun.objects.filter(pk=run.pk).update(created_at=run.created_at - timedelta(seconds=500))
    run.refresh_from_db()
    run_advance(run.pk)
    a = UnitRun.objects.get(run=run, name="a")
    spec = client.get(resources.WORKFLOW, a.workflow_name)["spec"]
    assert 90 <= spec["activeDeadlineSeconds"] <= 100
    # Past the deadline, what has not started never does: it fails, and so does the run.
    WorkflowRun.objects.filter(pk=run.pk).update(created_at=run.created_at - timedelta(seconds=200))
    run_to_the_end(fleet, run)
    b = UnitRun.objects.get(run=run, name="b")
    assert b.phase == UnitPhase.FAILED and not b.workflow_name
    assert "activeDeadlineSeconds" in b.message
    assert run.status == RunStatus.FAILED


def test_artifacts_are_collected_when_the_run_ends(fleet: SandboxServer) -> None:
    chain = [{"name": "a", "template": "work"}, {"name": "b", "template": "work", "depends": "a"}]
    run = submit(
        workflow(dag(chain), leaf(fleet, "work"), artifactGC={"strategy": "OnWorkflowCompletion"})
    )
    run_advance(run.pk)
    a = UnitRun.objects.get(run=run, name="a")
    spec = client.get(resources.WORKFLOW, a.workflow_name)["spec"]
    # The member collects when the portal deletes the step workflow, not when it completes.
    assert spec["artifactGC"] == {"strategy": "OnWorkflowDeletion"}
    until(fleet, lambda: UnitRun.objects.get(pk=a.pk).phase in FINAL_UNIT, "a to end")
    step_workflows_cleanup(keep_seconds=0)
    assert client.get(resources.WORKFLOW, a.workflow_name)  # kept: b may still read its outputs
    run_to_the_end(fleet, run)
    assert step_workflows_cleanup(keep_seconds=0) == 2
    with pytest.raises(errors.NotFound):
        client.get(resources.WORKFLOW, a.workflow_name)


def mutex_workflow(sandbox: SandboxServer, **spec: Any) -> str:
    return workflow(dag(FOUR[:1]), leaf(sandbox, "work"), **spec)


def test_a_workflow_mutex_holds_across_runs(fleet: SandboxServer) -> None:
    sync = {"synchronization": {"mutexes": [{"name": "test"}]}}
    first, second = submit(mutex_workflow(fleet, **sync)), submit(mutex_workflow(fleet, **sync))
    run_advance(first.pk)
    run_advance(second.pk)
    assert created(first) == {"a"} and created(second) == set()
    waiting = UnitRun.objects.get(run=second)
    assert "eo-demo/Mutex/test" in waiting.message
    # The step workflow does not lock again at its site (nor need the lock's ConfigMap).
    a = UnitRun.objects.get(run=first)
    assert "synchronization" not in client.get(resources.WORKFLOW, a.workflow_name)["spec"]
    run_to_the_end(fleet, first)  # its last advance releases the mutex
    run_advance(second.pk)
    assert created(second) == {"a"}
    run_to_the_end(fleet, second)
    assert second.status == RunStatus.SUCCEEDED


def config_map(sandbox: SandboxServer, name: str, data: dict[str, str]) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}
    sandbox.request("POST", "/api/v1/namespaces/portal/configmaps", body)


def test_a_template_semaphore_limits_units_by_its_configmap(fleet: SandboxServer) -> None:
    config_map(fleet, "my-config", {"template": "2"})
    sem = {"semaphores": [{"configMapKeyRef": {"name": "my-config", "key": "template"}}]}
    run = submit(workflow(dag(FOUR), leaf(fleet, "work", synchronization=sem)))
    run_advance(run.pk)
    assert len(created(run)) == 2
    assert run_to_the_end(fleet, run, most=2) == 2
    assert run.status == RunStatus.SUCCEEDED


def test_a_semaphore_without_its_configmap_errors_naming_the_field(fleet: SandboxServer) -> None:
    sem = {"semaphores": [{"configMapKeyRef": {"name": "absent", "key": "workflow"}}]}
    run = submit(mutex_workflow(fleet, synchronization=sem))
    run_advance(run.pk)
    run.refresh_from_db()
    assert run.status == RunStatus.ERROR
    assert "spec.synchronization.semaphores[0].configMapKeyRef" in run.message
    assert created(run) == set()


def test_the_preview_warns_that_memoization_is_per_site(
    fleet: SandboxServer, scientist_api
) -> None:
    memo = {"key": "k", "maxAge": "1h", "cache": {"configMap": {"name": "cache"}}}
    nested = {"name": "inner", "steps": [[{"name": "w", "template": "locked"}]]}
    locked = leaf(fleet, "locked", synchronization={"mutexes": [{"name": "m"}]})
    body = workflow(
        dag([{"name": "a", "template": "work"}, {"name": "b", "template": "inner"}]),
        leaf(fleet, "work", memoize=memo),
        nested,
        locked,
    )
    answer = scientist_api.post("/api/v1/runs/preview/", data=body, content_type="application/yaml")
    assert answer.status_code == 200, answer.json()
    warnings = {w["path"]: w["message"] for w in answer.json()["warnings"]}
    assert set(warnings) == {"spec.templates[1].memoize", "spec.templates[3].synchronization"}
    assert "per site" in warnings["spec.templates[1].memoize"]


def test_an_approval_gate_resumes_from_rest_with_its_node(
    fleet: SandboxServer, scientist_api
) -> None:
    """Argo's suspend-template example: resuming the `approve` step (the worker marks its
    Suspend node through Karmada's cluster proxy) lets the run reach Argo's outcome."""
    from portal import tasks

    run = submit((ARGO_EXAMPLES / "suspend-template.yaml").read_text())
    approve = until(fleet, lambda: waiting_gate(run), "the approval gate")
    assert scientist_api.get(f"/api/v1/runs/{run.pk}/units/approve/").json()["suspended"]
    answer = scientist_api.post(
        f"/api/v1/runs/{run.pk}/resume/", {"node": "approve"}, format="json"
    )
    assert answer.status_code == 200
    observe()
    assert waiting_gate(run) is not None  # the request alone resumes nothing: the worker does
    tasks.unit_resume(approve.pk, "scientist")  # what the worker runs for that request
    run_to_the_end(fleet, run)
    assert run.status == RunStatus.SUCCEEDED
    assert run.events.filter(kind="resumed", message__contains="1 suspended node").exists()


def exit_workflow(sandbox: SandboxServer) -> str:
    slow = leaf(sandbox, "slow")
    slow["metadata"]["annotations"][sandbox.annotation("duration")] = "600s"
    return workflow(
        dag([{"name": "a", "template": "slow"}]), slow, leaf(sandbox, "bye"), onExit="bye"
    )


@pytest.mark.parametrize("strategy", ["Stop", "Terminate"])
def test_stop_runs_the_exit_handler_and_terminate_does_not(
    fleet: SandboxServer, scientist_api, strategy: str
) -> None:
    run = submit(exit_workflow(fleet))
    run_advance(run.pk)
    answer = scientist_api.post(
        f"/api/v1/runs/{run.pk}/stop/", {"strategy": strategy}, format="json"
    )
    assert answer.status_code == 200
    a = UnitRun.objects.get(run=run, name="a")
    run_advance(run.pk)  # what the stop's advance does: the step is asked to stop
    assert client.get(resources.WORKFLOW, a.workflow_name)["spec"]["shutdown"] == strategy

    def settled() -> bool:
        run_advance(run.pk)
        units = list(UnitRun.objects.filter(run=run))
        return all(u.phase in FINAL_UNIT for u in units) and (
            strategy == "Terminate" or any(u.kind == "exit" for u in units)
        )

    until(fleet, settled, "the stopped run to settle")
    run.refresh_from_db()
    assert run.status == RunStatus.STOPPED
    exits = UnitRun.objects.filter(run=run, name="onExit")
    if strategy == "Terminate":
        assert not exits.exists()
    else:
        bye = exits.get()
        assert bye.phase == UnitPhase.SUCCEEDED
        assert bye.spec["workflow_status"] == RunStatus.FAILED


def test_a_stop_strategy_must_be_stop_or_terminate(fleet: SandboxServer, scientist_api) -> None:
    run = submit(exit_workflow(fleet))
    answer = scientist_api.post(f"/api/v1/runs/{run.pk}/stop/", {"strategy": "Kill"}, format="json")
    assert answer.status_code == 400
    assert answer.json()["errors"][0]["path"] == "strategy"


def test_a_lock_whose_run_ended_without_releasing_it_is_taken_over(fleet: SandboxServer) -> None:
    """A run moved to Error by a failing advance never released its mutex: the next run to
    ask for it finds the holder ended and takes it."""
    sync = {"synchronization": {"mutexes": [{"name": "orphan"}]}}
    first, second = submit(mutex_workflow(fleet, **sync)), submit(mutex_workflow(fleet, **sync))
    run_advance(first.pk)
    run_advance(second.pk)
    assert created(second) == set()
    WorkflowRun.objects.filter(pk=first.pk).update(status=RunStatus.ERROR)  # as _give_up does
    run_advance(second.pk)
    assert created(second) == {"a"}


def test_the_run_page_offers_to_resume_a_suspended_run(fleet: SandboxServer, client) -> None:
    from django.urls import reverse

    run = submit(workflow(dag(FOUR[:1]), leaf(fleet, "work"), suspend=True))
    client.force_login(get_user_model().objects.get(username="scientist"))
    page = client.get(reverse("ui-run-live", args=[run.pk])).content.decode()
    assert "Resume run" in page and "spec.suspend" in page
    assert client.post(reverse("ui-run-resume", args=[run.pk])).status_code == 302
    run.refresh_from_db()
    assert not run.suspended
    assert "Resume run" not in client.get(reverse("ui-run-live", args=[run.pk])).content.decode()
