"""Every manifest in deploy/ validates and every kustomization builds."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator

from tests.deploy.helpers import (
    DEPLOY,
    DOCUMENTS,
    grants,
    manifest_problems,
    need_tool,
    rules_of,
    strict,
)


def test_deploy_holds_the_manifests_the_issue_asks_for() -> None:
    kinds = {(path.split("/")[1], doc["kind"]) for path, _, doc in DOCUMENTS}
    for folder, kind in [
        ("host", "Deployment"),
        ("host", "Service"),
        ("host", "ConfigMap"),
        ("karmada", "Namespace"),
        ("karmada", "ClusterRole"),
        ("karmada", "Role"),
        ("karmada", "MutatingWebhookConfiguration"),
        ("karmada", "ResourceInterpreterCustomization"),
        ("member", "ConfigMap"),
        ("examples", "PropagationPolicy"),
    ]:
        assert (folder, kind) in kinds, f"deploy/{folder} has no {kind}"
    deployments = {
        doc["metadata"]["name"] for _, _, doc in DOCUMENTS if doc["kind"] == "Deployment"
    }
    assert deployments == {"portal-web", "portal-worker", "portal-beat", "portal-watcher"}


def test_two_watchers_and_two_beats_run_and_elect_a_leader(settings: Any) -> None:
    from portal import leader

    by_name = {d["metadata"]["name"]: d for _, _, d in DOCUMENTS if d["kind"] == "Deployment"}
    for name in ("portal-watcher", "portal-beat"):
        spec = by_name[name]["spec"]
        assert spec["replicas"] == 2, name
        # A rollout keeps one replica up: the election, not the strategy, keeps one leading.
        assert spec["strategy"]["type"] == "RollingUpdate", name
        assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 1, name
    assert by_name["portal-beat"]["spec"]["template"]["spec"]["containers"][0]["command"][:4] == [
        "celery",
        "-A",
        "portal",
        "beat",
    ]
    assert settings.CELERY_BEAT_SCHEDULER == "portal.beat:LeaderScheduler"
    # The Role names exactly the Leases the portal elects with.
    named = {n for g, r, n in grants(rules_of("Role")) if r == "leases" and n != "*"}
    assert named == {leader.WATCHER_LEASE, leader.BEAT_LEASE}


@pytest.mark.parametrize(
    ("path", "index", "doc"),
    DOCUMENTS,
    ids=[f"{p}#{i}:{d.get('kind')}" for p, i, d in DOCUMENTS],
)
def test_every_manifest_validates(path: str, index: int, doc: dict[str, Any]) -> None:
    assert manifest_problems(doc) == [], f"{path} document {index}"


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (  # a field Karmada does not know would be pruned by the API server
            {
                "apiVersion": "policy.karmada.io/v1alpha1",
                "kind": "PropagationPolicy",
                "metadata": {"name": "x"},
                "spec": {
                    "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                    "placment": {},
                },
            },
            "spec: Additional properties are not allowed ('placment'",
        ),
        (  # wrong type deep inside a CRD
            {
                "apiVersion": "policy.karmada.io/v1alpha1",
                "kind": "PropagationPolicy",
                "metadata": {"name": "x"},
                "spec": {
                    "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                    "priority": "high",
                },
            },
            "spec/priority: 'high' is not of type 'integer'",
        ),
        (
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "lables": {}}},
            "ConfigMap.metadata.lables: unknown field of V1ObjectMeta",
        ),
        (
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "x"},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": "get"}],
            },
            "Role.rules[0].verbs: expected a list",
        ),
        (  # required field missing (Service port)
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "x"},
                "spec": {"ports": [{"name": "https"}]},
            },
            "`port`, must not be `None`",
        ),
        ({"apiVersion": "example.org/v1", "kind": "Gadget"}, "no Kubernetes model"),
    ],
)
def test_the_checks_catch_broken_manifests(obj: dict[str, Any], expected: str) -> None:
    problems = manifest_problems(obj)
    assert any(expected in p for p in problems), problems


def test_int_or_string_fields_take_both() -> None:
    schema = strict({"type": "object", "properties": {"p": {"x-kubernetes-int-or-string": True}}})
    validator = Draft7Validator(schema)
    assert not list(validator.iter_errors({"p": 80}))
    assert not list(validator.iter_errors({"p": "http"}))
    assert list(validator.iter_errors({"p": 1.5}))


def kustomizations() -> list[Path]:
    return sorted(p.parent for p in DEPLOY.rglob("kustomization.yaml"))


@pytest.mark.parametrize("folder", kustomizations(), ids=lambda p: p.name)
def test_every_kustomization_builds_and_lists_its_folder(folder: Path) -> None:
    kubectl = need_tool("kubectl", "kubectl with kustomize, v1.32 on the project's machines")
    out = subprocess.run(
        [kubectl, "kustomize", str(folder)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    built = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert built and all(manifest_problems(d) == [] for d in built)
    listed = set(yaml.safe_load((folder / "kustomization.yaml").read_text())["resources"])
    # webhook.yaml is applied from `manage.py karmada_manifests` (URL, token and CA filled).
    present = {p.name for p in folder.glob("*.yaml")} - {"kustomization.yaml", "webhook.yaml"}
    assert listed == present
