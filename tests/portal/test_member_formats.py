"""Members whose Argo differs from the default: pods named by node id (``POD_NAMES=v1``) and
node status stored compressed (``status.compressedNodes``, a large workflow's). The portal reads
logs and resumes steps on them as on any other member; the sandbox's fleet file sets both
per fleet (``podNames``, ``execution.maxNodeStatusBytes``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from portal import services, tasks
from portal.choices import FINAL_UNIT, RunStatus, UnitPhase
from portal.controller.advance import run_advance
from portal.controller.bindings import bindings_observe
from portal.karmada import client, lists, logs, proxy, resources
from portal.models import UnitRun, WorkflowRun
from tests.fixtures_sandbox import ARGO_EXAMPLES, SandboxServer, sandbox_on_fleet
from tests.fixtures_stack import demo_on
from tests.stack import ROOT

SAID = "hello from a nested pod"


@pytest.fixture(scope="module")
def odd_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxServer]:
    """The demo fleet with every member's controller on ``POD_NAMES=v1`` and a node status
    limit so small that every status is stored compressed."""
    fleet = yaml.safe_load((ROOT / "sandbox" / "fleets" / "demo.yaml").read_text())
    for site in fleet["sites"]:
        site["podNames"] = "v1"
    fleet["execution"]["maxNodeStatusBytes"] = 64
    with sandbox_on_fleet(tmp_path_factory.mktemp("odd-members"), fleet) as server:
        yield server


@pytest.fixture
def odd_fleet(odd_sandbox: SandboxServer, db: Any, settings: Any) -> Iterator[SandboxServer]:
    """``odd_sandbox`` as ``demo_fleet`` is the shared sandbox: the demo loaded, its policies
    written."""
    odd_sandbox.reset()
    with demo_on(odd_sandbox, settings, PORTAL_WEBHOOK_REGISTER=False):
        try:
            yield odd_sandbox
        finally:
            odd_sandbox.clear_faults()


def nested(sandbox: SandboxServer) -> str:
    """One unit whose pod is a nested step: its v1 name (the node id) and its v2 name
    (``<workflow>-say-<hash>``) differ."""
    say = {
        "name": "say",
        "metadata": {"annotations": {sandbox.annotation("result"): SAID}},
        "container": {"image": "busybox", "command": ["true"]},
    }
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "nested-"},
            "spec": {
                "entrypoint": "main",
                "templates": [
                    {"name": "main", "dag": {"tasks": [{"name": "work", "template": "inner"}]}},
                    {"name": "inner", "steps": [[{"name": "run", "template": "say"}]]},
                    say,
                ],
            },
        }
    )


def submit(body: str) -> WorkflowRun:
    user = get_user_model().objects.get(username="scientist")
    return services.run_submit(user=user, body=body, project="eo-demo")


def until(sandbox: SandboxServer, run: WorkflowRun, predicate: Callable[[], Any], what: str) -> Any:
    """What the watcher and the worker would do, in this process, until ``predicate``."""

    def step() -> Any:
        items, _ = lists.list_objects(resources.RESOURCE_BINDING)
        bindings_observe(items)
        run_advance(run.pk)
        return predicate()

    return sandbox.wait_for(step, what=what)


def finished(sandbox: SandboxServer, run: WorkflowRun) -> WorkflowRun:
    def ended() -> bool:
        return not UnitRun.objects.filter(run=run).exclude(phase__in=list(FINAL_UNIT)).exists()

    until(sandbox, run, ended, "the run to end")
    run.refresh_from_db()
    return run


def scientist_client() -> APIClient:
    from portal.api_tokens import api_token_create

    client = APIClient()
    user = get_user_model().objects.get(username="scientist")
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_create(user=user, replace=True)}")
    return client


def nested_work(sandbox: SandboxServer) -> UnitRun:
    """The nested workflow run to success on ``sandbox``; its one unit."""
    run = finished(sandbox, submit(nested(sandbox)))
    assert run.status == RunStatus.SUCCEEDED, run.message
    return UnitRun.objects.get(run=run, name="work")


def api_log(unit: UnitRun) -> str:
    """The unit's log as the scientist reads it over the REST API."""
    answer = scientist_client().get(f"/api/v1/runs/{unit.run_id}/units/{unit.name}/logs/")
    assert answer.status_code == 200, answer.content
    return answer.content.decode()


def binding_status(workflow: str) -> dict[str, Any]:
    binding = client.get(resources.RESOURCE_BINDING, f"{workflow}-workflow")
    return dict(binding["status"]["aggregatedStatus"][0]["status"])


def test_a_nested_steps_log_is_read_from_a_member_with_v1_pod_names(
    odd_fleet: SandboxServer,
) -> None:
    unit = nested_work(odd_fleet)
    status = binding_status(unit.workflow_name)
    assert "compressedNodes" in status and "nodes" not in status  # as a large workflow's
    assert logs.pod_name_version(unit.site, unit.workflow_name) == "v1"
    assert SAID in api_log(unit)


def test_the_same_log_is_read_from_a_member_with_argos_default_v2_names(
    demo_fleet: SandboxServer,
) -> None:
    unit = nested_work(demo_fleet)
    assert logs.pod_name_version(unit.site, unit.workflow_name) == "v2"
    (pod,) = logs.attempt_pods(unit, unit.attempt, unit.site).pods
    assert pod.pod.startswith(f"{unit.workflow_name}-say-")  # not the node's id
    assert SAID in api_log(unit)


def test_a_step_whose_member_compresses_its_nodes_is_resumed(odd_fleet: SandboxServer) -> None:
    """Argo's suspend-template example: the `approve` gate's Suspend node is in the member's
    ``compressedNodes``; resuming it marks it there, and the run reaches Argo's outcome."""
    run = submit((ARGO_EXAMPLES / "suspend-template.yaml").read_text())

    def approve_waiting() -> UnitRun | None:
        unit = UnitRun.objects.get(run=run, name="approve")
        return unit if unit.phase == UnitPhase.RUNNING else None

    approve = until(odd_fleet, run, approve_waiting, "the approval gate")
    member = proxy.member_workflow_get(approve.site, client.namespace(), approve.workflow_name)
    assert "compressedNodes" in member["status"] and "nodes" not in member["status"]
    tasks.unit_resume(approve.pk, "scientist")
    run = finished(odd_fleet, run)
    assert run.status == RunStatus.SUCCEEDED, run.message
    assert run.events.filter(kind="resumed", message__contains="1 suspended node").exists()


def test_fleet_file_refuses_an_unknown_pod_name_version() -> None:
    from sandbox.fleet import Site

    with pytest.raises(ValueError, match="podNames must be v1 or v2"):
        Site.from_dict({"name": "x", "podNames": "v3"})
