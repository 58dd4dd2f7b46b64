"""The watcher's event loop: how often it lets Django check its database connection."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from portal import gateway, watcher


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
    return watcher.Loop(gateway.RESOURCE_BINDING, on_object, threading.Event())


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
