"""Helpers for the sandbox tests: API handles and small object builders."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.fixtures_sandbox import SandboxHTTPError, SandboxServer

NS = "default"
DOMAIN = "portal.multisite.io"
SITE_LABEL = f"{DOMAIN}/site"


@pytest.fixture
def api(sandbox: SandboxServer) -> Iterator[client.ApiClient]:
    api_client = sandbox.api_client()
    yield api_client
    api_client.close()


@pytest.fixture
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def site_policy(
    site: str, name: str | None = None, priority: int | None = None, **placement: Any
) -> dict[str, Any]:
    """A per-site PropagationPolicy as the portal writes it."""
    spec: dict[str, Any] = {
        "resourceSelectors": [
            {
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "Workflow",
                "labelSelector": {"matchLabels": {SITE_LABEL: site}},
            }
        ],
        "placement": placement or {"clusterAffinity": {"clusterNames": [site]}},
    }
    if priority is not None:
        spec["priority"] = priority
    return {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": name or f"portal-site-{site}"},
        "spec": spec,
    }


def workflow(
    name: str,
    templates: list[dict[str, Any]],
    entrypoint: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": {"entrypoint": entrypoint or templates[0]["name"], "templates": templates, **spec},
    }


def leaf(
    name: str,
    duration: str | None = None,
    cpu: str | None = None,
    gpu: str | None = None,
    annotations: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    container: dict[str, Any] = {"image": "busybox", "command": ["echo", name]}
    requests = {}
    if cpu:
        requests["cpu"] = cpu
    if gpu:
        requests["nvidia.com/gpu"] = gpu
    if requests:
        container["resources"] = {"requests": requests}
    ann = dict(annotations or {})
    if duration:
        ann[f"{DOMAIN}/sandbox-duration"] = duration
    tmpl: dict[str, Any] = {"name": name, "container": container, **extra}
    if ann:
        tmpl["metadata"] = {"annotations": ann}
    return tmpl


class Fleet:
    """Thin wrappers over the CustomObjectsApi for the objects the tests handle."""

    def __init__(self, sandbox: SandboxServer, custom: client.CustomObjectsApi) -> None:
        self.sandbox = sandbox
        self.custom = custom

    def create_policy(self, body: dict[str, Any], namespace: str = NS) -> dict[str, Any]:
        result: dict[str, Any] = self.custom.create_namespaced_custom_object(
            "policy.karmada.io", "v1alpha1", namespace, "propagationpolicies", body
        )
        return result

    def create_cluster_policy(self, body: dict[str, Any]) -> dict[str, Any]:
        body = dict(body, kind="ClusterPropagationPolicy")
        result: dict[str, Any] = self.custom.create_cluster_custom_object(
            "policy.karmada.io", "v1alpha1", "clusterpropagationpolicies", body
        )
        return result

    def create_workflow(self, body: dict[str, Any], namespace: str = NS) -> dict[str, Any]:
        result: dict[str, Any] = self.custom.create_namespaced_custom_object(
            "argoproj.io", "v1alpha1", namespace, "workflows", body
        )
        return result

    def binding(self, name: str, namespace: str = NS) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = self.custom.get_namespaced_custom_object(
                "work.karmada.io", "v1alpha2", namespace, "resourcebindings", f"{name}-workflow"
            )
            return result
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def cluster(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.custom.get_cluster_custom_object(
            "cluster.karmada.io", "v1alpha1", "clusters", name
        )
        return result

    def scheduled_to(self, name: str, timeout: float = 20) -> str:
        def check() -> str | None:
            rb = self.binding(name)
            clusters = (rb or {}).get("spec", {}).get("clusters") or []
            return clusters[0]["name"] if clusters else None

        return self.sandbox.wait_for(check, timeout, what=f"{name} scheduled")

    def member_status(self, name: str) -> dict[str, Any]:
        rb = self.binding(name) or {}
        agg = (rb.get("status") or {}).get("aggregatedStatus") or [{}]
        status: dict[str, Any] = agg[0].get("status") or {}
        return status

    def wait_phase(
        self,
        name: str,
        phases: tuple[str, ...] = ("Succeeded", "Failed", "Error"),
        timeout: float = 30,
    ) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            st = self.member_status(name)
            return st if st.get("phase") in phases else None

        return self.sandbox.wait_for(check, timeout, what=f"{name} in {phases}")

    def live_status(self, cluster: str, name: str) -> dict[str, Any]:
        """The member copy's status straight from the member (no reflection delay)."""
        for wf in self.sandbox.member_workflows(cluster):
            if wf["metadata"]["name"] == name:
                status: dict[str, Any] = wf.get("status") or {}
                return status
        return {}

    def nodes_by_display(self, status: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {n["displayName"]: n for n in (status.get("nodes") or {}).values()}


@pytest.fixture
def fleet(sandbox: SandboxServer, custom: client.CustomObjectsApi) -> Fleet:
    return Fleet(sandbox, custom)


@pytest.fixture
def run_on(fleet: Fleet) -> Callable[..., dict[str, Any]]:
    """Create a per-site policy (once) and a workflow labelled for that site."""
    made: set[str] = set()

    def run(site: str, body: dict[str, Any]) -> dict[str, Any]:
        if site not in made:
            fleet.create_policy(site_policy(site))
            made.add(site)
        body["metadata"].setdefault("labels", {})[SITE_LABEL] = site
        return fleet.create_workflow(body)

    return run


PROXY = "/apis/cluster.karmada.io/v1alpha1/clusters/{cluster}/proxy"


def proxied_workflow(sandbox: SandboxServer, cluster: str, name: str) -> dict[str, Any] | None:
    """The member's copy of Workflow `name`, read through Karmada's cluster proxy; None
    when the member has none."""
    path = PROXY.format(cluster=cluster) + f"/apis/argoproj.io/v1alpha1/namespaces/{NS}/workflows/"
    try:
        result: dict[str, Any] = sandbox.request("GET", path + name)
        return result
    except SandboxHTTPError as err:
        if err.status == 404:
            return None
        raise
