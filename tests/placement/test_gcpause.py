from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from placement.gcpause import YOUNG_THRESHOLD, collect_seldom, freeze_survivors, gc_paused


def test_the_collector_is_paused_inside_and_restored_after_even_on_error() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():  # nested: still paused after the inner block
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_collector_off_before_stays_off() -> None:
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


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
    freeze_survivors()
    assert gc.get_freeze_count() > 0
    del node
    gc.collect()
    assert gone() is not None, "a frozen cycle is not looked at by a collection"
    freeze_survivors(full=True)
    assert gone() is None, "the full pass unfreezes and collects it"


@pytest.mark.usefixtures("unfrozen")
def test_what_dies_young_is_collected_before_any_freeze() -> None:
    node = Node()
    gone = weakref.ref(node)
    del node
    freeze_survivors()
    assert gone() is None


@pytest.mark.usefixtures("unfrozen")
def test_a_long_running_process_collects_seldom_and_freezes_what_it_started_with() -> None:
    collect_seldom()
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD
    assert gc.get_freeze_count() > 0
