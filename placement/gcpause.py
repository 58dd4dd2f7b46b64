"""Pausing Python's cyclic garbage collector around big, acyclic computations."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


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
