"""What the watcher last folded in from each binding, and the parts of a binding a fold reads."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from portal.controller import refusals


class Folded:
    """What the watcher last folded in from each binding: the only two parts of it that
    ``binding_observe`` reads, the scheduled site and the member's status. A step's binding
    changes a dozen times (its conditions, the Work applied, labels, finalizers) and most
    changes touch neither part; each fold reads the unit's row, and under a 10,000-item
    fan-out those reads were most of the watcher's time. Only a fold that found its unit is
    remembered (a binding seen before its unit was claimed is folded again), the oldest names
    are forgotten first, and the resync folds every binding without it."""

    def __init__(self, size: int = 50_000) -> None:
        self.size = size
        self._seen: OrderedDict[str, tuple[str, Any, tuple[str, ...]]] = OrderedDict()

    def unchanged(self, name: str, state: tuple[str, Any, tuple[str, ...]]) -> bool:
        return self._seen.get(name) == state

    def remember(self, name: str, state: tuple[str, Any, tuple[str, ...]]) -> None:
        self._seen[name] = state
        self._seen.move_to_end(name)
        while len(self._seen) > self.size:
            self._seen.popitem(last=False)


def seen_of(binding: Mapping[str, Any]) -> tuple[str, Any, tuple[str, ...]]:
    """The parts of a binding a fold reads: the site it was scheduled to ('' before), the
    member's status (None before any), and what says Karmada refuses it (() for nothing)."""
    clusters = (binding.get("spec") or {}).get("clusters") or []
    site = clusters[0].get("name", "") if clusters and isinstance(clusters[0], dict) else ""
    aggregated = (binding.get("status") or {}).get("aggregatedStatus") or []
    member = (aggregated[0] or {}).get("status") if aggregated else None
    return str(site or ""), member, refusals.signature(binding)
