"""Compiled Karmada and Argo objects validate against the upstream schemas; run-time helpers."""

from __future__ import annotations

import json
import re

import pytest

from placement.manifests import (
    FALLBACK_POLICY,
    TaskOutputs,
    Unresolved,
    WhenError,
    aggregate_outputs,
    dns_name,
    evaluate_depends,
    evaluate_when,
    fallback_policy,
    image_mirror_patch,
    karmada_manifests,
    override_policies,
    propagation_policy,
    resolve_arguments,
    step_workflow,
    step_workflow_name,
    substitute,
    webhook_configuration,
)
from placement.parser import Arguments, Artifact, Parameter
from placement.planner import plan
from placement.schemas.build import OUTPUT, build
from tests.placement.demo import DATASETS, FLEET, RULES, eo_pipeline
from tests.placement.schemas import (
    ARGO_SCHEMA,
    argo_problems,
    dump,
    karmada_problems,
    need_reference,
)

DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
P = "portal.multisite.io"
OVERRIDES = {
    "artifact_store": {"credentials_secret": "site-a-artifacts-credentials"},
    "artifact_repository": {"configMap": "artifact-repositories", "key": "site-a-s3"},
    "gpu_node_selector": {"nvidia.com/gpu.present": "true"},
    "image_registry_mirror": "mirror.site-a.example.org",
}


def demo_manifests() -> list[dict]:
    return karmada_manifests(
        ["site-b", ("site-a", OVERRIDES), "site-c"],
        namespace="portal",
        webhook_url="https://portal.example.org/webhooks/placement/",
        ca_bundle="Y2EtYnVuZGxl",
    )


def test_every_karmada_object_validates_against_the_upstream_crds() -> None:
    need_reference()
    objects = [o for o in demo_manifests() if o["apiVersion"].startswith("policy.karmada.io/")]
    # three sites, site-a's two overrides, fallback, site-a's repository Secret
    assert len(objects) == 3 + 2 + 1 + 1
    for obj in objects:
        assert karmada_problems(obj) == [], dump(obj)
    # The check can fail: a wrong field is caught.
    broken = propagation_policy("site-a", namespace="portal")
    broken["spec"]["placement"]["spreadConstraints"] = [{"spreadByField": "galaxy"}]
    assert karmada_problems(broken)


def test_a_site_s_repository_secret_goes_to_that_site_only() -> None:
    """Issue #28: no member holds another site's keys."""
    creds = [
        o
        for o in demo_manifests()
        if o["kind"] == "PropagationPolicy"
        and o["metadata"]["name"].startswith("portal-artifact-credentials")
    ]
    assert [c["metadata"]["name"] for c in creds] == ["portal-artifact-credentials-site-a"]
    (policy,) = creds
    assert policy["spec"]["resourceSelectors"] == [
        {"apiVersion": "v1", "kind": "Secret", "name": "site-a-artifacts-credentials"}
    ]
    assert policy["spec"]["placement"] == {"clusterAffinity": {"clusterNames": ["site-a"]}}


def test_the_site_policies_follow_the_contract() -> None:
    pp = propagation_policy("site-a", namespace="portal", domain="example.org", prefix="p-")
    assert pp["metadata"]["name"] == "p-site-a"
    selector, fallback = pp["spec"]["resourceSelectors"]
    assert selector["kind"] == "Workflow" and selector["apiVersion"] == "argoproj.io/v1alpha1"
    assert selector["labelSelector"] == {"matchLabels": {"example.org/site": "site-a"}}
    # Runtime steps the webhook did not place, whose fallback site this is.
    assert fallback["labelSelector"] == {"matchLabels": {"example.org/fallback-site": "site-a"}}
    assert pp["spec"]["placement"] == {"clusterAffinity": {"clusterNames": ["site-a"]}}
    fb = fallback_policy(namespace="portal")
    assert fb["metadata"]["name"] == FALLBACK_POLICY
    assert fb["spec"]["priority"] < propagation_policy("x", namespace="portal")["spec"]["priority"]
    # Only Workflows the portal did not create: its own carry a fallback site.
    assert fb["spec"]["resourceSelectors"][0]["labelSelector"] == {
        "matchExpressions": [
            {"key": f"{P}/managed", "operator": "DoesNotExist"},
            {"key": f"{P}/site", "operator": "DoesNotExist"},
        ],
    }
    assert fb["spec"]["placement"]["spreadConstraints"] == [
        {"spreadByField": "cluster", "maxGroups": 1, "minGroups": 1}
    ]


