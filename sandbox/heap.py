"""The sandbox's heap and CPython's cycle collector.

The store keeps every object it holds as plain dicts and lists, and each update replaces an
object with a new copy. CPython's collector traverses every tracked object in a full
collection, and it runs one whenever the objects that survived since the last grew by a
quarter: with two 10,000-item fan-outs held (millions of dicts), a third of the sandbox's
time went to it, and its share grew with what the sandbox held (py-spy ``--native``: 33 % of
the samples of 5,000 creates on an empty sandbox, 39 % on one holding 15,000 Workflows). A
kube-apiserver's cost for a create does not grow with what etcd holds; the sandbox's should
not either.

So the collector runs seldom (a young collection every ``YOUNG_THRESHOLD`` allocations, not
CPython's 700: a request's objects are mostly freed before one sees them) and what survived a
few seconds is frozen (``gc.freeze``: left out of every later collection): the collector then
looks only at what is new. The stored objects hold no reference cycles (JSON read by orjson),
so refcounting frees them when they are replaced or deleted, frozen or not. What else might be
frozen inside a cycle (a request's frame caught in an exception) and die later is collected by
a full collection every ``FULL_EVERY_S``, after an unfreeze: that much garbage at most, for
that long. 10,000 raw creates then cost the same sandbox CPU on an empty sandbox as on one
holding 20,000 Workflows (23.2 and 23.2 s).

The portal's processes do the same (``placement.gcpause``); the sandbox has its own, as it
shares no code with the portal but the expression library.
"""

from __future__ import annotations

import asyncio
import gc
import time

FREEZE_EVERY_S = 5.0
FULL_EVERY_S = 600.0
YOUNG_THRESHOLD = 50_000


def freeze_survivors(full: bool = False) -> None:
    """Collect what is not frozen (with ``full``: everything, after an unfreeze), then freeze
    what survived."""
    if full:
        gc.unfreeze()
    gc.collect()
    gc.freeze()


def described() -> dict[str, object]:
    """For ``/_sandbox/stats``: how many objects are frozen, and the collector's thresholds."""
    return {"frozen": gc.get_freeze_count(), "threshold": list(gc.get_threshold())}


async def keep_frozen(every: float = FREEZE_EVERY_S, full_every: float = FULL_EVERY_S) -> None:
    """Runs for the server's life: what the server started with frozen at once, then
    ``freeze_survivors`` every ``every`` seconds and a full collection every ``full_every``."""
    gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    freeze_survivors()
    last_full = time.monotonic()
    while True:
        await asyncio.sleep(every)
        full = time.monotonic() - last_full >= full_every
        freeze_survivors(full=full)
        if full:
            last_full = time.monotonic()
