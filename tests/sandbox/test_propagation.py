"""Karmada propagates any kind its policies select, not only Workflows: Secrets and ConfigMaps
reach the member clusters (the portal's artifact credentials travel this way), follow changes,
and go when their template goes (`pkg/detector/detector.go`, the binding and execution
controllers)."""

from __future__ import annotations

import base64
from typing import Any

from kubernetes import client

from tests.fixtures_sandbox import SandboxServer
from tests.sandbox.conftest import NS, unique

SELECTED = "example.org/propagate"
SITES = ("site-a", "site-b", "site-c")


def policy(name: str, kind: str = "Secret", **placement: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": name},
        "spec": {
            "resourceSelectors": [
                {
                    "apiVersion": "v1",
                    "kind": kind,
                    "labelSelector": {"matchLabels": {SELECTED: "true"}},
                }
            ],
            "placement": placement,
        },
    }


def secret(name: str, selected: bool = True, **data: str) -> dict[str, Any]:
    labels = {SELECTED: "true"} if selected else {}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "labels": labels},
        "stringData": data,
    }


def held(sandbox: SandboxServer, site: str, kind: str, name: str) -> dict[str, Any] | None:
    items = sandbox.request("GET", f"/_sandbox/members/{site}/objects")["items"]
    return next(
        (o for o in items if o["kind"] == kind and o["metadata"]["name"] == name),
        None,
    )


def decoded(obj: dict[str, Any]) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}


def create_policy(custom: client.CustomObjectsApi, body: dict[str, Any]) -> None:
    custom.create_namespaced_custom_object(
        "policy.karmada.io", "v1alpha1", NS, "propagationpolicies", body
    )


def test_a_selected_secret_reaches_every_member_follows_changes_and_goes_with_its_template(
    sandbox: SandboxServer, core: client.CoreV1Api, custom: client.CustomObjectsApi
) -> None:
    create_policy(custom, policy(unique("creds")))
    name = unique("creds")
    core.create_namespaced_secret(NS, secret(name, accessKey="ak", secretKey="sk"))
    other = unique("local")
    core.create_namespaced_secret(NS, secret(other, selected=False, k="v"))

    # stringData is write-only: the apiserver stores data.
    stored = core.read_namespaced_secret(name, NS)
    assert stored.string_data is None and set(stored.data) == {"accessKey", "secretKey"}
    copies = {
        site: sandbox.wait_for(
            lambda site=site: held(sandbox, site, "Secret", name), what=f"{name} at {site}"
        )
        for site in SITES
    }
    for copy in copies.values():
        assert decoded(copy) == {"accessKey": "ak", "secretKey": "sk"}
        assert copy["metadata"]["labels"]["karmada.io/managed"] == "true"
        assert "uid" not in copy["metadata"] and "resourceVersion" not in copy["metadata"]
    rb = custom.get_namespaced_custom_object(
        "work.karmada.io", "v1alpha2", NS, "resourcebindings", f"{name}-secret"
    )
    assert rb["spec"]["resource"]["kind"] == "Secret"
    assert "replicas" not in rb["spec"]
    assert sorted(c["name"] for c in rb["spec"]["clusters"]) == list(SITES)
    # The detector claimed the template.
    claimed = core.read_namespaced_secret(name, NS).metadata
    assert "propagationpolicy.karmada.io/permanent-id" in (claimed.labels or {})
    # Not selected: it stays on karmada-apiserver.
    assert all(held(sandbox, site, "Secret", other) is None for site in SITES)

    core.patch_namespaced_secret(name, NS, {"stringData": {"accessKey": "rotated"}})
    sandbox.wait_for(
        lambda: decoded(held(sandbox, "site-b", "Secret", name) or {}).get("accessKey")
        == "rotated",
        what="the rotated key at site-b",
    )
    core.delete_namespaced_secret(name, NS)
    sandbox.wait_for(
        lambda: all(held(sandbox, site, "Secret", name) is None for site in SITES),
        what="the copies to go",
    )
    sandbox.wait_for(
        lambda: not any(
            rb["metadata"]["name"] == f"{name}-secret"
            for rb in custom.list_namespaced_custom_object(
                "work.karmada.io", "v1alpha2", NS, "resourcebindings"
            )["items"]
        ),
        what="the binding to go",
    )


def test_a_configmap_goes_only_where_the_affinity_says(
    sandbox: SandboxServer, core: client.CoreV1Api, custom: client.CustomObjectsApi
) -> None:
    create_policy(
        custom,
        policy(unique("cm"), kind="ConfigMap", clusterAffinity={"clusterNames": ["site-a"]}),
    )
    name = unique("repo")
    body = {"metadata": {"name": name, "labels": {SELECTED: "true"}}, "data": {"k": "v"}}
    core.create_namespaced_config_map(NS, body)
    copy = sandbox.wait_for(lambda: held(sandbox, "site-a", "ConfigMap", name), what="site-a")
    assert copy["data"] == {"k": "v"}
    assert held(sandbox, "site-b", "ConfigMap", name) is None
    assert held(sandbox, "site-c", "ConfigMap", name) is None


def test_a_site_not_ready_gets_its_copy_once_it_is_ready_again(
    sandbox: SandboxServer, core: client.CoreV1Api, custom: client.CustomObjectsApi
) -> None:
    fault = sandbox.fault("site-not-ready", site="site-b")
    create_policy(custom, policy(unique("creds")))
    name = unique("creds")
    core.create_namespaced_secret(NS, secret(name, accessKey="ak"))
    sandbox.wait_for(lambda: held(sandbox, "site-a", "Secret", name), what="site-a's copy")
    # The not-ready taint keeps site-b out of the first schedule.
    assert held(sandbox, "site-b", "Secret", name) is None
    sandbox.clear_fault(fault["id"])
    # A non-workload is scheduled again (Duplicated) whenever it is looked at.
    sandbox.wait_for(lambda: held(sandbox, "site-b", "Secret", name), what="site-b's copy")


def test_a_secret_the_member_already_holds_is_not_overwritten(
    sandbox: SandboxServer, core: client.CoreV1Api, custom: client.CustomObjectsApi
) -> None:
    name = unique("creds")
    mine = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS}}
    mine["data"] = {"accessKey": base64.b64encode(b"site-local").decode()}
    sandbox.request("POST", "/_sandbox/members/site-a/objects", mine)
    create_policy(custom, policy(unique("creds")))
    core.create_namespaced_secret(NS, secret(name, accessKey="from-karmada"))
    sandbox.wait_for(lambda: held(sandbox, "site-b", "Secret", name), what="site-b's copy")

    def applied_failed() -> dict[str, Any] | None:
        works = custom.list_namespaced_custom_object(
            "work.karmada.io", "v1alpha1", "karmada-es-site-a", "works"
        )["items"]
        for work in works:
            if work["spec"]["workload"]["manifests"][0]["metadata"]["name"] != name:
                continue
            for cond in (work.get("status") or {}).get("conditions") or []:
                if cond["type"] == "Applied" and cond["status"] == "False":
                    return dict(cond)
        return None

    cond = sandbox.wait_for(applied_failed, what="Applied=False on site-a's Work")
    assert "Karmada will not manage this resource" in cond["message"]
    assert decoded(held(sandbox, "site-a", "Secret", name) or {}) == {"accessKey": "site-local"}
