"""Objects of one resource in etcd's key order, kept as they are written, so a chunk of a list
is a range read (``O(log n + limit)``) as etcd serves it, not a sort of every object per chunk.

etcd's keys are ``<namespace>/<name>`` (``<name>`` for a cluster-wide resource) and compare
as strings; a namespace's keys share a prefix, so they are one contiguous range.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

# The character after "/": the end of a namespace's range ("<ns>/" .. "<ns>0").
_AFTER_SLASH = chr(ord("/") + 1)


def sort_key(key: tuple[str, str]) -> str:
    ns, name = key
    return f"{ns}/{name}" if ns else name


class KeyIndex:
    """The sorted keys of one resource's objects."""

    def __init__(self) -> None:
        self._keys: list[str] = []
        self._of: dict[str, tuple[str, str]] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, key: tuple[str, str]) -> None:
        k = sort_key(key)
        if k not in self._of:
            bisect.insort(self._keys, k)
            self._of[k] = key

    def remove(self, key: tuple[str, str]) -> None:
        k = sort_key(key)
        if self._of.pop(k, None) is not None:
            del self._keys[bisect.bisect_left(self._keys, k)]

    def bounds(self, namespace: str | None, start: str) -> tuple[int, int]:
        """Positions ``[lo, hi)`` of the keys of ``namespace`` (every key for None or "") at
        or after ``start``."""
        lo, hi = 0, len(self._keys)
        if namespace:
            lo = bisect.bisect_left(self._keys, f"{namespace}/")
            hi = bisect.bisect_left(self._keys, f"{namespace}{_AFTER_SLASH}")
        if start:
            lo = max(lo, bisect.bisect_left(self._keys, start))
        return lo, max(lo, hi)

    def keys(self, lo: int, hi: int) -> Iterator[tuple[str, str]]:
        for i in range(lo, hi):
            yield self._of[self._keys[i]]
