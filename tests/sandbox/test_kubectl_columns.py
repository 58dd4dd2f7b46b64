"""``kubectl get`` against the sandbox prints the columns kube-apiserver would: each CRD's
additionalPrinterColumns (Karmada's and Argo's CRDs as shipped), the built-in kinds' own, and a
namespace's STATUS."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sandbox import printer
from sandbox.resources import RESOURCE_TYPES
from tests.fixtures_sandbox import SandboxServer
from tests.sandbox.conftest import unique
from tests.sandbox.test_kubectl import KUBECTL, POLICY, kubectl

REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference"
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


def header_and_rows(out: str) -> tuple[list[str], list[list[str]]]:
    lines = out.splitlines()
    return lines[0].split(), [line.split() for line in lines[1:]]


@needs_kubectl
def test_kubectl_get_propagationpolicies_shows_conflict_resolution_priority_and_age(
    sandbox: SandboxServer,
) -> None:
    name = unique("pp")
    kubectl(sandbox, "apply", "-f", "-", stdin=POLICY.format(name=name, team="a", priority=7))
    header, rows = header_and_rows(kubectl(sandbox, "get", "propagationpolicies").stdout)
    assert header == ["NAME", "CONFLICT-RESOLUTION", "PRIORITY", "AGE"]
    row = next(r for r in rows if r[0] == name)
    # conflictResolution is not sent: the CRD's default, as karmada-apiserver stores it.
    assert row[1:3] == ["Abort", "7"]
    assert row[3].endswith("s")


@needs_kubectl
def test_kubectl_get_namespaces_shows_them_active(sandbox: SandboxServer) -> None:
    name = unique("ns")
    kubectl(sandbox, "create", "namespace", name)
    header, rows = header_and_rows(kubectl(sandbox, "get", "namespaces").stdout)
    assert header == ["NAME", "STATUS", "AGE"]
    assert all(row[1] == "Active" for row in rows), rows
    assert name in [row[0] for row in rows]


@needs_kubectl
def test_kubectl_get_resourcebindings_shows_scheduled_and_fully_applied(
    sandbox: SandboxServer,
) -> None:
    out = kubectl(sandbox, "get", "resourcebindings", "-A").stdout
    if out.strip():
        header, _rows = header_and_rows(out)
        assert header == ["NAMESPACE", "NAME", "SCHEDULED", "FULLYAPPLIED", "AGE"]
    out = kubectl(sandbox, "get", "clusters").stdout
    assert header_and_rows(out)[0] == ["NAME", "VERSION", "MODE", "READY", "AGE"]


CRD_FILES = {
    "propagationpolicies.policy.karmada.io": "policy.karmada.io_propagationpolicies.yaml",
    "clusterpropagationpolicies.policy.karmada.io": (
        "policy.karmada.io_clusterpropagationpolicies.yaml"
    ),
    "overridepolicies.policy.karmada.io": "policy.karmada.io_overridepolicies.yaml",
    "clusteroverridepolicies.policy.karmada.io": "policy.karmada.io_clusteroverridepolicies.yaml",
    "resourcebindings.work.karmada.io": "work.karmada.io_resourcebindings.yaml",
    "works.work.karmada.io": "work.karmada.io_works.yaml",
    "resourceinterpretercustomizations.config.karmada.io": (
        "config.karmada.io_resourceinterpretercustomizations.yaml"
    ),
}


def crd_file(key: str) -> Path:
    if key == "workflows.argoproj.io":
        return REFERENCE / "argo" / "argoproj.io_workflows.yaml"
    return REFERENCE / "karmada" / "crds" / CRD_FILES[key]


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="the upstream CRDs are not beside the tree")
@pytest.mark.parametrize("key", [*sorted(CRD_FILES), "workflows.argoproj.io"])
def test_the_sandbox_serves_each_crds_printer_columns_as_declared(key: str) -> None:
    crd = yaml.safe_load(crd_file(key).read_text())
    rtype = next(t for t in RESOURCE_TYPES if t.key == key)
    version = next(v for v in crd["spec"]["versions"] if v["name"] == rtype.version)
    declared = tuple(
        (c["name"], c["jsonPath"], c["type"]) for c in version.get("additionalPrinterColumns", [])
    )
    assert printer.columns_of(rtype.printer_columns) == printer.columns_of(declared)


def test_cells_follow_the_crd_tableconvertor() -> None:
    obj = {
        "metadata": {"name": "w", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"workload": {"manifests": [{"kind": "Workflow"}, {"kind": "Secret"}]}},
        "status": {"conditions": [{"type": "Applied", "status": "True"}], "n": 3, "ok": True},
    }
    assert printer.find(obj, ".spec.workload.manifests[*].kind") == (True, "Workflow")
    assert printer.find(obj, '.status.conditions[?(@.type=="Applied")].status') == (True, "True")
    assert printer.find(obj, ".status.missing") == (False, None)
    table = printer.table(
        (("N", ".status.n", "string"), ("OK", ".status.ok", "integer"), ("X", ".x", "string")),
        [obj],
        "5",
    )
    assert table["rows"][0]["cells"] == ["w", "3", None, None]
    ages = [printer.human_duration(s) for s in (5, 150, 3600 * 5 + 60, 3600 * 30, 86400 * 3)]
    assert ages == ["5s", "2m30s", "5h1m", "30h", "3d"]
