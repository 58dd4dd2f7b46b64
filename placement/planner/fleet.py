"""The fleet as one plan sees it: the sites and links, lookup tables built once per ``Fleet``
object, and the per-site vectors the planner derives from it (``FleetCaches``), shared by every
decision made against the same object."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

from placement.parser import Resources
from placement.planner.filters import Eligibility
from placement.planner.inputs import DatasetInfo, Link, SiteState
from placement.planner.scoring import Costs
from placement.units import human_bytes

_K = TypeVar("_K")
_V = TypeVar("_V")


class Bounded(dict[_K, _V]):
    """A dict that forgets everything when it grows past ``limit`` (keys such as real upstream
    output sizes are unbounded over a long-lived snapshot)."""

    limit = 4096

    def put(self, key: _K, value: _V) -> _V:
        if len(self) >= self.limit:
            self.clear()
        self[key] = value
        return value


class FleetCaches:
    """Per-site vectors derived from one Fleet, by what they depend on."""

    def __init__(self) -> None:
        self.exclusions: Bounded[tuple[Any, ...], dict[str, str]] = Bounded()
        self.eligibility: Bounded[tuple[Any, ...], Eligibility] = Bounded()
        self.capacity: Bounded[Resources, tuple[list[float], list[str]]] = Bounded()
        self.datasets: Bounded[tuple[DatasetInfo, ...], Costs] = Bounded()
        self.links: Bounded[tuple[str, bool], tuple[list[float], list[bool]]] = Bounded()
        self.upstream: Bounded[tuple[str, int, str, bool], Costs] = Bounded()
        self.relays: Bounded[tuple[str, str], object] = Bounded()


@dataclass(frozen=True)
class Fleet:
    """The sites and the links between them. Lookup tables are built once per Fleet object."""

    sites: tuple[SiteState, ...]
    links: tuple[Link, ...] = ()

    @cached_property
    def site_by_name(self) -> dict[str, SiteState]:
        return {s.name: s for s in self.sites}

    @cached_property
    def ordered_sites(self) -> tuple[SiteState, ...]:
        return tuple(sorted(self.sites, key=lambda s: s.name))

    @cached_property
    def free_notes(self) -> tuple[str, ...]:
        """ "free 12 CPU, 40 GiB, 8 GPU" per site (ordered by name), shown in candidate rows."""
        out = []
        for s in self.ordered_sites:
            gpu = f", {s.gpu_free} GPU" if s.gpu_allocatable else ""
            out.append(f"free {s.cpu_free / 1000:g} CPU, {human_bytes(s.memory_free)}{gpu}")
        return tuple(out)

    @cached_property
    def caches(self) -> FleetCaches:
        """Per-site vectors the planner derived from this fleet (it never changes), reused by
        every decision made against the same Fleet object: the webhook's snapshot pays once."""
        return FleetCaches()

    @cached_property
    def unreachable(self) -> frozenset[tuple[str, str]]:
        """(source, target): steps at target cannot read source's artifact repository."""
        return frozenset((ln.source, ln.target) for ln in self.links if not ln.artifacts_reachable)

    @cached_property
    def bandwidth(self) -> dict[tuple[str, str], float]:
        """Mbit/s per link: what transfers observed where they did, else the configured."""
        out = {}
        for ln in self.links:
            mbps = ln.observed_mbps if ln.observed_mbps and ln.observed_mbps > 0 else None
            mbps = mbps or (ln.bandwidth_mbps if ln.bandwidth_mbps > 0 else None)
            if mbps:
                out[(ln.source, ln.target)] = mbps
        return out

    @cached_property
    def cost_per_gb(self) -> dict[tuple[str, str], float]:
        return {(ln.source, ln.target): float(ln.cost_per_gb) for ln in self.links}
