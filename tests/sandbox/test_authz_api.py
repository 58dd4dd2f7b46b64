"""The sandbox's authentication and RBAC over HTTP: identities from the kubeconfigs it writes,
RBAC objects served and evaluated at once (aggregation included), karmada-agent's grants,
and a secure port's anonymous user with ``--anonymous-auth``."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.fixtures_sandbox import SandboxServer, start_sandbox

RBAC = "/apis/rbac.authorization.k8s.io/v1"


def tokens(kubeconfig: Path) -> dict[str, str]:
    config = yaml.safe_load(kubeconfig.read_text())
    return {u["name"]: u["user"]["token"] for u in config["users"]}


def call(
    sandbox: SandboxServer, method: str, path: str, token: str | None, body: Any = None
) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(sandbox.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_the_admin_kubeconfig_holds_every_identity_and_the_portals_only_its_own(
    sandbox: SandboxServer,
) -> None:
    assert sandbox.admin_kubeconfig is not None
    every = tokens(sandbox.admin_kubeconfig)
    assert set(every) == {"sandbox-admin", "sandbox-portal", "sandbox-karmada-agent-site-c"}
    assert tokens(sandbox.kubeconfig) == {"sandbox-portal": every["sandbox-portal"]}
    status, body = call(sandbox, "GET", f"{RBAC}/clusterroles", every["sandbox-admin"])
    assert status == 200
    names = {r["metadata"]["name"] for r in body["items"]}
    assert {"cluster-admin", "system:discovery", "multisite-portal"} <= names


def test_karmada_agent_may_report_its_own_cluster_only(sandbox: SandboxServer) -> None:
    assert sandbox.admin_kubeconfig is not None
    agent = tokens(sandbox.admin_kubeconfig)["sandbox-karmada-agent-site-c"]
    clusters = "/apis/cluster.karmada.io/v1alpha1/clusters"
    status, own = call(sandbox, "GET", f"{clusters}/site-c", agent)
    assert status == 200
    assert call(sandbox, "PUT", f"{clusters}/site-c/status", agent, own)[0] == 200
    status, other = call(sandbox, "GET", f"{clusters}/site-a", agent)
    assert status == 403
    assert other["message"] == (
        'clusters.cluster.karmada.io "site-a" is forbidden: User "system:karmada:agent:site-c" '
        'cannot get resource "clusters" in API group "cluster.karmada.io" at the cluster scope'
    )
    workflows = "/apis/argoproj.io/v1alpha1/namespaces/portal/workflows"
    assert call(sandbox, "GET", workflows, agent)[0] == 403


def test_an_aggregated_role_grants_what_its_labelled_roles_grant_as_they_change(
    sandbox: SandboxServer,
) -> None:
    portal = tokens(sandbox.kubeconfig)["sandbox-portal"]
    label = "example.com/aggregate-to-reader"
    sandbox.request(
        "POST",
        f"{RBAC}/clusterroles",
        {
            "metadata": {"name": "reader"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]},
        },
    )
    secrets = {
        "metadata": {"name": "read-secrets", "labels": {label: "true"}},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}],
    }
    sandbox.request("POST", f"{RBAC}/clusterroles", secrets)
    sandbox.request(
        "POST",
        f"{RBAC}/namespaces/portal/rolebindings",
        {
            "metadata": {"name": "reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole"}
            | {"name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "portal"}],  # the binding's ns
        },
    )
    path = "/api/v1/namespaces/portal/secrets"
    assert call(sandbox, "GET", path, portal)[0] == 200
    assert call(sandbox, "GET", "/api/v1/namespaces/default/secrets", portal)[0] == 403
    sandbox.request(
        "PATCH",
        f"{RBAC}/clusterroles/read-secrets",
        b'{"metadata": {"labels": {"example.com/aggregate-to-reader": null}}}',
        content_type="application/merge-patch+json",
    )
    assert call(sandbox, "GET", path, portal)[0] == 403


def test_with_anonymous_auth_no_credentials_is_the_anonymous_user(tmp_path: Path) -> None:
    server = start_sandbox(tmp_path, extra_args=["--anonymous-auth"])
    try:
        assert call(server, "GET", "/version", None)[0] == 200
        status, body = call(server, "GET", "/apis", None)
        assert status == 403
        assert body["message"] == 'forbidden: User "system:anonymous" cannot get path "/apis"'
        assert call(server, "GET", "/apis", tokens(server.kubeconfig)["sandbox-portal"])[0] == 200
        assert call(server, "GET", "/version", "wrong")[0] == 401
        # kubectl sends no token to a server without TLS: it is refused like anyone.
        kubectl = shutil.which("kubectl")
        if kubectl is None:
            return
        assert server.admin_kubeconfig is not None
        out = subprocess.run(
            [kubectl, "--kubeconfig", str(server.admin_kubeconfig), "get", "clusters"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert out.returncode != 0 and "(Forbidden)" in out.stderr
    finally:
        server.stop()
