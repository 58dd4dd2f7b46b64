"""The Workflow interpreter's Lua under lua5.1: status, health, replicas, components, retention."""

from __future__ import annotations

import os
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator

from tests.deploy.helpers import (
    INTERPRETER,
    REFERENCE,
    YAML_LOADER,
    crd_problems,
    crd_schema,
    need_reference,
    schema_problems,
)
from tests.deploy.lua import (
    control_plane_workflow,
    member_status,
    run_lua,
)


def test_the_interpreter_asks_karmada_for_no_status_write_argos_crd_cannot_take() -> None:
    """Karmada writes an aggregated status with UpdateStatus, the /status subresource
    (pkg/controllers/status/common.go); Argo's Workflow CRD declares none, so a
    statusAggregation would answer 404 on every step's every status change."""
    need_reference()
    crd = yaml.load((REFERENCE / "argo" / "argoproj.io_workflows.yaml").read_text(), YAML_LOADER)
    assert all(not v.get("subresources") for v in crd["spec"]["versions"])
    ric = yaml.safe_load(INTERPRETER.read_text())
    assert "statusAggregation" not in ric["spec"]["customizations"]
    # What Karmada stores on the binding (statusReflection) is the portal's source instead.
    assert "statusReflection" in ric["spec"]["customizations"]


def test_the_interpreter_never_claims_karmada_places_by_capacity() -> None:
    """Duplicated replica scheduling (the portal's policies, Karmada's default) ignores
    available resources (pkg/scheduler/core/spreadconstraint/select_clusters.go)."""
    header = INTERPRETER.read_text().split("apiVersion:", 1)[0]
    assert "does NOT make Karmada place a" in header
    assert "resource-aware scheduling" not in header


def test_the_shipped_interpreter_on_the_sandbox_causes_no_failed_status_writes(
    sandbox: Any,
) -> None:
    """Applied to the sandbox (which, as Karmada, tries UpdateStatus when a Workflow
    interpreter defines statusAggregation and records AggregateStatusFailed), a step runs to
    its end with no such Event."""
    from kubernetes import client

    api = sandbox.api_client()
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    custom.create_cluster_custom_object(
        "config.karmada.io",
        "v1alpha1",
        "resourceinterpretercustomizations",
        yaml.safe_load(INTERPRETER.read_text()),
    )
    name = f"ric-{os.getpid()}"
    policy = {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "resourceSelectors": [
                {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": name}
            ],
            "placement": {"clusterAffinity": {"clusterNames": ["site-b"]}},
        },
    }
    custom.create_namespaced_custom_object(
        "policy.karmada.io", "v1alpha1", "default", "propagationpolicies", policy
    )
    workflow = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "entrypoint": "main",
            "templates": [{"name": "main", "container": {"image": "busybox"}}],
        },
    }
    custom.create_namespaced_custom_object(
        "argoproj.io", "v1alpha1", "default", "workflows", workflow
    )

    def phase() -> str:
        try:
            binding = custom.get_namespaced_custom_object(
                "work.karmada.io", "v1alpha2", "default", "resourcebindings", f"{name}-workflow"
            )
        except client.ApiException as exc:
            if exc.status == 404:  # not bound yet
                return ""
            raise
        items = (binding.get("status") or {}).get("aggregatedStatus") or [{}]
        return str((items[0].get("status") or {}).get("phase") or "")

    sandbox.wait_for(lambda: phase() == "Succeeded", what="the step to succeed")
    events = core.list_namespaced_event("default").items
    assert [e.reason for e in events if e.involved_object.name == name] == []


def test_reflection_keeps_the_whole_member_status_the_portal_reads() -> None:
    status = member_status(
        "Succeeded", outputs={"parameters": [{"name": "tile-count", "value": "4"}]}
    )
    observed = {**control_plane_workflow(), "status": status}
    (reflected,) = run_lua("statusReflection", "ReflectStatus", observed)
    assert reflected == status


@pytest.mark.parametrize(
    ("status", "healthy"),
    [
        (None, True),
        ({}, True),
        ({"phase": "Pending"}, True),
        ({"phase": "Running"}, True),
        ({"phase": "Succeeded"}, True),
        ({"phase": "Failed"}, False),
        ({"phase": "Error"}, False),
    ],
)
def test_health_is_bad_only_for_failed_and_error(status: Any, healthy: bool) -> None:
    observed = control_plane_workflow()
    if status is not None:
        observed["status"] = status
    assert run_lua("healthInterpretation", "InterpretHealth", observed) == [healthy]


def gpu_step_workflow() -> dict[str, Any]:
    wf = control_plane_workflow()
    wf["spec"] = {
        "entrypoint": "inference",
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "templates": [
            {
                "name": "inference",
                "container": {
                    "image": "ghcr.io/eo/inference:0.9.2",
                    "resources": {
                        "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}
                    },
                },
            },
            {
                "name": "summary",
                "script": {
                    "image": "python:3.12",
                    "source": "print(1)",
                    "resources": {"requests": {"cpu": "500m", "memory": "32Gi"}},
                },
            },
            {
                "name": "pair",
                "containerSet": {
                    "containers": [
                        {"name": "a", "image": "x", "resources": {"requests": {"cpu": "3"}}},
                        {"name": "b", "image": "y", "resources": {"requests": {"cpu": "2500m"}}},
                    ]
                },
            },
        ],
    }
    return wf


def test_replica_requirements_carry_the_largest_pod_request_and_the_gpus() -> None:
    wf = gpu_step_workflow()
    assert crd_problems(wf) == []  # a Workflow Argo accepts
    replicas, requirement = run_lua("replicaResource", "GetReplicas", wf)
    assert replicas == 1
    assert requirement["resourceRequest"] == {
        "cpu": "5.5",  # the containerSet pod: 3 + 2.5 CPUs
        "memory": "32Gi",  # the script pod
        "nvidia.com/gpu": "1",
    }
    assert requirement["nodeClaim"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert requirement["nodeClaim"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    # What Karmada stores in the binding must fit the binding's schema.
    spec = crd_schema("work.karmada.io/v1alpha2", "ResourceBinding")["properties"]["spec"]
    assert (
        schema_problems(Draft7Validator(spec["properties"]["replicaRequirements"]), requirement)
        == []
    )


def test_replicas_follow_parallelism_and_a_workflow_without_requests_has_none() -> None:
    wf = control_plane_workflow()
    wf["spec"]["parallelism"] = 3
    replicas, requirement = run_lua("replicaResource", "GetReplicas", wf)
    assert replicas == 3
    assert "resourceRequest" not in requirement


def test_components_match_the_replica_resource() -> None:
    wf = gpu_step_workflow()
    (components,) = run_lua("componentResource", "GetComponents", wf)
    _, requirement = run_lua("replicaResource", "GetReplicas", wf)
    assert components == [{"name": "workflow", "replicas": 1, "replicaRequirements": requirement}]
    spec = crd_schema("work.karmada.io/v1alpha2", "ResourceBinding")["properties"]["spec"]
    assert schema_problems(Draft7Validator(spec["properties"]["components"]), components) == []


def test_retention_keeps_what_argo_wrote_in_the_member() -> None:
    desired = control_plane_workflow()
    observed = {**control_plane_workflow(), "status": member_status("Running")}
    observed["spec"] = {**observed["spec"], "suspend": True}
    (retained,) = run_lua("retention", "Retain", desired, observed)
    assert retained["status"] == observed["status"]
    assert retained["spec"]["suspend"] is True


# --------------------------------------------------------------------------------------------
