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


# -- Karmada where it is unkind, as kubectl shows it ---------------------------------------
PP_ID = "propagationpolicy.karmada.io/permanent-id"


def test_kubectl_apply_keeps_the_permanent_id_and_replace_without_it_is_denied(
    sandbox: SandboxServer, tmp_path: Path
) -> None:
    name = unique("kid")
    manifest = tmp_path / "pp.yaml"
    manifest.write_text(POLICY.format(name=name, team="x", priority=1))
    assert "created" in kubectl(sandbox, "apply", "-f", str(manifest)).stdout
    got = json.loads(kubectl(sandbox, "get", "pp", name, "-o", "json").stdout)
    policy_id = got["metadata"]["labels"][PP_ID]
    assert len(policy_id) == 36
    assert got["metadata"]["finalizers"] == ["karmada.io/propagation-policy-controller"]
    assert got["spec"]["conflictResolution"] == "Abort"
    assert got["spec"]["preemption"] == "Never"
    assert got["spec"]["schedulerName"] == "default-scheduler"
    assert got["spec"]["resourceSelectors"][0]["namespace"] == "default"
    # The same file again, then a changed one: kubectl's three-way merge keeps the label.
    # (It says "configured" even for the same file: a merge patch replaces the selector list,
    # whose namespace the webhook filled in, and the webhook fills it in again.)
    again = kubectl(sandbox, "apply", "-f", str(manifest)).stdout
    assert f"propagationpolicy.policy.karmada.io/{name}" in again
    got = json.loads(kubectl(sandbox, "get", "pp", name, "-o", "json").stdout)
    assert got["metadata"]["labels"][PP_ID] == policy_id
    manifest.write_text(POLICY.format(name=name, team="x", priority=2))
    assert "configured" in kubectl(sandbox, "apply", "-f", str(manifest)).stdout
    got = json.loads(kubectl(sandbox, "get", "pp", name, "-o", "json").stdout)
    assert got["metadata"]["labels"][PP_ID] == policy_id and got["spec"]["priority"] == 2
    # A copy without the label replaces the whole object: Karmada's webhook denies it.
    replaced = kubectl(sandbox, "replace", "-f", str(manifest), check=False)
    assert replaced.returncode != 0
    assert "Error from server (Forbidden)" in replaced.stderr
    assert (
        'admission webhook "propagationpolicy.karmada.io" denied the request: label '
        f"{PP_ID} is immutable, it can only be set by the system during creation"
    ) in replaced.stderr


WORKFLOW = """\
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  name: {name}
  labels: {{portal.multisite.io/site: site-b}}
spec:
  entrypoint: main
  templates:
    - name: main
      metadata:
        annotations: {{portal.multisite.io/sandbox-result: "hello from {name}"}}
      container: {{image: busybox, command: [echo, hi]}}
"""


def test_kubectl_workflow_status_is_404_and_pod_logs_come_through_the_proxy(
    sandbox: SandboxServer, tmp_path: Path
) -> None:
    name = unique("kwf")
    (tmp_path / "pp.yaml").write_text(POLICY.format(name=unique("kpp"), team="x", priority=1))
    kubectl(sandbox, "apply", "-f", str(tmp_path / "pp.yaml"))
    (tmp_path / "wf.yaml").write_text(WORKFLOW.format(name=name))
    kubectl(sandbox, "create", "-f", str(tmp_path / "wf.yaml"))
    raw = kubectl(
        sandbox,
        "get",
        "--raw",
        f"/apis/argoproj.io/v1alpha1/namespaces/default/workflows/{name}/status",
        check=False,
    )
    assert raw.returncode != 0 and "NotFound" in raw.stderr

    def pod() -> str | None:
        rb = json.loads(
            kubectl(sandbox, "get", "rb", f"{name}-workflow", "-o", "json", check=False).stdout
            or "{}"
        )
        agg = (rb.get("status") or {}).get("aggregatedStatus") or [{}]
        status = agg[0].get("status") or {}
        if status.get("phase") != "Succeeded":
            return None
        return next(n["id"] for n in status["nodes"].values() if n["type"] == "Pod")

    pod_name = sandbox.wait_for(pod, what="the workflow done")
    log = kubectl(
        sandbox,
        "get",
        "--raw",
        "/apis/cluster.karmada.io/v1alpha1/clusters/site-b/proxy/api/v1/namespaces/default"
        f"/pods/{pod_name}/log?container=main",
    ).stdout
    assert f"hello from {name}" in log
