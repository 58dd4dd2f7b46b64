"""The sandbox's heap: what survived is frozen out of the cycle collector's passes, and what
was frozen inside a cycle is still collected by the periodic full pass (``sandbox.heap``)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from sandbox import heap
from tests.fixtures_sandbox import SandboxServer


class Node:
    """A cycle the collector alone can free (refcounting cannot)."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def unfrozen() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("unfrozen")
def test_what_survived_is_frozen_and_left_out_of_collections_until_the_full_pass() -> None:
    node = Node()
    gone = weakref.ref(node)
    heap.freeze_survivors()
    assert gc.get_freeze_count() > 0
    del node
    gc.collect()
    assert gone() is not None, "a frozen cycle is not looked at by a collection"
    heap.freeze_survivors(full=True)
    assert gone() is None, "the full pass unfreezes and collects it"


@pytest.mark.usefixtures("unfrozen")
def test_what_dies_young_is_collected_before_any_freeze() -> None:
    node = Node()
    gone = weakref.ref(node)
    del node
    heap.freeze_survivors()
    assert gone() is None


def test_the_server_freezes_what_it_started_with_and_collects_young_objects_seldom(
    sandbox: SandboxServer,
) -> None:
    stats = sandbox.request("GET", "/_sandbox/stats")["heap"]
    assert stats["frozen"] > 0
    assert stats["threshold"][0] == heap.YOUNG_THRESHOLD
