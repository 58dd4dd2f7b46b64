"""Argo's meaning across step workflows on the sandbox over HTTP (the node facts of
variables-showcase among them): ConfigMap arguments read at the site that runs each
step, node facts of an earlier unit, and preview warnings naming the field."""

from __future__ import annotations

from typing import Any

import yaml
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from portal import services
from portal.controller.advance import run_advance
from portal.controller.bindings import bindings_observe
from portal.controller.step_workflow import step_workflow_for
from portal.karmada import lists, resources
from portal.models import UnitRun, WorkflowRun
from tests.fixtures_sandbox import SandboxServer
from tests.portal.controller.test_step_lifecycle import fleet  # noqa: F401 - the fixture

SITES = ("site-a", "site-b", "site-c")
CM_LABEL = {"workflows.argoproj.io/configmap-type": "Parameter"}


def _two_steps(sandbox: SandboxServer, b_argument: str, **spec: Any) -> str:
    """``a`` then ``b``; each echoes its input ``m`` as its output ``out``; ``a`` gets the
    workflow parameter ``msg``, ``b`` gets ``b_argument``."""
    echo = {
        "name": "echo",
        "metadata": {"annotations": {sandbox.annotation("duration"): "1s"}},
        "inputs": {"parameters": [{"name": "m"}]},
        "outputs": {"parameters": [{"name": "out", "value": "{{inputs.parameters.m}}"}]},
        "container": {"image": "busybox", "args": ["{{inputs.parameters.m}}"]},
    }
    tasks = [
        {
            "name": "a",
            "template": "echo",
            "arguments": {"parameters": [{"name": "m", "value": "{{workflow.parameters.msg}}"}]},
        },
        {
            "name": "b",
            "template": "echo",
            "depends": "a",
            "arguments": {"parameters": [{"name": "m", "value": b_argument}]},
        },
    ]
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "scopes-"},
            "spec": {
                "entrypoint": "main",
                "templates": [{"name": "main", "dag": {"tasks": tasks}}, echo],
                **spec,
            },
        }
    )


def _drive(sandbox: SandboxServer, run: WorkflowRun, until: Any) -> Any:
    """What the worker and the watcher do, in this process, until ``until()`` answers."""

    def step() -> Any:
        run_advance(run.pk)
        items, _ = lists.list_objects(resources.RESOURCE_BINDING)
        bindings_observe(items)
        return until()

    return sandbox.wait_for(step, what="the run to get there")


def _scientist() -> User:
    return User.objects.get(username="scientist")


def _finished(run: WorkflowRun) -> Any:
    return lambda: WorkflowRun.objects.filter(pk=run.pk, finished_at__isnull=False).first()


def test_a_config_map_argument_is_read_at_the_site_that_runs_each_step(
    fleet: SandboxServer,  # noqa: F811
) -> None:
    for site in SITES:
        cm = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "scopes-params", "namespace": "portal", "labels": CM_LABEL},
            "data": {"msg": f"read at {site}"},
        }
        fleet.request("POST", f"/_sandbox/members/{site}/objects", cm)
    ref = {"configMapKeyRef": {"name": "scopes-params", "key": "msg"}}
    body = _two_steps(
        fleet,
        "{{workflow.parameters.msg}}",
        arguments={"parameters": [{"name": "msg", "valueFrom": ref}]},
    )
    run = services.run_submit(user=_scientist(), body=body, project="eo-demo")
    done = _drive(fleet, run, _finished(run))
    assert done.status == "Succeeded", done.message
    units = {u.name: u for u in UnitRun.objects.filter(run=run)}
    for name in ("a", "b"):
        (out,) = units[name].outputs["parameters"]
        assert out["value"] == f"read at {units[name].site}", units[name].outputs


def test_a_config_map_argument_the_site_lacks_errors_instead_of_running_empty(
    fleet: SandboxServer,  # noqa: F811
) -> None:
    ref = {"configMapKeyRef": {"name": "scopes-nowhere", "key": "msg"}}
    body = _two_steps(fleet, "x", arguments={"parameters": [{"name": "msg", "valueFrom": ref}]})
    run = services.run_submit(user=_scientist(), body=body, project="eo-demo")
    done = _drive(fleet, run, _finished(run))
    assert done.status == "Error"
    a = UnitRun.objects.get(run=run, name="a")
    assert a.phase == "Error"
    assert a.message.startswith(
        "failed to set global parameter msg from configmap with name scopes-nowhere and key msg"
    ), a.message


def test_node_facts_of_an_earlier_unit_fill_a_later_units_arguments(
    fleet: SandboxServer,  # noqa: F811
) -> None:
    facts = "{{tasks.a.id}}|{{tasks.a.startedAt}}|{{tasks.a.finishedAt}}|{{tasks.a.hostNodeName}}"
    body = _two_steps(fleet, facts, arguments={"parameters": [{"name": "msg", "value": "hi"}]})
    run = services.run_submit(user=_scientist(), body=body, project="eo-demo")
    a = _drive(
        fleet, run, lambda: UnitRun.objects.filter(run=run, name="a", phase="Succeeded").first()
    )
    node = a.outputs["node"]
    assert set(node) == {"id", "startedAt", "finishedAt", "hostNodeName"}
    units = list(UnitRun.objects.filter(run=run))
    b = next(u for u in units if u.name == "b")
    wf = step_workflow_for(WorkflowRun.objects.get(pk=run.pk), b, units)
    args = {p["name"]: p.get("value") for p in wf["spec"]["arguments"]["parameters"]}
    assert args["m"] == "|".join(node[k] for k in ("id", "startedAt", "finishedAt", "hostNodeName"))
    assert node["id"] == a.workflow_name  # the node that ran the step: its step workflow's root