def test_overrides_become_override_policies() -> None:
    repo, gpu = override_policies("site-a", OVERRIDES, namespace="portal")
    assert repo["metadata"]["name"] == "portal-site-site-a"
    assert repo["spec"]["overrideRules"][0]["overriders"]["plaintext"] == [
        {
            "path": "/spec/artifactRepositoryRef",
            "operator": "add",
            "value": {"configMap": "artifact-repositories", "key": "site-a-s3"},
        }
    ]
    assert gpu["metadata"]["name"] == "portal-site-site-a-gpu"
    assert gpu["spec"]["resourceSelectors"][0]["labelSelector"]["matchLabels"] == {
        f"{P}/site": "site-a",
        f"{P}/gpu": "true",
    }
    assert override_policies("site-b", {}, namespace="portal") == []


def test_the_webhook_configuration_follows_the_contract() -> None:
    cfg = webhook_configuration("https://portal.example.org/webhooks/placement/", ca_bundle="Y2E=")
    runtime, unmanaged = cfg["webhooks"]
    for hook in (runtime, unmanaged):
        assert hook["clientConfig"] == {
            "url": "https://portal.example.org/webhooks/placement/",
            "caBundle": "Y2E=",
        }
        assert "service" not in hook["clientConfig"]
        assert hook["failurePolicy"] == "Ignore" and hook["timeoutSeconds"] == 3
        assert hook["rules"][0]["operations"] == ["CREATE"]
        assert hook["rules"][0]["resources"] == ["workflows"]
    assert runtime["objectSelector"] == {"matchLabels": {f"{P}/placement": "runtime"}}
    assert unmanaged["objectSelector"] == {
        "matchExpressions": [{"key": f"{P}/managed", "operator": "DoesNotExist"}]
    }
    assert "caBundle" not in webhook_configuration("https://x/")["webhooks"][0]["clientConfig"]


def test_the_webhook_configuration_is_a_valid_kubernetes_object() -> None:
    # No schema for admissionregistration.k8s.io in shared/reference: the official client's
    # models check required fields and enums when deserialising.
    kubernetes = pytest.importorskip("kubernetes")
    api = kubernetes.client.ApiClient()
    cfg = webhook_configuration("https://portal.example.org/webhooks/placement/")
    model = api._ApiClient__deserialize(cfg, "V1MutatingWebhookConfiguration")
    assert [w.name for w in model.webhooks] == [
        f"runtime.placement.{P}",
        f"unmanaged.placement.{P}",
    ]
    broken = json.loads(json.dumps(cfg))
    del broken["webhooks"][0]["sideEffects"]
    with pytest.raises(ValueError):
        api._ApiClient__deserialize(broken, "V1MutatingWebhookConfiguration")


def demo_step_workflows() -> list[dict]:
    parsed = eo_pipeline()
    decisions = plan(parsed, FLEET, RULES, DATASETS).by_unit()
    outputs = {
        "ingest": TaskOutputs(
            parameters={"tile-count": "12"},
            artifacts={"tiles": {"name": "tiles", "s3": {"bucket": "runs", "key": "42/tiles.tgz"}}},
        ),
        "preprocess": TaskOutputs(
            result="9f86d081",
            artifacts={"patches": {"name": "patches", "s3": {"key": "42/patches.tgz"}}},
        ),
    }
    return [
        step_workflow(
            parsed,
            unit,
            run_name="eo-pipeline-x7k2p",
            run_id=42,
            attempt=1,
            namespace="portal",
            site=decisions[unit.name].site,
            reason=decisions[unit.name].reason,
            outputs=outputs,
        )
        for unit in parsed.units
    ]


def test_demo_step_workflows_validate_against_argo_schemas() -> None:
    need_reference()
    for wf in demo_step_workflows():
        assert argo_problems(wf) == [], dump(wf)
    broken = demo_step_workflows()[0]
    broken["spec"]["templates"][0]["script"]["args"] = "not-a-list"
    assert argo_problems(broken)


