"""The sandbox runs the collector seldom and freezes what it holds (``sandbox.heap``; the
portal's processes' own: ``tests/placement/test_gcpause.py``)."""

from __future__ import annotations

import gc
import weakref

from sandbox import heap
from tests.fixtures_sandbox import SandboxServer


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: the collector alone frees it


def test_a_cycle_frozen_then_dropped_waits_for_the_full_pass() -> None:
    threshold = gc.get_threshold()
    try:
        node = Node()
        gone = weakref.ref(node)
        heap.freeze_survivors()
        del node
        gc.collect()
        assert gone() is not None
        heap.freeze_survivors(full=True)
        assert gone() is None
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def test_the_server_freezes_what_it_started_with_and_collects_young_objects_seldom(
    sandbox: SandboxServer,
) -> None:
    stats = sandbox.request("GET", "/_sandbox/stats")["heap"]
    assert stats["frozen"] > 0
    assert stats["threshold"][0] == heap.YOUNG_THRESHOLD
