"""Each resource's window of events, sized as kube-apiserver's watch cache: what a watch that
resumes from a version can be sent, and when it gets 410 instead."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from sandbox.errors import ApiError
from sandbox.resources import CONFIG_MAP, NAMESPACE, Registry
from sandbox.selectors import parse_label_selector
from sandbox.store import Store, Watcher
from sandbox.watchcache import LOWER_BOUND, UPPER_BOUND, WatchCache


@dataclass
class Ev:
    rv: int


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_window_grows_while_every_event_is_fresh_up_to_its_bound() -> None:
    clock = Clock()
    window: WatchCache[Ev] = WatchCache(0, upper=1000, clock=clock)
    for rv in range(1, 1001):
        window.add(Ev(rv))
        clock.now += 0.01  # 1,000 events in 10 s: all within 75 s
    assert window.capacity == 1000 and len(window) == 1000
    assert window.evicted_rv == 0
    assert [e.rv for e in window.since(995) or []] == [996, 997, 998, 999, 1000]
    window.add(Ev(1001))  # full and at its bound: the oldest goes
    assert window.evicted_rv == 1 and window.since(0) is None and window.since(1) is not None


def test_a_window_of_stale_events_shrinks_to_its_lower_bound_and_expires_them() -> None:
    clock = Clock()
    window: WatchCache[Ev] = WatchCache(0, upper=UPPER_BOUND, clock=clock)
    for rv in range(1, 801):
        window.add(Ev(rv))
    assert window.capacity == 800
    clock.now += 76  # every event older than eventFreshDuration
    for rv in range(801, 805):
        window.add(Ev(rv))
    assert window.capacity == LOWER_BOUND
    assert len(window) == LOWER_BOUND
    assert window.since(700) is None
    assert [e.rv for e in window.since(803) or []] == [804]


def test_a_burst_of_other_kinds_leaves_a_watch_of_one_kind_its_resume_point() -> None:
    # A fan-out's Workflows and Works do not push a binding watch's version out of reach: the
    # single log of 2,000 events for every kind did, and the watcher then listed everything.
    async def scenario() -> None:
        store = Store(Registry())
        store.create(NAMESPACE, {"metadata": {"name": "default"}})
        store.create(CONFIG_MAP, {"metadata": {"name": "seen", "namespace": "default"}})
        held = store.rv
        for i in range(5000):
            store.create(NAMESPACE, {"metadata": {"name": f"ns-{i}"}})
        store.create(CONFIG_MAP, {"metadata": {"name": "new", "namespace": "default"}})
        events = store.events_since(CONFIG_MAP, held)
        assert [e.obj["metadata"]["name"] for e in events] == ["new"]
        # Namespaces came 5,000 in a moment: their window grew to hold them all.
        assert len(store.events_since(NAMESPACE, held)) == 5000

    asyncio.run(scenario())


def test_a_compaction_expires_every_resource_s_history() -> None:
    async def scenario() -> None:
        store = Store(Registry())
        held = store.rv
        store.create(NAMESPACE, {"metadata": {"name": "a"}})
        store.compact()
        for rtype in (NAMESPACE, CONFIG_MAP):
            with pytest.raises(ApiError) as err:
                store.events_since(rtype, held)
            assert err.value.code == 410
        assert store.evicted_rv == store.rv

    asyncio.run(scenario())


def test_a_resumed_watch_sees_an_object_leave_its_selector_as_deleted() -> None:
    # The window keeps each event's version before: a selector's transitions are as the live
    # watch has them.
    async def scenario() -> None:
        store = Store(Registry())
        store.create(NAMESPACE, {"metadata": {"name": "default"}})
        made = store.create(
            CONFIG_MAP,
            {"metadata": {"name": "c", "namespace": "default", "labels": {"tier": "a"}}},
        )
        held = store.rv
        moved = {**made, "metadata": {**made["metadata"], "labels": {"tier": "b"}}}
        store.update(CONFIG_MAP, moved, "default")
        back = store.get(CONFIG_MAP, "default", "c")
        store.update(
            CONFIG_MAP, {**back, "metadata": {**back["metadata"], "labels": {"tier": "a"}}}
        )
        watch = Watcher(CONFIG_MAP, "default", parse_label_selector("tier=a"), lambda _o: True)
        seen = [
            (watch.wants(ev), ev.obj["metadata"]["labels"]["tier"])
            for ev in store.events_since(CONFIG_MAP, held)
        ]
        assert seen == [("DELETED", "b"), ("ADDED", "a")]

    asyncio.run(scenario())


def test_an_update_shares_what_it_left_unchanged_with_the_version_before() -> None:
    # The windows keep each version for 75 s: an update that changes the metadata costs the
    # metadata, not another copy of the data.
    async def scenario() -> None:
        store = Store(Registry())
        store.create(NAMESPACE, {"metadata": {"name": "default"}})
        first = store.create(
            CONFIG_MAP,
            {
                "metadata": {"name": "c", "namespace": "default", "labels": {"a": "1"}},
                "data": {"big": "x" * 1000},
            },
        )
        body = {**first, "metadata": {**first["metadata"], "annotations": {"n": "2"}}}
        second = store.update(CONFIG_MAP, body, "default")
        assert second["data"] is first["data"]
        assert second["metadata"]["labels"] is first["metadata"]["labels"]
        assert second["metadata"]["annotations"] == {"n": "2"}
        assert "annotations" not in first["metadata"]  # the version before is as it was
        third = store.update(CONFIG_MAP, {**second, "data": {"big": "y"}}, "default")
        assert third["data"] == {"big": "y"} and first["data"] == {"big": "x" * 1000}
        since = int(first["metadata"]["resourceVersion"])
        events = store.events_since(CONFIG_MAP, since)
        assert [e.obj["data"]["big"][:1] for e in events] == ["x", "y"]

    asyncio.run(scenario())