def test_demo_step_workflows_follow_the_contract() -> None:
    ingest, pre, inference = demo_step_workflows()
    assert ingest["metadata"]["name"] == "eo-pipeline-x7k2p-ingest-1"
    assert ingest["metadata"]["labels"] == {
        f"{P}/managed": "true",
        f"{P}/run": "42",
        f"{P}/unit": "ingest",
        f"{P}/attempt": "1",
        f"{P}/site": "site-a",
    }
    assert ingest["metadata"]["annotations"][f"{P}/reason"].startswith("data locality")
    assert pre["metadata"]["labels"][f"{P}/placement"] == "runtime"
    assert f"{P}/site" not in pre["metadata"]["labels"]
    assert inference["metadata"]["labels"][f"{P}/gpu"] == "true"
    assert [t["name"] for t in inference["spec"]["templates"]] == ["inference"]
    assert inference["spec"]["entrypoint"] == "inference"
    params = {p["name"]: p["value"] for p in inference["spec"]["arguments"]["parameters"]}
    assert params["patches-checksum"] == "9f86d081"
    assert params["model"] == "cloud-segmentation-v3"
    assert params["scene-uri"].startswith("s3://eo-archive/")  # the run's parameters ride along
    (patches,) = inference["spec"]["arguments"]["artifacts"]
    assert patches == {"name": "patches", "s3": {"key": "42/patches.tgz"}}
    pre_args = {p["name"]: p["value"] for p in pre["spec"]["arguments"]["parameters"]}
    assert pre_args["tile-count"] == "12"


def test_step_workflow_names_are_dns_labels_and_distinct() -> None:
    assert step_workflow_name("run", "ingest", 2) == "run-ingest-2"
    long_a = step_workflow_name("r" * 60, "unit-a", 1)
    long_b = step_workflow_name("r" * 60, "unit-b", 1)
    for name in (long_a, long_b):
        assert len(name) <= 63 and DNS1123.match(name)
    assert long_a != long_b
    assert DNS1123.match(dns_name("Weird_Name", "x(0:y)", "1"))


def test_a_missing_upstream_output_is_refused() -> None:
    parsed = eo_pipeline()
    with pytest.raises(Unresolved) as info:
        step_workflow(
            parsed,
            parsed.units[1],
            run_name="r",
            run_id=1,
            namespace="p",
            site="site-b",
            reason="x",
        )
    assert "tasks.ingest.outputs.parameters.tile-count" in info.value.references


def test_the_image_mirror_patch_rewrites_every_image() -> None:
    wf = demo_step_workflows()[0]
    assert image_mirror_patch(wf, "mirror.example.org") == [
        {
            "op": "replace",
            "path": "/spec/templates/0/script/image",
            "value": "mirror.example.org/library/python:3",
        }
    ]
    mirrored = step_workflow(
        eo_pipeline(),
        eo_pipeline().units[0],
        run_name="r",
        run_id=1,
        namespace="p",
        site="site-a",
        reason="x",
        image_mirror="mirror.example.org",
    )
    assert mirrored["spec"]["templates"][0]["script"]["image"].startswith("mirror.example.org/")


def test_the_shipped_schema_is_the_build_of_the_upstream_one() -> None:
    need_reference()
    assert json.loads(OUTPUT.read_text()) == build(ARGO_SCHEMA)


# -- substitution ---------------------------------------------------------------------------


def test_substitute_fills_the_portals_references_and_leaves_argos() -> None:
    outputs = {"a": TaskOutputs(parameters={"n": "3"}, result="ok", exit_code="0")}
    text = (
        "{{workflow.parameters.x}} {{tasks.a.outputs.parameters.n}} {{tasks.a.outputs.result}} "
        "{{inputs.parameters.y}} {{item.k}} {{tasks.a.exitCode}}"
    )
    assert substitute(text, {"x": "X"}, outputs, item={"k": 7}, has_item=True) == (
        "X 3 ok {{inputs.parameters.y}} 7 0"
    )
    missing: list[str] = []
    substitute("{{tasks.b.outputs.result}} {{workflow.parameters.q}}", {}, {}, missing=missing)
    assert missing == ["tasks.b.outputs.result", "workflow.parameters.q"]


