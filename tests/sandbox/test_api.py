"""The Kubernetes API surface, exercised with the official client (and raw HTTP where the
client hides what is checked)."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import pytest
from kubernetes import client, watch

from tests.fixtures_sandbox import SandboxHTTPError, SandboxServer
from tests.sandbox.conftest import NS, site_policy, unique

PP = ("policy.karmada.io", "v1alpha1")
RB = ("work.karmada.io", "v1alpha2")
WF = ("argoproj.io", "v1alpha1")
PP_ID = "propagationpolicy.karmada.io/permanent-id"


def status_of(exc: client.ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


def test_it_serves_discovery_with_and_without_trailing_slash(sandbox: SandboxServer) -> None:
    assert sandbox.request("GET", "/version")["major"] == "1"
    for path in ("/api", "/api/"):
        assert sandbox.request("GET", path)["versions"] == ["v1"]
    core = sandbox.request("GET", "/api/v1/")
    assert core["groupVersion"] == "v1"
    assert {r["name"] for r in core["resources"]} >= {"namespaces", "namespaces/status"}
    groups = {g["name"] for g in sandbox.request("GET", "/apis/")["groups"]}
    assert groups >= {
        "cluster.karmada.io",
        "policy.karmada.io",
        "work.karmada.io",
        "argoproj.io",
        "admissionregistration.k8s.io",
    }
    group = sandbox.request("GET", "/apis/argoproj.io/")
    assert group["preferredVersion"]["groupVersion"] == "argoproj.io/v1alpha1"
    resources = sandbox.request("GET", "/apis/argoproj.io/v1alpha1/")["resources"]
    wf = next(r for r in resources if r["name"] == "workflows")
    assert wf["kind"] == "Workflow" and wf["namespaced"] is True
    assert wf["shortNames"] == ["wf"] and wf["singularName"] == "workflow"
    assert "watch" in wf["verbs"]
    # Argo's CRD declares `subresources: {}`: no workflows/status.
    assert not any(r["name"] == "workflows/status" for r in resources)


def test_it_lets_kubectl_skip_openapi(sandbox: SandboxServer) -> None:
    import urllib.request

    with urllib.request.urlopen(sandbox.url + "/openapi/v2") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("application/octet-stream")
        assert resp.read() == b""
    with pytest.raises(SandboxHTTPError) as err:
        sandbox.request("GET", "/openapi/v3")
    assert err.value.status == 404


def test_it_fills_metadata_on_create(custom: client.CustomObjectsApi) -> None:
    body = site_policy("site-b")
    body["metadata"] = {"generateName": "gen-"}
    created = custom.create_namespaced_custom_object(*PP, NS, "propagationpolicies", body)
    meta = created["metadata"]
    assert meta["name"].startswith("gen-") and len(meta["name"]) > len("gen-")
    assert meta["namespace"] == NS
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z")
    assert meta["generation"] == 1 and int(meta["resourceVersion"]) > 0


def test_it_answers_not_found_already_exists_and_conflict(custom: client.CustomObjectsApi) -> None:
    with pytest.raises(client.ApiException) as err:
        custom.get_namespaced_custom_object(*PP, NS, "propagationpolicies", "nope")
    assert err.value.status == 404
    assert status_of(err.value)["reason"] == "NotFound"
    assert status_of(err.value)["details"]["name"] == "nope"

    body = site_policy("site-a", name=unique("dup"))
    first = custom.create_namespaced_custom_object(*PP, NS, "propagationpolicies", body)
    with pytest.raises(client.ApiException) as err:
        custom.create_namespaced_custom_object(*PP, NS, "propagationpolicies", body)
    assert err.value.status == 409
    assert status_of(err.value)["reason"] == "AlreadyExists"

    name = first["metadata"]["name"]
    first["spec"]["priority"] = 5
    updated = custom.replace_namespaced_custom_object(*PP, NS, "propagationpolicies", name, first)
    assert updated["metadata"]["generation"] == 2
    first["spec"]["priority"] = 6  # still carries the old resourceVersion
    with pytest.raises(client.ApiException) as err:
        custom.replace_namespaced_custom_object(*PP, NS, "propagationpolicies", name, first)
    assert err.value.status == 409
    assert status_of(err.value)["reason"] == "Conflict"


def test_it_rejects_objects_that_fail_the_crd_schema(custom: client.CustomObjectsApi) -> None:
    body = site_policy("site-a", name=unique("bad"))
    body["spec"]["priority"] = "high"
    with pytest.raises(client.ApiException) as err:
        custom.create_namespaced_custom_object(*PP, NS, "propagationpolicies", body)
    assert err.value.status == 422
    status = status_of(err.value)
    assert status["reason"] == "Invalid"
    assert [c["field"] for c in status["details"]["causes"]] == ["spec.priority"]
    assert "spec.priority" in status["message"]

    del body["spec"]["resourceSelectors"]
    body["spec"]["priority"] = 1
    with pytest.raises(client.ApiException) as err:
        custom.create_namespaced_custom_object(*PP, NS, "propagationpolicies", body)
    assert err.value.status == 422
    assert status_of(err.value)["details"]["causes"][0]["field"] == "spec.resourceSelectors"


def test_it_rejects_an_invalid_workflow(custom: client.CustomObjectsApi) -> None:
    wf = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": unique("badwf")},
        "spec": {"entrypoint": "main", "templates": [{"name": "main", "parallelism": "x"}]},
    }
    with pytest.raises(client.ApiException) as err:
        custom.create_namespaced_custom_object("argoproj.io", "v1alpha1", NS, "workflows", wf)
    assert err.value.status == 422
    assert status_of(err.value)["details"]["causes"][0]["field"] == "spec.templates[0].parallelism"


def test_it_refuses_a_namespace_that_does_not_exist(custom: client.CustomObjectsApi) -> None:
    with pytest.raises(client.ApiException) as err:
        custom.create_namespaced_custom_object(
            *PP, "missing-ns", "propagationpolicies", site_policy("site-a")
        )
    assert err.value.status == 404


def test_it_lists_with_kind_resource_version_and_selectors(core: client.CoreV1Api) -> None:
    for name, labels in (
        ("sel-a", {"team": "x", "tier": "1"}),
        ("sel-b", {"team": "y"}),
        ("sel-c", {"tier": "2"}),
    ):
        core.create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels))
        )
    raw = core.api_client.call_api(
        "/api/v1/namespaces",
        "GET",
        response_type="object",
        _return_http_data_only=True,
        auth_settings=["BearerToken"],
    )
    assert raw["kind"] == "NamespaceList" and raw["apiVersion"] == "v1"
    assert int(raw["metadata"]["resourceVersion"]) >= max(
        int(i["metadata"]["resourceVersion"]) for i in raw["items"]
    )

    def names(selector: str) -> set[str]:
        items = core.list_namespace(label_selector=selector).items
        return {n.metadata.name for n in items if n.metadata.name.startswith("sel-")}

    assert names("team=x") == {"sel-a"}
    assert names("team==y") == {"sel-b"}
    assert names("team!=x") == {"sel-b", "sel-c"}
    assert names("team in (x,y)") == {"sel-a", "sel-b"}
    assert names("team notin (x)") == {"sel-b", "sel-c"}
    assert names("tier") == {"sel-a", "sel-c"}
    assert names("!tier") == {"sel-b"}
    assert names("team=x,tier=1") == {"sel-a"}
    by_field = core.list_namespace(field_selector="metadata.name=sel-c").items
    assert [n.metadata.name for n in by_field] == ["sel-c"]


def test_status_is_a_subresource_where_the_crd_declares_one(
    custom: client.CustomObjectsApi,
) -> None:
    name = unique("st")
    body = {
        "apiVersion": "work.karmada.io/v1alpha2",
        "kind": "ResourceBinding",
        "metadata": {"name": name},
        "spec": {"resource": {"apiVersion": "v1", "kind": "ConfigMap", "name": name}},
        "status": {"schedulerObservedGeneration": 5},
    }
    created = custom.create_namespaced_custom_object(*RB, NS, "resourcebindings", body)
    assert "status" not in created
    created["status"] = {"schedulerObservedGeneration": 6}
    after_main = custom.replace_namespaced_custom_object(*RB, NS, "resourcebindings", name, created)
    assert "status" not in after_main
    after_main["status"] = {"schedulerObservedGeneration": 7}
    after_main["spec"]["replicas"] = 3
    after_status = custom.replace_namespaced_custom_object_status(
        *RB, NS, "resourcebindings", name, after_main
    )
    assert after_status["status"] == {"schedulerObservedGeneration": 7}
    assert after_status["spec"].get("replicas") is None


def test_a_crd_without_status_subresource_keeps_status_as_sent(
    sandbox: SandboxServer, custom: client.CustomObjectsApi
) -> None:
    """Argo's Workflow CRD (and Karmada's policy CRDs) declare `subresources: {}`."""
    name = unique("nost")
    wf = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": name},
        "spec": {"entrypoint": "main", "templates": [{"name": "main", "suspend": {}}]},
        "status": {"phase": "Pending"},
    }
    created = custom.create_namespaced_custom_object(*WF, NS, "workflows", wf)
    assert created["status"] == {"phase": "Pending"}
    created["status"] = {"phase": "Succeeded", "message": "written by a client"}
    after = custom.replace_namespaced_custom_object(*WF, NS, "workflows", name, created)
    assert after["status"] == {"phase": "Succeeded", "message": "written by a client"}
    assert after["metadata"]["generation"] == 2  # without the subresource, status is content
    with pytest.raises(client.ApiException) as err:
        custom.replace_namespaced_custom_object_status(*WF, NS, "workflows", name, after)
    assert err.value.status == 404
    with pytest.raises(SandboxHTTPError) as raw:
        sandbox.request(
            "GET", f"/apis/argoproj.io/v1alpha1/namespaces/{NS}/workflows/{name}/status"
        )
    assert raw.value.status == 404 and raw.value.body["reason"] == "NotFound"
    with pytest.raises(client.ApiException) as err:
        custom.patch_namespaced_custom_object_status(
            *PP, NS, "propagationpolicies", name, {"status": {}}
        )
    assert err.value.status == 404


def test_it_patches_merge_json_strategic_and_apply(
    sandbox: SandboxServer, custom: client.CustomObjectsApi
) -> None:
    name = unique("patch")
    custom.create_namespaced_custom_object(
        *PP, NS, "propagationpolicies", site_policy("site-a", name=name)
    )
    path = f"/apis/policy.karmada.io/v1alpha1/namespaces/{NS}/propagationpolicies/{name}"
    merged = custom.patch_namespaced_custom_object(
        *PP, NS, "propagationpolicies", name, {"metadata": {"labels": {"a": "1"}}}
    )
    # Karmada's mutating webhook added the permanent-id label on create; a patch keeps it.
    assert merged["metadata"]["labels"].pop(PP_ID) and merged["metadata"]["labels"] == {"a": "1"}
    # CustomObjectsApi always sends merge-patch (a list body is then a 400, as upstream), so
    # a JSON patch goes through call_api with its content type.
    jsonp = custom.api_client.call_api(
        path,
        "PATCH",
        header_params={"Content-Type": "application/json-patch+json", "Accept": "application/json"},
        body=[{"op": "add", "path": "/spec/priority", "value": 7}],
        response_type="object",
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
    )
    assert jsonp["spec"]["priority"] == 7
    mark = jsonp["metadata"]["labels"][PP_ID]
    strategic = sandbox.request(
        "PATCH",
        path,
        {"metadata": {"labels": {"b": "2"}}},
        "application/strategic-merge-patch+json",
    )
    assert strategic["metadata"]["labels"] == {"a": "1", "b": "2", PP_ID: mark}
    with pytest.raises(SandboxHTTPError) as err:
        sandbox.request("PATCH", path, ["not", "an", "object"], "application/merge-patch+json")
    assert err.value.status == 400
    applied = sandbox.request(
        "PATCH",
        path + "?fieldManager=test",
        b"spec:\n  priority: 8\n",
        "application/apply-patch+yaml",
    )
    assert applied["spec"]["priority"] == 8 and applied["spec"]["resourceSelectors"]
    new_path = path.rsplit("/", 1)[0] + "/" + name + "-ssa"
    created = sandbox.request(
        "PATCH",
        new_path + "?fieldManager=test",
        json.dumps(dict(site_policy("site-c"), metadata={"name": name + "-ssa"})).encode(),
        "application/apply-patch+yaml",
    )
    assert created["metadata"]["uid"]


def test_delete_honours_finalizers(custom: client.CustomObjectsApi) -> None:
    name = unique("fin")
    body = site_policy("site-a", name=name)
    body["metadata"]["finalizers"] = ["example.com/hold"]
    custom.create_namespaced_custom_object(*PP, NS, "propagationpolicies", body)
    custom.delete_namespaced_custom_object(*PP, NS, "propagationpolicies", name)
    held = custom.get_namespaced_custom_object(*PP, NS, "propagationpolicies", name)
    assert held["metadata"]["deletionTimestamp"]
    custom.patch_namespaced_custom_object(
        *PP, NS, "propagationpolicies", name, {"metadata": {"finalizers": None}}
    )
    with pytest.raises(client.ApiException) as err:
        custom.get_namespaced_custom_object(*PP, NS, "propagationpolicies", name)
    assert err.value.status == 404


def test_watch_streams_changes_from_a_resource_version(custom: client.CustomObjectsApi) -> None:
    listed = custom.list_namespaced_custom_object(*PP, NS, "propagationpolicies")
    rv = listed["metadata"]["resourceVersion"]
    name = unique("w")
    custom.create_namespaced_custom_object(
        *PP, NS, "propagationpolicies", site_policy("site-a", name=name)
    )
    custom.patch_namespaced_custom_object(
        *PP, NS, "propagationpolicies", name, {"spec": {"priority": 3}}
    )
    custom.delete_namespaced_custom_object(*PP, NS, "propagationpolicies", name)
    seen = []
    w = watch.Watch()
    for event in w.stream(
        custom.list_namespaced_custom_object,
        *PP,
        NS,
        "propagationpolicies",
        resource_version=rv,
        timeout_seconds=5,
    ):
        seen.append((event["type"], event["object"]["metadata"]["name"]))
        if event["type"] == "DELETED":
            w.stop()
    # The policy carries Karmada's finalizer: the delete is a MODIFIED (deletionTimestamp), and
    # the DELETED comes once the controller has released it.
    assert seen[0] == ("ADDED", name) and seen[-1] == ("DELETED", name)
    assert set(seen[1:-1]) == {("MODIFIED", name)} and len(seen) >= 4


def test_watch_without_resource_version_starts_with_synthetic_added(
    custom: client.CustomObjectsApi,
) -> None:
    name = unique("syn")
    custom.create_namespaced_custom_object(
        *PP, NS, "propagationpolicies", site_policy("site-a", name=name)
    )
    w = watch.Watch()
    first = next(
        iter(
            w.stream(
                custom.list_namespaced_custom_object,
                *PP,
                NS,
                "propagationpolicies",
                timeout_seconds=2,
            )
        )
    )
    w.stop()
    assert first["type"] == "ADDED" and first["object"]["metadata"]["name"] == name


def test_watch_from_an_expired_resource_version_answers_410(
    sandbox: SandboxServer, custom: client.CustomObjectsApi
) -> None:
    rv = custom.list_namespaced_custom_object(*PP, NS, "propagationpolicies")["metadata"][
        "resourceVersion"
    ]
    custom.create_namespaced_custom_object(
        *PP, NS, "propagationpolicies", site_policy("site-a", name=unique("exp"))
    )
    sandbox.compact()
    w = watch.Watch()
    with pytest.raises(client.ApiException) as err:
        for _event in w.stream(
            custom.list_namespaced_custom_object,
            *PP,
            NS,
            "propagationpolicies",
            resource_version=rv,
            timeout_seconds=5,
        ):
            pass
    assert err.value.status == 410


def test_watch_honours_label_selector_and_timeout(
    sandbox: SandboxServer, core: client.CoreV1Api
) -> None:
    rv = core.list_namespace().metadata.resource_version
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name="watch-other", labels={"w": "no"}))
    )
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name="watch-me", labels={"w": "yes"}))
    )
    started = time.monotonic()
    events = list(
        watch.Watch().stream(
            core.list_namespace, label_selector="w=yes", resource_version=rv, timeout_seconds=1
        )
    )
    assert [e["object"].metadata.name for e in events] == ["watch-me"]
    assert time.monotonic() - started >= 0.9  # the stream ended because of timeoutSeconds


def test_watch_sends_bookmarks_when_allowed(sandbox: SandboxServer) -> None:
    host, port = sandbox.url.removeprefix("http://").split(":")
    rv = sandbox.request("GET", "/api/v1/namespaces")["metadata"]["resourceVersion"]
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            f"GET /api/v1/namespaces?watch=true&allowWatchBookmarks=true&resourceVersion={rv}"
            f"&timeoutSeconds=3 HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
        )
        data = b""
        while b"BOOKMARK" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    assert b"Transfer-Encoding: chunked" in data
    line = next(ln for ln in data.split(b"\r\n") if b"BOOKMARK" in ln)
    event = json.loads(line)
    assert event["type"] == "BOOKMARK"
    assert int(event["object"]["metadata"]["resourceVersion"]) >= int(rv)


def test_a_watch_sees_changes_made_while_it_is_open(custom: client.CustomObjectsApi) -> None:
    name = unique("live")
    found = threading.Event()

    def watch_it() -> None:
        w = watch.Watch()
        for event in w.stream(
            custom.list_namespaced_custom_object,
            *PP,
            NS,
            "propagationpolicies",
            field_selector=f"metadata.name={name}",
            timeout_seconds=10,
        ):
            if event["type"] == "ADDED" and event["object"]["metadata"]["name"] == name:
                found.set()
                w.stop()

    t = threading.Thread(target=watch_it)
    t.start()
    time.sleep(0.3)
    custom.create_namespaced_custom_object(
        *PP, NS, "propagationpolicies", site_policy("site-a", name=name)
    )
    t.join(15)
    assert found.is_set()


def test_delete_collection_honours_the_label_selector(
    core: client.CoreV1Api, custom: client.CustomObjectsApi
) -> None:
    for name, team in (("dc-a", "x"), ("dc-b", "x"), ("dc-c", "y")):
        body = site_policy("site-a", name=name)
        body["metadata"]["labels"] = {"team": team}
        custom.create_namespaced_custom_object(*PP, NS, "propagationpolicies", body)
    custom.delete_collection_namespaced_custom_object(
        *PP, NS, "propagationpolicies", label_selector="team=x"
    )

    def left() -> list[str]:
        items = custom.list_namespaced_custom_object(*PP, NS, "propagationpolicies")["items"]
        return [p["metadata"]["name"] for p in items]

    # Deleted once Karmada's policy controller has dropped its finalizer.
    SandboxServer.wait_for(lambda: left() == ["dc-c"], what="dc-a and dc-b gone")
