"""Chunked lists (``limit`` and ``continue``) as kube-apiserver serves them from etcd: the
portal reads the lists that grow with its runs in chunks, so the sandbox must answer them as
the real server does, errors included (``sandbox/chunks.py`` quotes the upstream code)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from kubernetes import client

from sandbox import chunks
from sandbox.errors import ApiError
from tests.fixtures_sandbox import SandboxServer
from tests.sandbox.conftest import site_policy, unique

PP = ("policy.karmada.io", "v1alpha1")


@pytest.fixture
def namespace(core: client.CoreV1Api) -> str:
    name = unique("chunks")
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def _policies(custom: client.CustomObjectsApi, ns: str, n: int) -> list[str]:
    names = [f"pp-{i:02d}" for i in range(n)]
    for name in reversed(names):  # created out of order: the list is in key order anyway
        body = site_policy("site-a", name=name)
        body["metadata"]["labels"] = {"batch": "even" if int(name[3:]) % 2 == 0 else "odd"}
        custom.create_namespaced_custom_object(*PP, ns, "propagationpolicies", body)
    return names


def _list(custom: client.CustomObjectsApi, ns: str, **kwargs: Any) -> dict[str, Any]:
    out: dict[str, Any] = custom.list_namespaced_custom_object(
        *PP, ns, "propagationpolicies", **kwargs
    )
    return out


def test_chunks_cover_the_list_once_in_key_order(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    names = _policies(custom, namespace, 7)
    first = _list(custom, namespace, limit=3)
    meta = first["metadata"]
    assert [o["metadata"]["name"] for o in first["items"]] == names[:3]
    assert meta["remainingItemCount"] == 4
    rv = meta["resourceVersion"]
    # A write between chunks: every chunk still answers the first chunk's resourceVersion.
    custom.create_namespaced_custom_object(
        *PP, namespace, "propagationpolicies", site_policy("site-b", name="zz-late")
    )
    second = _list(custom, namespace, limit=3, _continue=meta["continue"])
    assert [o["metadata"]["name"] for o in second["items"]] == names[3:6]
    assert second["metadata"]["resourceVersion"] == rv
    last = _list(custom, namespace, limit=3, _continue=second["metadata"]["continue"])
    assert [o["metadata"]["name"] for o in last["items"]] == [names[6], "zz-late"]
    # The last chunk has neither a continue token nor a remaining count.
    assert not last["metadata"].get("continue")
    assert "remainingItemCount" not in last["metadata"]


def test_the_token_is_upstreams_encoding(custom: client.CustomObjectsApi, namespace: str) -> None:
    names = _policies(custom, namespace, 3)
    token = _list(custom, namespace, limit=1)["metadata"]["continue"]
    data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    assert "=" not in token  # RawURLEncoding: no padding
    assert data["v"] == "meta.k8s.io/v1"
    assert data["start"] == f"{namespace}/{names[0]}\x00"
    assert isinstance(data["rv"], int)


def test_a_selector_leaves_the_remaining_count_unset(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    names = _policies(custom, namespace, 6)
    seen = []
    out = _list(custom, namespace, limit=2, label_selector="batch=even")
    seen += out["items"]
    assert "remainingItemCount" not in out["metadata"]
    while out["metadata"].get("continue"):
        out = _list(
            custom,
            namespace,
            limit=2,
            label_selector="batch=even",
            _continue=out["metadata"]["continue"],
        )
        seen += out["items"]
    assert [o["metadata"]["name"] for o in seen] == names[0::2]


def test_continue_with_a_resource_version_is_a_400(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    _policies(custom, namespace, 2)
    token = _list(custom, namespace, limit=1)["metadata"]["continue"]
    with pytest.raises(client.ApiException) as err:
        _list(custom, namespace, limit=1, _continue=token, resource_version="1")
    assert err.value.status == 400
    assert "specifying resource version is not allowed when using continue" in err.value.body


@pytest.mark.parametrize(
    "token,why",
    [
        ("not-base64!", "continue key is not valid"),
        (
            base64.urlsafe_b64encode(b'{"v":"v2","rv":1,"start":"a"}').decode(),
            "does not recognize this encoded version",
        ),
        (
            base64.urlsafe_b64encode(b'{"v":"meta.k8s.io/v1","rv":0,"start":"a"}').decode(),
            "incorrect encoded start resourceVersion",
        ),
        (
            base64.urlsafe_b64encode(b'{"v":"meta.k8s.io/v1","rv":5,"start":""}').decode(),
            "encoded start key empty",
        ),
        (
            base64.urlsafe_b64encode(b'{"v":"meta.k8s.io/v1","rv":5,"start":"../x"}').decode(),
            "invalid start key",
        ),
    ],
)
def test_a_token_that_does_not_decode_is_a_400(
    custom: client.CustomObjectsApi, namespace: str, token: str, why: str
) -> None:
    with pytest.raises(client.ApiException) as err:
        _list(custom, namespace, limit=1, _continue=token.rstrip("="))
    assert err.value.status == 400
    body = json.loads(err.value.body)
    assert body["message"].startswith("invalid continue token: continue key is not valid")
    assert why in body["message"]


def test_a_token_from_before_a_compaction_is_410_expired(
    sandbox: SandboxServer, custom: client.CustomObjectsApi, namespace: str
) -> None:
    _policies(custom, namespace, 3)
    token = _list(custom, namespace, limit=1)["metadata"]["continue"]
    # etcd keeps the compaction's own revision readable: a write first, then the compaction.
    custom.create_namespaced_custom_object(
        *PP, namespace, "propagationpolicies", site_policy("site-b", name="zz-after")
    )
    sandbox.compact()
    with pytest.raises(client.ApiException) as err:
        _list(custom, namespace, limit=1, _continue=token)
    assert err.value.status == 410
    body = json.loads(err.value.body)
    assert body["reason"] == "Expired"
    assert body["message"].startswith("The provided continue parameter is too old")
    # A new list (no token) is served, as the message says.
    assert len(_list(custom, namespace, limit=1)["items"]) == 1


def test_compaction_keeps_one_interval_of_history() -> None:
    """kube-apiserver's compactor compacts, at each tick, to the revision noted at the tick
    before: a token lives at least one interval, at most two."""
    c = chunks.Compactor(interval=300.0, now=0.0, rv=100)
    c.advance(now=299.0, rv=150)
    assert c.compacted_rv == 100
    c.advance(now=300.0, rv=200)  # first tick: compacts to what it noted at the start
    assert c.compacted_rv == 100
    c.advance(now=600.0, rv=300)  # second tick: compacts to the revision noted at the first
    assert c.compacted_rv == 200
    c.advance(now=1500.0, rv=400)  # three ticks late: caught up
    assert c.compacted_rv == 400
    with pytest.raises(ApiError) as err:
        chunks.continue_point(
            chunks.encode(250, "ns/a\x00"),
            resource_version="",
            current_rv=400,
            compactor=c,
            now=1500.0,
        )
    assert err.value.code == 410


def test_a_token_issued_after_a_long_pause_outlives_a_write_between_chunks() -> None:
    """The store notes the revision before each write (``Store._next_rv``): after a pause of
    several intervals with no token checked, a list, a write and the list's next chunk must
    not find the compaction caught up past the list (it was, when ticks were only taken as a
    token was checked: the write's revision was noted for every missed tick)."""
    c = chunks.Compactor(interval=300.0, now=0.0, rv=100)
    c.advance(now=1000.0, rv=500)  # the write after the pause: ticks noted at 500
    token = chunks.encode(500, "ns/a\x00")  # the first chunk, at 500, then that write (501)
    rv, start = chunks.continue_point(
        token, resource_version="", current_rv=501, compactor=c, now=1000.5
    )
    assert (rv, start) == (500, "ns/a\x00")
