"""What the planner decides from: sites, links, datasets, rules, and where upstream units ran.

Frozen dataclasses the service layer builds from the database (``SiteState`` from
``sites.Site``, ``Link`` from ``SiteLink``, ``DatasetInfo`` from ``Dataset`` + ready
``DatasetReplica`` rows, ``Rule`` from ``placement.PlacementRule``), and the constants of the
scoring model they feed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Timing = Literal["submit", "runtime"]
Effect = Literal[
    "pin",
    "require_labels",
    "require_capabilities",
    "exclude",
    "prefer_data_locality",
    "prefer_free_capacity",
]
HARD_EFFECTS = frozenset({"pin", "require_labels", "require_capabilities", "exclude"})

DEFAULT_BANDWIDTH_MBPS = 100.0  # assumed when no SiteLink exists: slow on purpose
TRANSFER_HALF_SCORE_S = 60.0  # transfer time at which the locality score is halved
# Output size assumed for an upstream unit that has not run yet: enough for link speed to matter.
ASSUMED_UPSTREAM_BYTES = 10**9
DATA_WEIGHT = 1.0
CAPACITY_WEIGHT = 0.25


@dataclass(frozen=True)
class SiteState:
    """One site (Karmada member cluster) as the planner sees it. CPU in millicores, memory in
    bytes; ``*_allocated`` is what running pods already requested."""

    name: str
    region: str = ""
    zone: str = ""
    provider: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    capabilities: frozenset[str] = frozenset()
    ready: bool = True
    cordoned: bool = False
    # A taint on the Karmada Cluster that the portal's policies do not tolerate
    # (``key=value:effect``): Karmada's scheduler refuses every new step there.
    taint: str = ""
    cpu_allocatable: int = 0
    cpu_allocated: int = 0
    memory_allocatable: int = 0
    memory_allocated: int = 0
    gpu_allocatable: int = 0
    gpu_allocated: int = 0
    pods_allocatable: int = 0
    pods_allocated: int = 0

    @property
    def cpu_free(self) -> int:
        return max(self.cpu_allocatable - self.cpu_allocated, 0)

    @property
    def memory_free(self) -> int:
        return max(self.memory_allocatable - self.memory_allocated, 0)

    @property
    def gpu_free(self) -> int:
        return max(self.gpu_allocatable - self.gpu_allocated, 0)


@dataclass(frozen=True)
class Link:
    """A directed path ``source → target``: bandwidth in Mbit/s, cost per GB, latency in ms."""

    source: str
    target: str
    bandwidth_mbps: float
    cost_per_gb: float = 0.0
    latency_ms: float = 0.0
    # False: steps at ``target`` cannot read ``source``'s artifact repository.
    artifacts_reachable: bool = True
    # What transfers over this link measured (an exponentially weighted mean, Mbit/s); when
    # known, the planner estimates with it instead of the configured ``bandwidth_mbps``.
    observed_mbps: float | None = None


@dataclass(frozen=True)
class Replica:
    site: str
    uri: str = ""
    bytes: int = 0


@dataclass(frozen=True)
class DatasetInfo:
    """A registered dataset. ``residency``: regions it may be read in (empty: anywhere);
    ``replicas``: where a ready copy is (bytes 0 → the dataset's ``bytes``); ``project``:
    the project it belongs to (None: fleet-wide), the only one whose plans know of it."""

    name: str
    uri_prefix: str = ""
    bytes: int = 0
    residency: frozenset[str] = frozenset()
    replicas: tuple[Replica, ...] = ()
    project: str | None = None


@dataclass(frozen=True)
class Selector:
    """Which units a rule applies to; every given field must match (globs are fnmatch-style,
    case-sensitive; ``labels`` must all be present on the unit; ``image`` matches any image)."""

    template: str | None = None
    task: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    image: str | None = None
    project: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Selector:
        labels = data.get("labels")
        return cls(
            template=data.get("template") or None,
            task=data.get("task") or None,
            labels=dict(labels) if isinstance(labels, Mapping) else {},
            image=data.get("image") or None,
            project=data.get("project") or None,
        )


@dataclass(frozen=True)
class Rule:
    """An admin placement rule. ``params`` by effect: ``pin`` / ``exclude``:
    ``{"sites": [...]}``; ``require_labels``: ``{"labels": {k: v}}`` (a value ``"*"`` or ``None``
    only asks for the key); ``require_capabilities``: ``{"capabilities": [...]}``; the ``prefer_*``
    effects take no params and add ``weight`` to their score term."""

    id: int | str
    name: str
    effect: Effect
    selector: Selector = field(default_factory=Selector)
    timing: Timing = "submit"
    params: Mapping[str, Any] = field(default_factory=dict)
    weight: float = 1.0
    order: int = 100
    enabled: bool = True


@dataclass(frozen=True)
class Upstream:
    """Where an upstream unit's outputs are, and their size in bytes: ``None`` when not known
    (Argo records none and the template declares none), then ``ASSUMED_UPSTREAM_BYTES`` is
    used so a fast link still counts and the reason says the size is unknown. ``declared``:
    the size is what the producing template's ``output-sizes`` annotation says, not a figure
    the member reported."""

    site: str
    bytes: int | None = None
    declared: bool = False

    @property
    def size_source(self) -> SizeSource:
        if self.bytes is None:
            return "assumed"
        return "declared" if self.declared else "reported"


SizeSource = Literal["assumed", "declared", "reported"]


UpstreamArg = Mapping[str, "str | Upstream | None"] | None
