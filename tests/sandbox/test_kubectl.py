"""kubectl (the one on the machine) against the sandbox: discovery, CRUD, apply, watch."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.fixtures_sandbox import SandboxServer
from tests.sandbox.conftest import unique

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

POLICY = """\
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: {name}
  labels: {{team: {team}}}
spec:
  priority: {priority}
  resourceSelectors:
    - apiVersion: argoproj.io/v1alpha1
      kind: Workflow
  placement:
    clusterAffinity:
      clusterNames: [site-b]
"""


def kubectl(
    sandbox: SandboxServer, *args: str, stdin: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    proc = subprocess.run(
        [KUBECTL, "--kubeconfig", str(sandbox.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr}")
    return proc


def test_kubectl_gets_clusters_and_api_resources(sandbox: SandboxServer) -> None:
    out = kubectl(sandbox, "get", "clusters").stdout
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["NAME", "VERSION", "MODE", "READY"]
    assert [ln.split()[0] for ln in lines[1:]] == ["site-a", "site-b", "site-c"]
    assert all(ln.split()[3] == "True" for ln in lines[1:])
    resources = kubectl(sandbox, "api-resources").stdout
    for plural in ("propagationpolicies", "resourcebindings", "workflows", "clusters"):
        assert plural in resources
    name = kubectl(
        sandbox, "get", "cluster", "site-c", "-o", "jsonpath={.metadata.labels.accelerator}"
    ).stdout
    assert name == "nvidia-a100"


def test_kubectl_create_apply_patch_delete(sandbox: SandboxServer, tmp_path: Path) -> None:
    name = unique("kpp")
    manifest = tmp_path / "pp.yaml"
    manifest.write_text(POLICY.format(name=name, team="x", priority=1))
    assert "created" in kubectl(sandbox, "create", "-f", str(manifest)).stdout
    again = kubectl(sandbox, "create", "-f", str(manifest), check=False)
    assert again.returncode != 0 and "AlreadyExists" in again.stderr

    manifest.write_text(POLICY.format(name=name, team="x", priority=2))
    assert "configured" in kubectl(sandbox, "apply", "-f", str(manifest)).stdout
    assert kubectl(sandbox, "get", "pp", name, "-o", "jsonpath={.spec.priority}").stdout == "2"
    manifest.write_text(POLICY.format(name=name, team="x", priority=3))
    assert (
        "serverside-applied"
        in kubectl(sandbox, "apply", "--server-side", "-f", str(manifest)).stdout
    )
    assert kubectl(sandbox, "get", "pp", name, "-o", "jsonpath={.spec.priority}").stdout == "3"

    kubectl(
        sandbox,
        "patch",
        "pp",
        name,
        "--type",
        "merge",
        "-p",
        '{"metadata":{"labels":{"team":"y"}}}',
    )
    kubectl(
        sandbox,
        "patch",
        "pp",
        name,
        "--type",
        "json",
        "-p",
        '[{"op":"replace","path":"/spec/priority","value":4}]',
    )
    assert (
        kubectl(sandbox, "get", "pp", "-l", "team=y", "-o", "name").stdout.strip()
        == f"propagationpolicy.policy.karmada.io/{name}"
    )
    assert kubectl(sandbox, "get", "pp", "-l", "team=x", "-o", "name").stdout.strip() == ""
    assert kubectl(sandbox, "get", "pp", name, "-o", "jsonpath={.spec.priority}").stdout == "4"

    assert "deleted" in kubectl(sandbox, "delete", "pp", name).stdout
    missing = kubectl(sandbox, "get", "pp", name, check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr


def test_kubectl_apply_server_side_creates(sandbox: SandboxServer, tmp_path: Path) -> None:
    name = unique("ssa")
    manifest = tmp_path / "pp.yaml"
    manifest.write_text(POLICY.format(name=name, team="z", priority=1))
    assert (
        "serverside-applied"
        in kubectl(sandbox, "apply", "--server-side", "-f", str(manifest)).stdout
    )
    assert kubectl(sandbox, "get", "pp", name, "-o", "name").stdout.strip()


def test_kubectl_reports_invalid_objects(sandbox: SandboxServer, tmp_path: Path) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(POLICY.format(name=unique("bad"), team="x", priority='"high"'))
    proc = kubectl(sandbox, "create", "-f", str(manifest), check=False)
    assert proc.returncode != 0
    assert "is invalid" in proc.stderr and "spec.priority" in proc.stderr


def test_kubectl_watch_prints_new_workflows(sandbox: SandboxServer, tmp_path: Path) -> None:
    assert KUBECTL is not None
    watcher = subprocess.Popen(
        [
            KUBECTL,
            "--kubeconfig",
            str(sandbox.kubeconfig),
            "get",
            "workflows",
            "-w",
            "--request-timeout=30s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1.0)
        name = unique("wwf")
        manifest = tmp_path / "wf.yaml"
        manifest.write_text(
            "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\n"
            f"metadata: {{name: {name}}}\n"
            "spec: {entrypoint: main, templates: [{name: main, container: {image: busybox}}]}\n"
        )
        kubectl(sandbox, "create", "-f", str(manifest))
        assert watcher.stdout is not None
        line = ""
        deadline = time.monotonic() + 20
        while name not in line and time.monotonic() < deadline:
            line = watcher.stdout.readline()
        assert name in line
    finally:
        watcher.terminate()
        watcher.wait(10)


def test_kubectl_watch_from_an_expired_version_is_gone(sandbox: SandboxServer) -> None:
    rv = json.loads(kubectl(sandbox, "get", "--raw", "/api/v1/namespaces").stdout)["metadata"][
        "resourceVersion"
    ]
    assert int(rv) > 0
    kubectl(sandbox, "create", "namespace", unique("gone"))
    sandbox.compact()
    proc = kubectl(
        sandbox,
        "get",
        "--raw",
        f"/api/v1/namespaces?watch=true&resourceVersion={rv}&timeoutSeconds=2",
        check=False,
    )
    assert '"code":410' in proc.stdout and '"reason":"Expired"' in proc.stdout