def test_resolve_arguments_turns_artifact_references_into_locations() -> None:
    args = Arguments(
        parameters=(Parameter("p", value="{{steps.s.outputs.parameters.o}}"),),
        artifacts=(
            Artifact(
                "in",
                "{{steps.s.outputs.artifacts.out}}",
                (),
                {"name": "in", "from": "{{steps.s.outputs.artifacts.out}}"},
            ),
        ),
    )
    outputs = {
        "s": TaskOutputs(
            parameters={"o": "v"},
            artifacts={
                "out": {"name": "out", "path": "/tmp/o", "gcs": {"bucket": "b", "key": "k"}}
            },
        )
    }
    assert resolve_arguments(args, {}, outputs) == {
        "parameters": [{"name": "p", "value": "v"}],
        "artifacts": [{"name": "in", "gcs": {"bucket": "b", "key": "k"}}],
    }
    with pytest.raises(Unresolved):
        resolve_arguments(args, {}, {})
    lenient = resolve_arguments(args, {}, {}, strict=False)
    assert lenient["artifacts"][0]["from"] == "{{steps.s.outputs.artifacts.out}}"


def test_aggregate_outputs_of_an_expanded_task() -> None:
    agg = aggregate_outputs(
        [
            TaskOutputs(parameters={"x": "1"}, result="a"),
            TaskOutputs(parameters={"x": "2"}, result="b"),
        ]
    )
    assert json.loads(agg.parameters["x"]) == ["1", "2"]
    assert json.loads(agg.result or "") == ["a", "b"]


# -- depends and when ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "phases", "expected"),
    [
        ("", {}, True),
        ("A", {"A": "Succeeded"}, True),
        ("A", {"A": "Skipped"}, True),
        ("A", {"A": "Failed"}, False),
        ("A", {"A": "Running"}, None),
        ("A", {}, None),
        ("A.Failed", {"A": "Failed"}, True),
        ("A.Errored", {"A": "Error"}, True),
        ("A && (B.Succeeded || C.Failed)", {"A": "Succeeded", "B": "Failed", "C": "Failed"}, True),
        (
            "A && (B.Succeeded || C.Failed)",
            {"A": "Succeeded", "B": "Failed", "C": "Succeeded"},
            False,
        ),
        ("!A.Succeeded", {"A": "Failed"}, True),
        ("A.AnySucceeded", {"A": ["Failed", "Succeeded"]}, True),
        ("A.AllFailed", {"A": ["Failed", "Succeeded"]}, False),
        ("A", {"A": ["Succeeded", "Succeeded"]}, True),
        ("A", {"A": ["Succeeded", "Running"]}, None),
    ],
)
def test_evaluate_depends(expr: str, phases: dict, expected: bool | None) -> None:
    assert evaluate_depends(expr, phases) is expected


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("{{tasks.flip.outputs.result}} == heads", True),
        ("{{tasks.flip.outputs.result}} != heads", False),
        ("{{tasks.num.outputs.result}} > 5", True),
        ("{{tasks.num.outputs.result}} <= 5", False),
        ("{{tasks.flip.outputs.result}} =~ 'he.*'", True),
        ("{{tasks.flip.outputs.result}} !~ '^t'", True),
        ("({{workflow.parameters.go}} == true) && !false", True),
        ("'a b' == \"a b\" || 1 == 2", True),
    ],
)
def test_evaluate_when(expr: str, expected: bool) -> None:
    outputs = {"flip": TaskOutputs(result="heads"), "num": TaskOutputs(result="9")}
    assert evaluate_when(expr, {"go": "true"}, outputs) is expected


@pytest.mark.parametrize(
    "expr",
    [
        "{{tasks.gone.outputs.result}} == x",
        "a ==",
        "(a",
        "a == b c",
        "{{=asInt(tasks.a.outputs.result) > 2}}",
        "{{inputs.parameters.x}} == y",
    ],
)
def test_evaluate_when_refuses_what_it_cannot_decide(expr: str) -> None:
    with pytest.raises(WhenError):
        evaluate_when(expr, {}, {})
