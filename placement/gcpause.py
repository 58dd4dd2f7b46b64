"""Python's cyclic garbage collector: paused around big, acyclic computations, and run seldom
in the portal's long-running processes (web, worker, watcher).

CPython runs a young collection every 700 allocations by default: a request or a task's
objects, mostly freed a moment later, are traversed on the way. Under a 10,000-item fan-out
the collector was 11 % of the watcher's time and 13 % of the web's (py-spy ``--native``).
``collect_seldom`` raises that to ``YOUNG_THRESHOLD`` and freezes what the process was started
with (modules, settings: never garbage) out of every collection; ``freeze_survivors`` freezes
what survived since. (The sandbox, whose store keeps growing, does the same every few seconds
with its own: ``sandbox.heap``.)"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# Allocations between two young collections (CPython's default: 700).
YOUNG_THRESHOLD = 50_000


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic collection inside the block; the collector's state is restored after it,
    even on error, and a block inside another leaves it paused.

    Planning a fan-out or accepting one allocates millions of small objects that live to the
    end of the work (units, decisions, rows). Each allocation burst triggers a collection, and
    those of the oldest generation walk everything alive, again and again, for nothing: a
    quarter of the time to accept a 10,000-item fan-out (tests/bench/bench_fanout.py).
    What the block frees is freed by reference counting as ever; the few cycles it leaves are
    collected at the next collection after it. The collector is the process's: a web worker
    serves one request at a time."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def freeze_survivors(full: bool = False) -> int:
    """Collect what is not frozen (with ``full``: everything, after an unfreeze), then freeze
    what survived: later collections leave it out. Returns how many unreachable objects were
    found. Frozen objects are still freed by reference counting when nothing refers to them;
    only a cycle frozen and dropped later waits for a ``full`` pass."""
    if full:
        gc.unfreeze()
    found = gc.collect()
    gc.freeze()
    return found


def collect_seldom() -> None:
    """For a long-running process, once started: young collections every
    ``YOUNG_THRESHOLD`` allocations, and what it holds now frozen."""
    gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    freeze_survivors()
