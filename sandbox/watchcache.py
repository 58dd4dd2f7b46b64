"""One resource's window of events for watches that resume from a resourceVersion, sized as
kube-apiserver's watch cache sizes it (``storage/cacher/watch_cache.go``):

    // eventFreshDuration is time duration of events we want to keep.
    eventFreshDuration = 75 * time.Second
    // defaultLowerBoundCapacity is a default value for event cache capacity's lower bound.
    defaultLowerBoundCapacity = 100
    // defaultUpperBoundCapacity  should be able to keep eventFreshDuration of history.
    defaultUpperBoundCapacity = 100 * 1024

and ``resizeCacheLocked``: "increases capacity by 2x if cache is full and all cached events
occurred within last eventFreshDuration", "decreases capacity by 2x when recent quarter of
events occurred outside of eventFreshDuration". A watch from a version older than the window
gets 410 Expired and its client lists again.

One window per resource, as one cacher per resource upstream: a fan-out's Workflow and Work
events do not push a ResourceBinding watch's resume point out. (A single log of 2,000 events
for every kind did: under a fan-out a binding watch that was closed and resumed a second later
got 410, and the portal's watcher listed every binding the fleet held again, a cost that grew
with history.)
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

EVENT_FRESH_S = 75.0
LOWER_BOUND = 100
UPPER_BOUND = 100 * 1024


class Versioned(Protocol):
    @property
    def rv(self) -> int: ...


E = TypeVar("E", bound=Versioned)


class WatchCache(Generic[E]):
    """Events in resourceVersion order, the oldest dropped when the window is full and cannot
    grow (``evicted_rv``: the newest version no longer served)."""

    def __init__(
        self,
        evicted_rv: int,
        upper: int = UPPER_BOUND,
        lower: int = LOWER_BOUND,
        fresh_s: float = EVENT_FRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.upper = max(upper, 1)
        self.lower = min(lower, self.upper)
        self.capacity = self.lower
        self.fresh_s = fresh_s
        self.clock = clock
        self.evicted_rv = evicted_rv
        self._events: deque[tuple[float, E]] = deque()

    def __len__(self) -> int:
        return len(self._events)

    def add(self, event: E) -> None:
        now = self.clock()
        self._resize(now)
        if len(self._events) >= self.capacity:
            self.evicted_rv = self._events.popleft()[1].rv
        self._events.append((now, event))

    def _resize(self, now: float) -> None:
        events = self._events
        if len(events) < self.capacity:
            return
        if now - events[0][0] < self.fresh_s:
            self.capacity = min(self.capacity * 2, self.upper)
            return
        newest_quarter = events[len(events) - max(self.capacity // 4, 1)][0]
        if now - newest_quarter > self.fresh_s:
            self.capacity = max(self.capacity // 2, self.lower)
            while len(events) > self.capacity:
                self.evicted_rv = events.popleft()[1].rv

    def since(self, rv: int) -> list[E] | None:
        """The events after ``rv``, oldest first; None when some of them are gone."""
        if rv < self.evicted_rv:
            return None
        newer: list[E] = []
        # From the newest back: a resume is usually from a moment ago, and the window may
        # hold a hundred thousand events.
        for _at, event in reversed(self._events):
            if event.rv <= rv:
                break
            newer.append(event)
        newer.reverse()
        return newer

    def clear(self, evicted_rv: int) -> None:
        self._events.clear()
        self.evicted_rv = evicted_rv
