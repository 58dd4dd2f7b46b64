"""Leases (coordination.k8s.io/v1) as kube-apiserver serves them, through the official client's
typed CoordinationV1Api and raw HTTP where the client would hide the check."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from kubernetes import client

from tests.fixtures_sandbox import SandboxHTTPError, SandboxServer
from tests.sandbox.conftest import NS, unique

PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"


@pytest.fixture
def leases(api: client.ApiClient) -> client.CoordinationV1Api:
    return client.CoordinationV1Api(api)


def lease_body(name: str, holder: str = "a", **spec: Any) -> dict[str, Any]:
    now = "2026-12-04T23:00:00.000000Z"
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": 0,
            **spec,
        },
    }


def status(exc: client.ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


def test_it_serves_leases_in_discovery(sandbox: SandboxServer) -> None:
    resources = sandbox.request("GET", "/apis/coordination.k8s.io/v1/")["resources"]
    lease = next(r for r in resources if r["name"] == "leases")
    assert lease["kind"] == "Lease" and lease["namespaced"] is True
    assert not any(r["name"] == "leases/status" for r in resources)


def test_the_typed_client_creates_reads_and_updates_a_lease(
    leases: client.CoordinationV1Api,
) -> None:
    name = unique("lease")
    renew = dt.datetime(2026, 12, 4, 23, 0, 1, 250000, tzinfo=dt.UTC)
    body = client.V1Lease(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1LeaseSpec(
            holder_identity="watcher-a",
            lease_duration_seconds=15,
            acquire_time=renew,
            renew_time=renew,
            lease_transitions=0,
        ),
    )
    created = leases.create_namespaced_lease(NS, body)
    assert created.metadata.resource_version and created.metadata.namespace == NS
    got = leases.read_namespaced_lease(name, NS)
    assert got.spec.holder_identity == "watcher-a" and got.spec.renew_time == renew
    got.spec.holder_identity = "watcher-b"
    got.spec.lease_transitions = 1
    updated = leases.replace_namespaced_lease(name, NS, got)
    assert updated.spec.holder_identity == "watcher-b" and updated.spec.lease_transitions == 1
    assert int(updated.metadata.resource_version) > int(created.metadata.resource_version)


def test_a_stale_resource_version_is_a_conflict(leases: client.CoordinationV1Api) -> None:
    name = unique("lease")
    first = leases.create_namespaced_lease(NS, lease_body(name))
    leases.replace_namespaced_lease(
        name,
        NS,
        lease_body(name, holder="b")
        | {"metadata": {"name": name, "resourceVersion": first.metadata.resource_version}},
    )
    with pytest.raises(client.ApiException) as stale:
        leases.replace_namespaced_lease(
            name,
            NS,
            lease_body(name, holder="c")
            | {"metadata": {"name": name, "resourceVersion": first.metadata.resource_version}},
        )
    assert stale.value.status == 409 and status(stale.value)["reason"] == "Conflict"
    assert leases.read_namespaced_lease(name, NS).spec.holder_identity == "b"


def test_an_update_without_resource_version_is_refused(leases: client.CoordinationV1Api) -> None:
    name = unique("lease")
    leases.create_namespaced_lease(NS, lease_body(name))
    with pytest.raises(client.ApiException) as refused:
        leases.replace_namespaced_lease(name, NS, lease_body(name, holder="thief"))
    assert refused.value.status == 422
    body = status(refused.value)
    assert body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == "metadata.resourceVersion"
    assert leases.read_namespaced_lease(name, NS).spec.holder_identity == "a"


@pytest.mark.parametrize(
    ("spec", "code", "text"),
    [
        ({"leaseDurationSeconds": 0}, 422, "spec.leaseDurationSeconds"),
        ({"leaseTransitions": -1}, 422, "spec.leaseTransitions"),
        ({"preferredHolder": "b"}, 422, "spec.preferredHolder"),
        ({"renewTime": "2026-12-04T23:00:00Z"}, 400, "2006-01-02T15:04:05.000000Z07:00"),
        ({"acquireTime": "2026-12-04T23:00:00.123Z"}, 400, "cannot parse"),
        ({"leaseDurationSeconds": "15"}, 400, "of type int32"),
        ({"leaseDurationSeconds": 2**31}, 400, "of type int32"),
    ],
)
def test_it_refuses_what_kube_apiserver_refuses(
    sandbox: SandboxServer, spec: dict[str, Any], code: int, text: str
) -> None:
    with pytest.raises(SandboxHTTPError) as refused:
        sandbox.request("POST", PATH, lease_body(unique("lease"), **spec))
    assert refused.value.status == code
    assert text in refused.value.body["message"]
