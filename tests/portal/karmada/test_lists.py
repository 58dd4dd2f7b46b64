"""Lists that grow with the runs are read in chunks (``lists.list_chunks``): the resync's
list of every ResourceBinding and the watcher's relists. A chunk at a time is what the worker
holds; a continue token that Karmada has compacted away starts the list over."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from portal.karmada import client, errors, lists, resources
from portal.karmada.watcher import Loop
from tests.fixtures_sandbox import SandboxServer


@pytest.fixture
def fleet(demo_fleet: SandboxServer) -> SandboxServer:
    return demo_fleet


def _names(items: list[dict[str, Any]]) -> list[str]:
    return [i["metadata"]["name"] for i in items]


def test_chunks_hold_the_whole_list_once_at_one_resource_version(fleet) -> None:
    whole, _ = lists.list_objects(resources.PROPAGATION_POLICY)
    assert len(whole) >= 4
    chunks = list(lists.list_chunks(resources.PROPAGATION_POLICY, limit=2))
    assert all(len(items) <= 2 for items, _ in chunks)
    assert len(chunks) == -(-len(whole) // 2)
    assert sorted(n for items, _ in chunks for n in _names(items)) == sorted(_names(whole))
    assert len({rv for _, rv in chunks}) == 1


def test_requests_per_list_are_its_chunks(fleet) -> None:
    before = fleet.request("GET", "/_sandbox/stats")["requests"].get("GET", 0)
    n = sum(1 for _ in lists.list_chunks(resources.PROPAGATION_POLICY, limit=2))
    after = fleet.request("GET", "/_sandbox/stats")["requests"].get("GET", 0)
    assert after - before == n


def _policy_apply(name: str) -> None:
    client.apply(
        resources.PROPAGATION_POLICY,
        {
            "apiVersion": "policy.karmada.io/v1alpha1",
            "kind": "PropagationPolicy",
            "metadata": {"name": name},
            "spec": {
                "resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x"}],
                "placement": {"clusterAffinity": {"clusterNames": ["site-a"]}},
            },
        },
    )


def test_an_expired_continue_token_starts_the_list_over_whole(fleet) -> None:
    whole, _ = lists.list_objects(resources.PROPAGATION_POLICY)
    chunks = lists.list_chunks(resources.PROPAGATION_POLICY, limit=2)
    first, _ = next(chunks)
    assert len(first) == 2
    # Karmada compacts past the list between two chunks (a write, then the compaction).
    _policy_apply("chunks-written-between")
    fleet.compact()
    rest = list(chunks)
    # The 410 is not an error for the caller: the list comes again, whole, in one answer.
    assert len(rest) == 1
    assert sorted(_names(rest[0][0])) == sorted([*_names(whole), "chunks-written-between"])


def test_a_token_expired_at_the_first_chunk_is_not_retried_forever(fleet, monkeypatch) -> None:
    calls = []

    def expired(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        raise errors.Expired("too old", 410)

    monkeypatch.setattr(client, "list_page", expired)
    with pytest.raises(errors.Expired):
        list(lists.list_chunks(resources.PROPAGATION_POLICY))
    assert len(calls) == 1


def test_the_watchers_relist_reads_in_chunks_and_starts_from_the_lists_version(
    fleet, monkeypatch
) -> None:
    whole, _ = lists.list_objects(resources.PROPAGATION_POLICY)  # before the spy: not counted
    monkeypatch.setattr(lists, "LIST_CHUNK", 2)
    real_chunks = lists.list_chunks
    answered: list[tuple[int, str]] = []  # (items, resourceVersion) of each chunk

    def chunks(*args: Any, **kwargs: Any) -> Iterator[tuple[list[dict[str, Any]], str]]:
        for items, rv in real_chunks(*args, **kwargs):
            answered.append((len(items), rv))
            yield items, rv

    monkeypatch.setattr(lists, "list_chunks", chunks)
    seen: list[tuple[str, str]] = []
    loop = Loop(
        resources.PROPAGATION_POLICY,
        lambda kind, obj: seen.append((kind, obj["metadata"]["name"])),
        threading.Event(),
    )
    loop.relist()
    assert sorted(seen) == sorted(("ADDED", n) for n in _names(whole))
    assert len(answered) > 1 and all(n <= 2 for n, _ in answered)
    # The watch starts from the list's resourceVersion, which every chunk answered.
    assert {rv for _, rv in answered} == {loop.resource_version}
    assert loop.lists == 1


def test_an_object_deleted_while_the_watch_had_expired_is_deleted_for_the_handler(fleet) -> None:
    from kubernetes import client as k8s

    seen: list[tuple[str, str]] = []
    stop = threading.Event()
    loop = Loop(
        resources.CLUSTER,
        lambda kind, obj: seen.append((kind, obj["metadata"]["name"])),
        stop,
        watch_timeout=5,
    )
    loop.relist()
    assert ("ADDED", "site-c") in seen
    # A site leaves the fleet, and Karmada compacts past it, before the loop watches: its
    # watch answers 410, and only the relist can tell the deletion.
    clusters = ("cluster.karmada.io", "v1alpha1", "clusters")
    k8s.CustomObjectsApi(fleet.api_client()).delete_cluster_custom_object(*clusters, "site-c")
    fleet.compact()
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        fleet.wait_for(lambda: ("DELETED", "site-c") in seen, what="the deletion")
    finally:
        stop.set()
        thread.join(30)
    assert loop.lists == 2
    assert [e for e in seen if e[0] == "DELETED"] == [("DELETED", "site-c")]


def test_a_watch_event_carries_the_object_parsed_once(fleet) -> None:
    """The client's own ``Watch`` dumped every custom object to JSON and parsed it again into
    ``object``; the portal's watch keeps the one parsed dict (a fifth of the watcher's time
    under a fan-out went to that round trip)."""
    _, version = lists.list_objects(resources.WORKFLOW)
    client.create(
        resources.WORKFLOW,
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"name": "watched-once", "labels": {"purpose": "watch-test"}},
            "spec": {
                "entrypoint": "w",
                "templates": [{"name": "w", "container": {"image": "alpine:3.19"}}],
            },
        },
    )
    events = client.watch_events(resources.WORKFLOW, version, None, "purpose=watch-test", 30)
    try:
        event = next(events)
    finally:
        events.close()
    assert event["type"] == "ADDED"
    assert event["object"] is event["raw_object"]
    assert event["raw_object"]["metadata"]["name"] == "watched-once"
    assert event["raw_object"]["spec"]["templates"][0]["container"] == {"image": "alpine:3.19"}
