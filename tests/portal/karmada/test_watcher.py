"""The watcher's event loop: how often it lets Django check its database connection; the
bindings waiting to be folded, and how the fold thread batches them."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from portal.karmada import resources, watcher


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the loop's connection checks (each one costs a ``SELECT 1`` on the next query)."""
    seen: list[int] = []
    real = watcher.close_old_connections

    def counting() -> None:
        seen.append(1)
        real()

    monkeypatch.setattr(watcher, "close_old_connections", counting)
    return seen


def _loop(on_object: Any) -> watcher.Loop:
    return watcher.Loop(resources.RESOURCE_BINDING, on_object, threading.Event())


@pytest.mark.django_db(transaction=True)
def test_a_burst_of_events_checks_the_connection_once(checks: list[int]) -> None:
    handled: list[str] = []
    loop = _loop(lambda kind, obj: handled.append(kind))
    for _ in range(200):
        loop._handle("MODIFIED", {})
    assert len(handled) == 200
    # 200 events well within a second: one check, not 200.
    assert len(checks) == 1


@pytest.mark.django_db(transaction=True)
def test_a_failed_event_checks_the_connection_at_once(checks: list[int]) -> None:
    def fail(kind: str, obj: dict[str, Any]) -> None:
        raise RuntimeError("database went away")

    loop = _loop(lambda kind, obj: None)
    loop._handle("MODIFIED", {})
    loop.on_object = fail
    loop._handle("MODIFIED", {})
    loop._handle("MODIFIED", {})
    assert len(checks) == 3


def _binding(name: str, version: int, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "portal",
            "name": f"{name}-workflow",
            "resourceVersion": str(version),
        },
        "spec": {"resource": {"kind": "Workflow", "name": name}, "clusters": [{"name": "s"}]},
        "status": {"aggregatedStatus": [{"clusterName": "s", "status": {"phase": phase}}]},
    }


def test_a_newer_state_replaces_the_one_waiting_and_batches_keep_their_order() -> None:
    pending = watcher.Pending()
    stop = threading.Event()
    for version, name in enumerate(["a", "b", "a", "c", "a"]):
        pending.put(_binding(name, version))
    assert len(pending) == 3
    first = pending.take(stop, most=2)
    # Oldest first (a was seen first); a's newest state only.
    assert [(b["spec"]["resource"]["name"], b["metadata"]["resourceVersion"]) for b in first] == [
        ("a", "4"),
        ("b", "1"),
    ]
    assert [b["spec"]["resource"]["name"] for b in pending.take(stop)] == ["c"]
    stop.set()
    assert pending.take(stop) == []  # nothing waits and the watcher stops: no wait


def test_the_fold_thread_goes_on_past_a_batch_that_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pending = watcher.Pending()
    stop = threading.Event()
    seen: list[list[str]] = []
    asked: list[int] = []

    def observe(batch: list[dict[str, Any]], folded: Any = None) -> set[int]:
        seen.append([b["spec"]["resource"]["name"] for b in batch])
        if len(seen) == 1:
            raise RuntimeError("database went away")
        stop.set()
        return {7}

    monkeypatch.setattr(watcher.bindings, "bindings_observe", observe)
    monkeypatch.setattr(watcher, "close_old_connections", lambda: None)
    monkeypatch.setattr(watcher.workqueue, "add", asked.append)
    pending.put(_binding("a", 1))
    thread = threading.Thread(target=watcher.fold_bindings, args=(stop, pending))
    thread.start()
    for _ in range(3000):  # the first batch taken (at most 30 s)
        if seen:
            break
        threading.Event().wait(0.01)
    pending.put(_binding("b", 2))
    thread.join(30)
    assert not thread.is_alive()
    assert seen == [["a"], ["b"]]
    assert asked == [7]


def _fold_batches(
    monkeypatch: pytest.MonkeyPatch, first: list[str], batches: int
) -> list[list[str]]:
    """The batches the fold thread takes: ``first`` waiting when it starts; while the first
    batch is folded, ``c`` is seen, and ``d`` half a second later."""
    monkeypatch.setattr(watcher, "FOLD_LINGER_S", 2.0)
    monkeypatch.setattr(watcher, "FOLD_LINGER_FROM", 2)
    monkeypatch.setattr(watcher, "close_old_connections", lambda: None)
    pending = watcher.Pending()
    stop = threading.Event()
    seen: list[list[str]] = []

    def observe(batch: list[dict[str, Any]], folded: Any = None) -> set[int]:
        seen.append([b["spec"]["resource"]["name"] for b in batch])
        if len(seen) == 1:
            pending.put(_binding("c", 10))
            threading.Timer(0.5, pending.put, args=(_binding("d", 11),)).start()
        if len(seen) == batches:
            stop.set()
        return set()

    monkeypatch.setattr(watcher.bindings, "bindings_observe", observe)
    for version, name in enumerate(first):
        pending.put(_binding(name, version))
    thread = threading.Thread(target=watcher.fold_bindings, args=(stop, pending))
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    return seen


def test_after_a_full_batch_the_next_gathers_what_comes_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A burst: the batch after one of FOLD_LINGER_FROM waits FOLD_LINGER_S for more.
    assert _fold_batches(monkeypatch, ["a", "b"], 2) == [["a", "b"], ["c", "d"]]


def test_after_a_small_batch_the_next_is_taken_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Quiet: what is seen is folded at once (a chain of steps waits no longer).
    assert _fold_batches(monkeypatch, ["a"], 3) == [["a"], ["c"], ["d"]]


def test_a_lingering_take_ends_as_soon_as_a_full_batch_waits() -> None:
    pending = watcher.Pending()
    pending.put(_binding("a", 1))
    threading.Timer(0.1, pending.put, args=(_binding("b", 2),)).start()
    # Would wait 60 s for a third; ends with two, the most asked for.
    taken = pending.take(threading.Event(), most=2, linger=60.0)
    assert [b["spec"]["resource"]["name"] for b in taken] == ["a", "b"]
