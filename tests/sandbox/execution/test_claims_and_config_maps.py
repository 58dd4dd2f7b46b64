"""A member's PersistentVolumeClaims and parameter ConfigMaps, as Kubernetes and Argo's
controller treat them."""

from __future__ import annotations

from typing import Any

from tests.sandbox.execution.conftest import Member, needs_bwrap
from tests.sandbox.execution.test_execution import sh, steps, wf

pytestmark = needs_bwrap

CM_LABEL = {"workflows.argoproj.io/configmap-type": "Parameter"}


def _config_map(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def _claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def _mounting(name: str, script: str, claim_volume: str = "work") -> dict[str, Any]:
    t = sh(name, script)
    t["container"]["volumeMounts"] = [{"name": claim_volume, "mountPath": "/mnt/vol"}]
    return t


def test_a_pod_whose_claim_is_missing_stays_pending_until_the_claim_exists(
    site_b: Member,
) -> None:
    volumes = [{"name": "work", "persistentVolumeClaim": {"claimName": "shared-w18"}}]
    writer = wf(_mounting("main", "echo kept > /mnt/vol/f.txt"), volumes=volumes)
    name = site_b.create(writer)
    message = site_b.server.wait_for(
        lambda: next(iter(site_b.pods(site_b.status(name)).values()), {}).get("message"),
        what="the pod's pending reason",
    )
    assert message == '0/1 nodes are available: persistentvolumeclaim "shared-w18" not found.'
    assert site_b.status(name)["phase"] == "Running"
    (pod,) = site_b.pods(site_b.status(name)).values()
    assert pod["phase"] == "Pending"

    site_b.put(_claim("shared-w18"))
    assert site_b.wait(name)["phase"] == "Succeeded"
    # A later Workflow at the same site mounting the claim reads what the first one wrote.
    reader = wf(_mounting("main", "cat /mnt/vol/f.txt"), volumes=volumes)
    status = site_b.wait(site_b.create(reader))
    (node,) = site_b.pods(status).values()
    assert node["outputs"]["result"] == "kept"


def test_volume_claim_templates_are_the_workflows_own_and_start_empty(site_b: Member) -> None:
    claim = {"metadata": {"name": "work"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
    main = steps(
        "main",
        [{"name": "w", "template": "w"}],
        [{"name": "r", "template": "r"}],
    )
    first = wf(
        main,
        _mounting("w", "echo one > /mnt/vol/f.txt"),
        _mounting("r", "cat /mnt/vol/f.txt"),
        volumeClaimTemplates=[claim],
    )
    status = site_b.wait(site_b.create(first))
    assert status["phase"] == "Succeeded", status.get("message")
    assert site_b.pods(status)["r"]["outputs"]["result"] == "one"
    # Another Workflow gets a claim of its own: nothing of the first one's.
    other = wf(_mounting("main", "cat /mnt/vol/f.txt"), volumeClaimTemplates=[claim])
    status = site_b.wait(site_b.create(other))
    assert status["phase"] == "Failed"


def test_workflow_arguments_from_a_parameter_config_map(site_b: Member) -> None:
    site_b.put(_config_map("params-w18", CM_LABEL, msg="from the site"))
    site_b.put(_config_map("unlabelled-w18", None, msg="unseen"))
    echo = sh("main", "echo {{workflow.parameters.msg}}")

    def run(ref: dict[str, Any]) -> dict[str, Any]:
        args = {"parameters": [{"name": "msg", "valueFrom": ref}]}
        return site_b.wait(site_b.create(wf(echo, arguments=args)))

    status = run({"configMapKeyRef": {"name": "params-w18", "key": "msg"}})
    assert status["phase"] == "Succeeded", status.get("message")
    (node,) = site_b.pods(status).values()
    assert node["outputs"]["result"] == "from the site"

    status = run({"configMapKeyRef": {"name": "absent-w18", "key": "msg"}, "default": "dflt"})
    (node,) = site_b.pods(status).values()
    assert node["outputs"]["result"] == "dflt"

    status = run({"configMapKeyRef": {"name": "unlabelled-w18", "key": "msg"}})
    assert status["phase"] == "Error"
    assert status["message"] == (
        "failed to set global parameter msg from configmap with name unlabelled-w18 and key "
        "msg: ConfigMap 'unlabelled-w18' needs to have the label "
        "workflows.argoproj.io/configmap-type: Parameter to load parameters"
    )


def test_template_inputs_from_a_config_map_and_arguments_naming_globals(site_b: Member) -> None:
    site_b.put(_config_map("simple-parameters", CM_LABEL, msg="hello from configmap"))
    printer = sh("printer", "echo {{inputs.parameters.message}}")
    printer["inputs"] = {
        "parameters": [
            {
                "name": "message",
                "valueFrom": {"configMapKeyRef": {"name": "simple-parameters", "key": "msg"}},
            }
        ]
    }
    status = site_b.wait(site_b.create(wf(printer)))
    (node,) = site_b.pods(status).values()
    assert node["outputs"]["result"] == "hello from configmap"

    # The portal passes a step's argument that reads a ConfigMap argument as the reference
    # itself: the entrypoint's input gets the global's value (substituteParams).
    echo = sh("main", "echo {{inputs.parameters.m}}")
    echo["inputs"] = {"parameters": [{"name": "m"}]}
    args = {
        "parameters": [
            {
                "name": "msg",
                "valueFrom": {"configMapKeyRef": {"name": "simple-parameters", "key": "msg"}},
            },
            {"name": "m", "value": "got {{workflow.parameters.msg}}"},
        ]
    }
    status = site_b.wait(site_b.create(wf(echo, arguments=args)))
    (node,) = site_b.pods(status).values()
    assert node["outputs"]["result"] == "got hello from configmap"


def test_expression_hooks_of_a_step_and_of_the_workflow_run_once_when_true(
    site_b: Member,
) -> None:
    note = sh("note", "echo {{inputs.parameters.what}}")
    note["inputs"] = {"parameters": [{"name": "what"}]}

    def hook(expression: str, what: str) -> dict[str, Any]:
        return {
            "expression": expression,
            "template": "note",
            "arguments": {"parameters": [{"name": "what", "value": what}]},
        }

    step_hooks = {
        "running": hook('steps["work"].status == "Running"', "running"),
        "done": hook("steps.work.status == 'Succeeded'", "done {{steps.work.status}}"),
        "never": hook('steps["work"].status == "Failed"', "never"),
    }
    main = steps("main", [{"name": "work", "template": "work", "hooks": step_hooks}])
    spec_hooks = {"started": hook('workflow.status == "Running"', "started")}
    status = site_b.wait(
        site_b.create(wf(main, sh("work", "sleep 3; echo worked"), note, hooks=spec_hooks))
    )
    assert status["phase"] == "Succeeded", status.get("message")
    names = {n["name"]: n for n in status["nodes"].values()}
    hooks = {k: v for k, v in names.items() if ".hooks." in k}
    wf_name = next(iter(names)).split(".")[0]
    assert sorted(hooks) == sorted(
        [
            f"{wf_name}[0].work.hooks.done",
            f"{wf_name}[0].work.hooks.running",
            f"{wf_name}.hooks.started",
        ]
    ), sorted(names)
    results = {k.rsplit(".", 1)[1]: v["outputs"]["result"] for k, v in hooks.items()}
    assert results == {"running": "running", "done": "done Succeeded", "started": "started"}


def test_a_hook_without_an_expression_errors_the_step(site_b: Member) -> None:
    bad = {"running": {"template": "work"}}
    main = steps("main", [{"name": "work", "template": "work", "hooks": bad}])
    status = site_b.wait(site_b.create(wf(main, sh("work", "echo w"))))
    assert status["phase"] in ("Error", "Failed")
    assert "Expression required for hook" in str(status.get("message")), status.get("message")