def test_the_preview_names_the_fields_that_keep_units_together(
    fleet: SandboxServer,  # noqa: F811
) -> None:
    doc = yaml.safe_load(
        _two_steps(
            fleet, "{{tasks.a.ip}}", arguments={"parameters": [{"name": "msg", "value": "x"}]}
        )
    )
    doc["spec"]["templates"].append(
        {"name": "svc", "daemon": True, "container": {"image": "nginx"}}
    )
    doc["spec"]["templates"][0]["dag"]["tasks"][0]["template"] = "svc"
    del doc["spec"]["templates"][0]["dag"]["tasks"][0]["arguments"]
    client = APIClient()
    client.force_authenticate(_scientist())
    response = client.post(
        "/api/v1/runs/preview/?project=eo-demo",
        data=yaml.safe_dump(doc),
        content_type="application/yaml",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert [u["name"] for u in body["units"]] == ["main"]
    assert [w["path"] for w in body["warnings"]] == ["spec.templates[2].daemon"]
    # Submitted, the run keeps the warning in its history.
    response = client.post(
        "/api/v1/runs/?project=eo-demo", data=yaml.safe_dump(doc), content_type="application/yaml"
    )
    assert response.status_code == 201, response.content
    run = WorkflowRun.objects.get(pk=response.json()["id"])
    (event,) = run.events.filter(kind="warning")
    assert event.message.startswith("spec.templates[2].daemon: 'a' is a daemon")


def hooks_workflow(
    fleet: SandboxServer,  # noqa: F811
) -> dict[str, Any]:
    """Step A with an exit hook given its status, a failing step B, and a workflow exit
    handler given the workflow's status; each leaf outputs what it saw."""

    def leaf(name: str, value: str, **annotations: str) -> dict[str, Any]:
        ann = {fleet.annotation("duration"): "1s"}
        ann.update({fleet.annotation(k): v for k, v in annotations.items()})
        return {
            "name": name,
            "metadata": {"annotations": ann},
            "inputs": {"parameters": [{"name": "s", "value": "none"}]},
            "outputs": {"parameters": [{"name": "seen", "value": value}]},
            "container": {"image": "busybox"},
        }

    hook = {
        "exit": {
            "template": "bye",
            "arguments": {"parameters": [{"name": "s", "value": "{{steps.stepA.status}}"}]},
        }
    }
    main = {
        "name": "main",
        "steps": [
            [{"name": "stepA", "template": "hello", "hooks": hook}],
            [{"name": "stepB", "template": "broken"}],
        ],
    }
    doc = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "hooks-"},
        "spec": {
            "entrypoint": "main",
            "onExit": "final",
            "templates": [
                main,
                leaf("hello", "hi"),
                leaf("broken", "x", fail="true"),
                leaf("bye", "{{inputs.parameters.s}}"),
                leaf("final", "{{workflow.status}}"),
            ],
        },
    }
    return doc


def test_step_exit_hooks_and_the_workflows_exit_handler_run_with_argos_statuses(
    fleet: SandboxServer,  # noqa: F811
) -> None:
    doc = hooks_workflow(fleet)
    run = services.run_submit(user=_scientist(), body=yaml.safe_dump(doc), project="eo-demo")
    seen: dict[str, Any] = {}

    def ended() -> WorkflowRun | None:
        items, _ = lists.list_objects(resources.RESOURCE_BINDING)
        for b in items:
            for agg in (b.get("status") or {}).get("aggregatedStatus") or []:
                for node in ((agg or {}).get("status") or {}).get("nodes", {}).values():
                    seen[node["displayName"]] = node
        return _finished(run)()

    done = _drive(fleet, run, ended)
    assert done.status == "Failed"
    # One unit, and no exit unit of the portal's: the step workflow's Argo ran both.
    assert [u.name for u in UnitRun.objects.filter(run=run)] == ["main"]
    outputs = {
        name: {p["name"]: p["value"] for p in node["outputs"]["parameters"]}
        for name, node in seen.items()
        if name.endswith(".onExit")
    }
    assert {"stepA.onExit": {"seen": "Succeeded"}}.items() <= outputs.items(), outputs
    (final,) = [v for k, v in outputs.items() if k != "stepA.onExit"]
    assert final == {"seen": "Failed"}


def test_a_workflow_exit_hook_with_arguments_is_the_split_runs_exit_handler(
    fleet: SandboxServer,  # noqa: F811
) -> None:
    doc = yaml.safe_load(
        _two_steps(fleet, "b", arguments={"parameters": [{"name": "msg", "value": "a"}]})
    )
    doc["spec"]["hooks"] = {
        "exit": {
            "template": "echo",
            "arguments": {"parameters": [{"name": "m", "value": "run {{workflow.status}}"}]},
        }
    }
    run = services.run_submit(user=_scientist(), body=yaml.safe_dump(doc), project="eo-demo")
    done = _drive(fleet, run, _finished(run))
    assert done.status == "Succeeded", done.message
    units = {u.name: u for u in UnitRun.objects.filter(run=run)}
    assert set(units) == {"a", "b", "onExit"}
    (out,) = units["onExit"].outputs["parameters"]
    assert out["value"] == "run Succeeded"
