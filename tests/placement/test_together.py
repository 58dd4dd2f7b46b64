"""Features whose scope spans the entrypoint's steps keep its units together; ConfigMap
arguments reach every unit as references the site's Argo reads (issue 18, items 5, 6, 8, 12)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from placement import codec
from placement.manifests import TaskOutputs, run_variables, step_workflow, substitute
from placement.parser import parse_workflow


def _wf(main: dict[str, Any], *templates: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "together-"},
        "spec": {"entrypoint": "main", "templates": [main, *templates], **spec},
    }


ECHO = {
    "name": "echo",
    "inputs": {"parameters": [{"name": "m", "value": "hi"}]},
    "container": {"image": "alpine", "command": ["echo", "{{inputs.parameters.m}}"]},
}
SERVER = {"name": "server", "daemon": True, "container": {"image": "nginx"}}


def _dag(*tasks: dict[str, Any]) -> dict[str, Any]:
    return {"name": "main", "dag": {"tasks": list(tasks)}}


def _body(parsed: Any, **kw: Any) -> dict[str, Any]:
    return step_workflow(
        parsed,
        parsed.units[0],
        run_name="r",
        run_id=1,
        namespace="portal",
        site="a",
        reason="x",
        **kw,
    )


def test_a_plain_dag_is_split_and_warns_of_nothing() -> None:
    parsed = parse_workflow(
        _wf(
            _dag(
                {"name": "a", "template": "echo"}, {"name": "b", "template": "echo", "depends": "a"}
            ),
            ECHO,
        )
    )
    assert [u.name for u in parsed.units] == ["a", "b"]
    assert not any(u.carries_exit for u in parsed.units)
    assert parsed.warnings == ()


def test_it_keeps_a_daemon_and_its_clients_in_one_unit_naming_the_daemon_field() -> None:
    client = {
        "name": "b",
        "template": "echo",
        "depends": "svc",
        "arguments": {"parameters": [{"name": "m", "value": "{{tasks.svc.ip}}"}]},
    }
    parsed = parse_workflow(_wf(_dag({"name": "svc", "template": "server"}, client), ECHO, SERVER))
    (unit,) = parsed.units
    assert unit.kind == "workflow" and unit.template == "main" and unit.carries_exit
    assert [w.path for w in parsed.warnings] == ["spec.templates[2].daemon"]
    assert "{{tasks.svc.ip}}" in parsed.warnings[0].message
    # The site's Argo runs the whole DAG: the daemon's IP is its to fill.
    body = _body(parsed)
    assert body["spec"]["entrypoint"] == "main"
    assert {t["name"] for t in body["spec"]["templates"]} == {"main", "echo", "server"}
    assert "{{tasks.svc.ip}}" in str(body["spec"]["templates"])


def test_a_daemon_nested_inside_one_step_does_not_join_the_steps() -> None:
    inner = {
        "name": "inner",
        "steps": [[{"name": "svc", "template": "server"}], [{"name": "c", "template": "echo"}]],
    }
    main = {
        "name": "main",
        "steps": [[{"name": "a", "template": "inner"}], [{"name": "b", "template": "echo"}]],
    }
    parsed = parse_workflow(_wf(main, inner, ECHO, SERVER))
    assert [u.name for u in parsed.units] == ["a", "b"]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        ({"hooks": {"exit": {"template": "echo"}}}, "hooks"),
        (
            {
                "hooks": {
                    "running": {"expression": 'steps.a.status == "Running"', "template": "echo"}
                }
            },
            "hooks",
        ),
        ({"onExit": "echo"}, "onExit"),
    ],
)
def test_step_hooks_and_exit_handlers_keep_the_steps_together(
    call: dict[str, Any], field: str
) -> None:
    main = {
        "name": "main",
        "steps": [[{"name": "a", "template": "echo", **call}], [{"name": "b", "template": "echo"}]],
    }
    parsed = parse_workflow(_wf(main, ECHO))
    (unit,) = parsed.units
    assert unit.carries_exit
    assert [w.path for w in parsed.warnings] == [f"spec.templates[0].steps[0][0].{field}"]
    # The step's own hook stays on the step: its Argo runs it with the step's status.
    step = _body(parsed)["spec"]["templates"][0]["steps"][0][0]
    assert step[field] == call[field]


def test_workflow_hooks_and_on_exit_go_with_the_one_unit_and_the_portal_runs_no_other() -> None:
    hooks = {
        "exit": {"template": "echo"},
        "running": {"expression": 'workflow.status == "Running"', "template": "echo"},
    }
    main = {
        "name": "main",
        "steps": [[{"name": "a", "template": "echo"}], [{"name": "b", "template": "echo"}]],
    }
    bye = {
        "name": "bye",
        "container": {
            "image": "alpine",
            "args": ["{{workflow.status}} {{workflow.failures}} {{workflow.duration}}"],
        },
    }
    parsed = parse_workflow(_wf(main, ECHO, bye, hooks=hooks, onExit="bye"))
    (unit,) = parsed.units
    assert unit.carries_exit and parsed.on_exit is None
    assert [w.path for w in parsed.warnings] == ["spec.hooks.running"]
    assert "bye" in unit.templates
    run_vars = run_variables(
        name="r",
        namespace="ns",
        uid="u",
        created=datetime(2026, 1, 1, tzinfo=UTC),
        labels={},
        annotations={},
        duration_seconds=1.0,
        failures=[],
    )
    spec = _body(parsed, run_vars=run_vars)["spec"]
    assert spec["onExit"] == "bye"
    assert spec["hooks"] == hooks
    # Known only when the site's Argo runs the handler: left for it.
    bye_args = next(t for t in spec["templates"] if t["name"] == "bye")["container"]["args"]
    assert bye_args == ["{{workflow.status}} {{workflow.failures}} {{workflow.duration}}"]
    # Stored and read back, the unit still carries them.
    assert codec.unit_from_dict(codec.unit_to_dict(unit)).carries_exit


def test_a_workflow_exit_hook_is_the_exit_handler_of_a_split_run() -> None:
    main = _dag(
        {"name": "a", "template": "echo"}, {"name": "b", "template": "echo", "depends": "a"}
    )
    parsed = parse_workflow(_wf(main, ECHO, hooks={"exit": {"template": "echo"}}))
    assert [u.name for u in parsed.units] == ["a", "b"]
    assert parsed.on_exit == "echo"
    assert "hooks" not in _body(parsed)["spec"]
    # onExit wins over hooks.exit, as Argo's GetExitHook says.
    both = parse_workflow(
        _wf(
            main,
            ECHO,
            {**ECHO, "name": "other"},
            onExit="other",
            hooks={"exit": {"template": "echo"}},
        )
    )
    assert both.on_exit == "other"


def _mounting(name: str, volume: str) -> dict[str, Any]:
    t = copy.deepcopy(ECHO)
    t["name"] = name
    t["container"]["volumeMounts"] = [{"name": volume, "mountPath": "/mnt"}]
    return t


CLAIM = {
    "metadata": {"name": "work"},
    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
}


def test_steps_sharing_a_claim_run_as_one_unit_on_it() -> None:
    main = {
        "name": "main",
        "steps": [[{"name": "w", "template": "writer"}], [{"name": "r", "template": "reader"}]],
    }
    parsed = parse_workflow(
        _wf(
            main,
            _mounting("writer", "work"),
            _mounting("reader", "work"),
            volumeClaimTemplates=[CLAIM],
        )
    )
    assert len(parsed.units) == 1
    assert [w.path for w in parsed.warnings] == ["spec.volumeClaimTemplates[0]"]
    assert "r, w" in parsed.warnings[0].message
    # One step workflow, one claim: Argo creates it there and it goes with the workflow.
    assert _body(parsed)["spec"]["volumeClaimTemplates"] == [CLAIM]


def test_a_claim_only_one_step_mounts_does_not_join_the_steps() -> None:
    main = {
        "name": "main",
        "steps": [[{"name": "w", "template": "writer"}], [{"name": "r", "template": "echo"}]],
    }
    parsed = parse_workflow(
        _wf(main, _mounting("writer", "work"), ECHO, volumeClaimTemplates=[CLAIM])
    )
    assert [u.name for u in parsed.units] == ["w", "r"]


def test_an_existing_claim_shared_by_steps_joins_them_and_says_it_must_exist_there() -> None:
    main = {
        "name": "main",
        "steps": [[{"name": "w", "template": "writer"}], [{"name": "r", "template": "reader"}]],
    }
    volumes = [{"name": "work", "persistentVolumeClaim": {"claimName": "my-claim"}}]
    parsed = parse_workflow(
        _wf(main, _mounting("writer", "work"), _mounting("reader", "work"), volumes=volumes)
    )
    assert len(parsed.units) == 1
    assert [w.path for w in parsed.warnings] == [
        "spec.volumes[0].persistentVolumeClaim",
        "spec.volumes[0].persistentVolumeClaim.claimName",
    ]


def test_an_empty_dir_at_workflow_level_is_per_pod_and_stays_split() -> None:
    main = {
        "name": "main",
        "steps": [[{"name": "w", "template": "writer"}], [{"name": "r", "template": "reader"}]],
    }
    volumes = [{"name": "work", "emptyDir": {}}]
    parsed = parse_workflow(
        _wf(main, _mounting("writer", "work"), _mounting("reader", "work"), volumes=volumes)
    )
    assert [u.name for u in parsed.units] == ["w", "r"]


CM_ARG = {
    "name": "msg",
    "valueFrom": {"configMapKeyRef": {"name": "simple-parameters", "key": "msg"}},
}


def test_a_config_map_argument_reaches_every_unit_as_a_reference_never_empty() -> None:
    main = _dag(
        {
            "name": "a",
            "template": "echo",
            "arguments": {"parameters": [{"name": "m", "value": "{{workflow.parameters.msg}}"}]},
        },
        {
            "name": "b",
            "template": "echo",
            "depends": "a",
            "arguments": {"parameters": [{"name": "m", "value": "x {{workflow.parameters.msg}}"}]},
        },
    )
    parsed = parse_workflow(_wf(main, ECHO, arguments={"parameters": [CM_ARG]}))
    assert parsed.workflow_parameters() == {"msg": "{{workflow.parameters.msg}}"}
    assert [w.path for w in parsed.warnings] == [
        "spec.arguments.parameters[0].valueFrom.configMapKeyRef"
    ]
    for unit in parsed.units:
        body = step_workflow(
            parsed,
            unit,
            run_name="r",
            run_id=1,
            namespace="portal",
            site="a",
            reason="x",
            outputs={"a": TaskOutputs()},
        )
        params = {p["name"]: p for p in body["spec"]["arguments"]["parameters"]}
        assert params["msg"] == CM_ARG
        assert "{{workflow.parameters.msg}}" in params["m"]["value"]
    # The portal's own substitution leaves it, and does not count it as missing.
    missing: list[str] = []
    assert (
        substitute("{{workflow.parameters.msg}}", parsed.workflow_parameters(), missing=missing)
        == "{{workflow.parameters.msg}}"
    )
    assert missing == []


def test_a_dag_target_read_from_a_config_map_is_refused_naming_the_field() -> None:
    from placement.parser import WorkflowInvalid

    main = _dag({"name": "a", "template": "echo"})
    main["dag"]["target"] = "{{workflow.parameters.msg}}"
    with pytest.raises(WorkflowInvalid) as exc:
        parse_workflow(_wf(main, ECHO, arguments={"parameters": [CM_ARG]}))
    assert [e.path for e in exc.value.errors] == ["spec.templates[0].dag.target"]


def test_a_looped_step_on_a_claim_keeps_its_items_on_that_one_claim() -> None:
    loop = {"name": "w", "template": "writer", "withItems": [1, 2, 3]}
    runtime = {"name": "w", "template": "writer", "withParam": "{{steps.x.outputs.result}}"}
    for call in (loop, runtime):
        groups = [[{"name": "x", "template": "echo"}], [call]]
        main = {"name": "main", "steps": groups}
        parsed = parse_workflow(
            _wf(main, _mounting("writer", "work"), ECHO, volumeClaimTemplates=[CLAIM])
        )
        assert len(parsed.units) == 1, call
        assert [w.path for w in parsed.warnings] == ["spec.volumeClaimTemplates[0]"]


def test_templates_declaring_the_same_claim_keep_their_steps_together() -> None:
    def own(name: str) -> dict[str, Any]:
        t = _mounting(name, "mine")
        t["volumes"] = [{"name": "mine", "persistentVolumeClaim": {"claimName": "lab"}}]
        return t

    main = {
        "name": "main",
        "steps": [[{"name": "w", "template": "writer"}], [{"name": "r", "template": "reader"}]],
    }
    parsed = parse_workflow(_wf(main, own("writer"), own("reader")))
    assert len(parsed.units) == 1
    assert [w.path for w in parsed.warnings] == [
        "spec.templates[1].volumes[0].persistentVolumeClaim"
    ]
    assert "'lab'" in parsed.warnings[0].message
