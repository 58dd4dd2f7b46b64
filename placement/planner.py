"""The placement planner (DESIGN section 5): pure code, plain typed inputs, explained output.

Inputs are frozen dataclasses the service layer builds from the database (``SiteState`` from
``sites.Site``, ``Link`` from ``SiteLink``, ``DatasetInfo`` from ``Dataset`` + ready
``DatasetReplica`` rows, ``Rule`` from ``placement.PlacementRule``). ``plan()`` decides every unit
of a parsed workflow in topological order; ``decide()`` decides one unit (the webhook, failover).

How a decision is made, per unit:

1. **Filter** (hard): site ready; not cordoned; not in ``exclude_sites``; enough free GPUs for the
   unit's ``nvidia.com/gpu`` request; CPU/memory request no larger than the site's *allocatable*
   (it could never run there); inside every read dataset's residency regions; and the
   ``pin`` / ``require_labels`` / ``require_capabilities`` / ``exclude`` rules that match the
   unit. With ``strict_capacity=True`` (the webhook, deciding *now*) free CPU and memory must fit
   too; at submission they only score, since the unit runs later, when capacity has changed
   (the demo's site-a is busy but still the right place for ingest: its data is there).
2. **Score** (soft) the rest: data locality ``1 - t/(t + 60 s)`` where ``t`` is the estimated
   transfer time of everything the unit must pull to that site (datasets not replicated there,
   upstream outputs that landed elsewhere), weight 1 plus the weights of matching
   ``prefer_data_locality`` rules; free capacity (mean free fraction of CPU, memory and GPUs
   after the unit's request, 0 if it does not fit now), weight 0.25 plus the weights of matching
   ``prefer_free_capacity`` rules.
3. **Choose** the highest score; ties go to fewer bytes to move, then the site name.
"""

from __future__ import annotations

import fnmatch
import gc
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any, Literal, NamedTuple, TypeVar

from placement.parser import ParsedWorkflow, Resources, Unit

Timing = Literal["submit", "runtime"]
Effect = Literal[
    "pin",
    "require_labels",
    "require_capabilities",
    "exclude",
    "prefer_data_locality",
    "prefer_free_capacity",
]
_T = TypeVar("_T")
HARD_EFFECTS = frozenset({"pin", "require_labels", "require_capabilities", "exclude"})

DEFAULT_BANDWIDTH_MBPS = 100.0  # assumed when no SiteLink exists: slow on purpose
TRANSFER_HALF_SCORE_S = 60.0  # transfer time at which the locality score is halved
# Output size assumed for an upstream unit that has not run yet: enough for link speed to matter.
ASSUMED_UPSTREAM_BYTES = 10**9
DATA_WEIGHT = 1.0
CAPACITY_WEIGHT = 0.25


# --------------------------------------------------------------------------------------------
# Inputs


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


@dataclass(frozen=True)
class Replica:
    site: str
    uri: str = ""
    bytes: int = 0


@dataclass(frozen=True)
class DatasetInfo:
    """A registered dataset. ``residency``: regions it may be read in (empty: anywhere);
    ``replicas``: where a ready copy is (bytes 0 → the dataset's ``bytes``)."""

    name: str
    uri_prefix: str = ""
    bytes: int = 0
    residency: frozenset[str] = frozenset()
    replicas: tuple[Replica, ...] = ()


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


class _Bounded(dict[Any, Any]):
    """A dict that forgets everything when it grows past ``limit`` (keys such as real upstream
    output sizes are unbounded over a long-lived snapshot)."""

    limit = 4096

    def put(self, key: Any, value: Any) -> Any:
        if len(self) >= self.limit:
            self.clear()
        self[key] = value
        return value


class _FleetCaches:
    def __init__(self) -> None:
        self.exclusions = _Bounded()
        self.eligibility = _Bounded()
        self.capacity = _Bounded()
        self.datasets = _Bounded()
        self.upstream = _Bounded()


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
        """ "free 12 CPU, 40 GB, 8 GPU" per site (ordered by name), shown in candidate rows."""
        out = []
        for s in self.ordered_sites:
            gpu = f", {s.gpu_free} GPU" if s.gpu_allocatable else ""
            out.append(f"free {s.cpu_free / 1000:g} CPU, {human_bytes(s.memory_free)}{gpu}")
        return tuple(out)

    @cached_property
    def caches(self) -> _FleetCaches:
        """Per-site vectors the planner derived from this fleet (it never changes), reused by
        every decision made against the same Fleet object: the webhook's snapshot pays once."""
        return _FleetCaches()

    @cached_property
    def bandwidth(self) -> dict[tuple[str, str], float]:
        return {
            (ln.source, ln.target): ln.bandwidth_mbps for ln in self.links if ln.bandwidth_mbps > 0
        }


# --------------------------------------------------------------------------------------------
# Outputs


class Candidate(NamedTuple):
    """One row of a decision's candidate table (the REST shape of DESIGN section 9)."""

    site: str
    eligible: bool
    why: str
    score: float | None
    bytes_to_move: int
    est_transfer_s: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "site": self.site,
            "eligible": self.eligible,
            "why": self.why,
            "score": self.score,
            "bytes_to_move": self.bytes_to_move,
            "est_transfer_s": self.est_transfer_s,
        }


@dataclass(frozen=True)
class Decision:
    """Where one unit goes. ``site`` is None when the unit is left to runtime (``timing`` runtime,
    in a plan) or when no site is eligible (``timing`` submit: unplaceable).

    ``candidates`` has one row per site, by site name. Scores, bytes and times are computed when
    the decision is made; the rows (and their ``why`` text) are built on first access, because a
    plan of thousands of units is mostly read for its chosen sites.
    """

    unit: str
    template: str
    depends: str
    timing: Timing
    site: str | None
    reason: str
    table: _Table = field(repr=False)
    rules: tuple[str, ...] = ()
    datasets: tuple[str, ...] = ()
    # For a runtime unit in a plan: where it would go if decided now (later units plan with it).
    runtime_hint: str | None = None

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        return self.table.rows()

    @property
    def unplaceable(self) -> bool:
        return self.site is None and self.runtime_hint is None and not self.table.any_eligible

    def as_dict(self) -> dict[str, Any]:
        """The REST shape of one unit in ``POST /api/v1/runs/preview/`` (DESIGN section 9)."""
        return {
            "name": self.unit,
            "template": self.template,
            "depends": self.depends,
            "timing": self.timing,
            "site": self.site,
            "reason": self.reason,
            "candidates": [c.as_dict() for c in self.candidates],
        }


@dataclass(frozen=True)
class Plan:
    decisions: tuple[Decision, ...]

    def by_unit(self) -> dict[str, Decision]:
        return {d.unit: d for d in self.decisions}

    def as_dict(self) -> dict[str, Any]:
        return {"units": [d.as_dict() for d in self.decisions]}


# --------------------------------------------------------------------------------------------
# Rule matching, compiled once


@lru_cache(maxsize=4096)
def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(fnmatch.translate(pattern))


@dataclass(frozen=True)
class _CompiledRule:
    rule: Rule
    template: re.Pattern[str] | None
    task: re.Pattern[str] | None
    image: re.Pattern[str] | None
    labels: tuple[tuple[str, str], ...]
    project: str | None

    def matches_static(self, unit: Unit, template_name: str, project: str | None) -> bool:
        """Everything but the task glob (what units of one template have in common)."""
        if self.project is not None and self.project != project:
            return False
        if self.template is not None and not self.template.match(template_name):
            return False
        for k, v in self.labels:
            if unit.labels.get(k) != v:
                return False
        return self.image is None or any(self.image.match(i) for i in unit.images)

    def matches(self, unit: Unit, template_name: str, project: str | None) -> bool:
        return self.matches_static(unit, template_name, project) and (
            self.task is None or _task_matches(self.task, unit)
        )


class RuleBook:
    """Enabled rules, ordered, with their globs compiled; build once and reuse across decisions."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        ordered = sorted(
            (r for r in rules if r.enabled), key=lambda r: (r.order, r.name, str(r.id))
        )
        self.rules: tuple[_CompiledRule, ...] = tuple(
            _CompiledRule(
                rule=r,
                template=_glob(r.selector.template) if r.selector.template else None,
                task=_glob(r.selector.task) if r.selector.task else None,
                image=_glob(r.selector.image) if r.selector.image else None,
                labels=tuple(sorted((str(k), str(v)) for k, v in r.selector.labels.items())),
                project=r.selector.project,
            )
            for r in ordered
        )

        self._static: dict[Any, tuple[bool, ...]] = {}
        self.keys: dict[int, tuple[Any, ...]] = {}

    def key(self, rule: Rule) -> tuple[Any, ...]:
        """What a rule's effect depends on, for caches that outlive this RuleBook."""
        key = self.keys.get(id(rule))
        if key is None:
            key = self.keys[id(rule)] = _rule_key(rule)
        return key

    def matching(self, unit: Unit, project: str | None) -> tuple[Rule, ...]:
        """Matching rules in order. All but the task glob depends on what units of one template
        share, so that part is computed once per (template, labels, images, project)."""
        name = template_display_name(unit.template)
        key = (name, tuple(sorted(unit.labels.items())), unit.images, project)
        static = self._static.get(key)
        if static is None:
            static = tuple(c.matches_static(unit, name, project) for c in self.rules)
            self._static[key] = static
        return tuple(
            c.rule
            for c, hit in zip(self.rules, static, strict=True)
            if hit and (c.task is None or _task_matches(c.task, unit))
        )


_COMPILED: dict[tuple[Any, ...], tuple[tuple[Any, ...], Any]] = {}


def _compiled(items: Sequence[Any], build: Callable[[Sequence[Any]], _T]) -> _T:
    """``build(items)``, reused while the same (immutable) input objects come again: the webhook
    passes one snapshot's rules and datasets to every decision. The entry keeps the inputs
    alive, so their ids cannot be reused by other objects while it exists."""
    items = tuple(items)
    key = (build, *map(id, items))
    hit = _COMPILED.get(key)
    if hit is not None:
        return hit[1]
    if len(_COMPILED) >= 32:
        _COMPILED.clear()
    value = build(items)
    _COMPILED[key] = (items, value)
    return value


def _rule_key(rule: Rule) -> tuple[Any, ...]:
    return (rule.id, rule.name, rule.effect, json.dumps(rule.params, sort_keys=True, default=str))


def _task_matches(pattern: re.Pattern[str], unit: Unit) -> bool:
    return bool(pattern.match(unit.task) or pattern.match(unit.name))


def template_display_name(key: str) -> str:
    """The template name rules match: ``ref:wft/tmpl`` → ``tmpl``; ``inline:...`` → ``inline``."""
    if key.startswith(("ref:", "cref:")):
        return key.rpartition("/")[2]
    if key.startswith("inline:"):
        return "inline"
    return key


# --------------------------------------------------------------------------------------------
# Datasets


MATCH_CACHE_MAX = 4096


class DataCatalogue:
    """Datasets indexed for matching a unit's dataset names and data references."""

    def __init__(self, datasets: Iterable[DatasetInfo]) -> None:
        self.datasets = tuple(sorted(datasets, key=lambda d: d.name))
        self.by_name = {d.name: d for d in self.datasets}
        # Longest prefix first, so the most specific dataset wins a reference.
        self.prefixes = sorted(
            ((d.uri_prefix, d) for d in self.datasets if d.uri_prefix),
            key=lambda p: (-len(p[0]), p[1].name),
        )
        self._cache: dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[DatasetInfo, ...]] = {}

    def read_by(self, unit: Unit) -> tuple[DatasetInfo, ...]:
        key = (unit.datasets, unit.data_refs)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        found: dict[str, DatasetInfo] = {}
        for n in unit.datasets:
            d = self.by_name.get(n)
            if d is not None:
                found[d.name] = d
        for ref in unit.data_refs:
            d = self.by_name.get(ref)
            if d is not None:
                found[d.name] = d
                continue
            for prefix, ds in self.prefixes:
                if ref.startswith(prefix):
                    found[ds.name] = ds
                    break
        result = tuple(sorted(found.values(), key=lambda d: d.name))
        if len(self._cache) >= MATCH_CACHE_MAX:
            # A catalogue may live as long as its tables are unchanged: bound the memo.
            self._cache.clear()
        self._cache[key] = result
        return result


# --------------------------------------------------------------------------------------------
# Formatting


def human_bytes(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            v = n / size
            return f"{v:.0f} {unit}" if v >= 10 else f"{v:.1f} {unit}"
    return f"{int(n)} B"


def human_seconds(s: float) -> str:
    """An estimate for humans: "<1 s", "~96 s", "~16 min", "~2.5 h"."""
    if s < 1:
        return "<1 s"
    if s < 120:
        return f"~{s:.0f} s"
    if s < 7200:
        return f"~{s / 60:.0f} min"
    return f"~{s / 3600:.1f} h"


# --------------------------------------------------------------------------------------------
# The decision


@dataclass(frozen=True)
class Upstream:
    """Where an upstream unit's outputs are, and their size in bytes: ``None`` when not known
    yet (at plan time), then ``ASSUMED_UPSTREAM_BYTES`` is used so a fast link still counts."""

    site: str
    bytes: int | None = None


UpstreamArg = Mapping[str, "str | Upstream | None"] | None


def _normalise_upstream(
    upstream_sites: UpstreamArg, only: Sequence[str] | None = None
) -> dict[str, Upstream]:
    """Upstream locations as ``Upstream`` objects; with ``only``, just those units (a caller may
    pass where every unit of the run is: only the unit's own upstream feed it)."""
    out: dict[str, Upstream] = {}
    source = upstream_sites or {}
    names = source.keys() if only is None else (n for n in only if n in source)
    for name in names:
        where = source[name]
        if isinstance(where, Upstream):
            out[name] = where
        elif isinstance(where, str) and where:
            out[name] = Upstream(where)
    return out


class _Costs(NamedTuple):
    """Per site (by name): bytes to move and seconds; ``note(i)`` says it in words for site i
    ("" when there is nothing to say), built only when a candidate row is."""

    bytes: list[int]
    seconds: list[float]
    note: Callable[[int], str]


def _no_note(_: int) -> str:
    return ""


class _Context:
    """Everything computed once per plan (or per decide call) and shared by its decisions:
    compiled rules, the dataset index, and per-site vectors (eligibility, capacity, data
    costs) keyed by what they depend on, so units that repeat a template cost little."""

    def __init__(
        self,
        fleet: Fleet,
        rules: Sequence[Rule] | RuleBook,
        datasets: Sequence[DatasetInfo] | DataCatalogue,
        project: str | None,
    ) -> None:
        self.fleet = fleet
        self.rulebook = rules if isinstance(rules, RuleBook) else _compiled(rules, RuleBook)
        self.data = (
            datasets if isinstance(datasets, DataCatalogue) else _compiled(datasets, DataCatalogue)
        )
        self.project = project
        self.sites = fleet.ordered_sites
        self.bandwidth = fleet.bandwidth
        self.memo: dict[Any, tuple[_Table, str | None, str]] = {}
        self.memo_hits = 0
        self.caches = fleet.caches
        self.nothing = _Costs([0] * len(self.sites), [0.0] * len(self.sites), _no_note)

    def hard_exclusions(self, rule: Rule) -> dict[str, str]:
        """Sites a hard rule removes, with the why."""
        key = self.rulebook.key(rule)
        cached = self.caches.exclusions.get(key)
        if cached is None:
            cached = self.caches.exclusions.put(key, _exclusions(rule, self.sites))
        return cached

    def transfer(self, source: str, target: str, nbytes: int) -> tuple[float, bool]:
        """Seconds to move ``nbytes`` source → target, and whether a link was known."""
        if source == target or nbytes <= 0:
            return 0.0, True
        bw = self.bandwidth.get((source, target))
        known = bw is not None
        mbps = bw if bw is not None else DEFAULT_BANDWIDTH_MBPS
        return nbytes * 8 / (mbps * 1e6), known

    def eligibility(
        self,
        hard: Sequence[Rule],
        reads: Sequence[DatasetInfo],
        req: Resources,
        exclude: frozenset[str],
        strict: bool,
    ) -> _Eligibility:
        """Per site (by name): why it is ineligible, or None."""
        residency = [(d, d.residency) for d in reads if d.residency]
        key = (
            tuple(self.rulebook.key(r) for r in hard),
            tuple((d.name, regions) for d, regions in residency),
            req,
            exclude,
            strict,
        )
        cached = self.caches.eligibility.get(key)
        if cached is None:
            hard_out = [self.hard_exclusions(r) for r in hard]
            whys = [_ineligible(s, req, exclude, hard_out, residency, strict) for s in self.sites]
            cached = self.caches.eligibility.put(key, _Eligibility(whys))
        return cached

    def capacity(self, req: Resources) -> tuple[list[float], list[str]]:
        """Per site: the free-capacity score for this request, and the row's capacity note."""
        cached = self.caches.capacity.get(req)
        if cached is None:
            fractions, notes = [], []
            for s, note in zip(self.sites, self.fleet.free_notes, strict=True):
                fraction, fits = _capacity(s, req)
                fractions.append(fraction)
                notes.append(note if fits else f"{note} (request does not fit now: would queue)")
            cached = self.caches.capacity.put(req, (fractions, notes))
        return cached

    def dataset_costs(self, reads: Sequence[DatasetInfo]) -> _Costs:
        key = tuple(reads)
        cached = self.caches.datasets.get(key)
        if cached is None:
            sites = self.sites

            def note(i: int) -> str:
                return "; ".join(_dataset_note(self, d, sites[i].name) for d in reads)

            cached = _Costs([], [], _memo_note(note, len(sites)))
            for s in sites:
                nbytes, seconds = 0, 0.0
                for d in reads:
                    b, t, _src, _known = _dataset_cost(self, d, s.name)
                    nbytes += b
                    seconds += t
                cached.bytes.append(nbytes)
                cached.seconds.append(seconds)
            self.caches.datasets.put(key, cached)
        return cached

    def link_row(self, source: str) -> tuple[list[float], list[bool]]:
        """From ``source`` to each site (by name): seconds per byte, and whether a link is
        known (no link: the slow default). Zero to itself."""
        key = ("links", source)
        cached = self.caches.upstream.get(key)
        if cached is None:
            default = 8 / (DEFAULT_BANDWIDTH_MBPS * 1e6)
            per_byte, known = [], []
            for s in self.sites:
                mbps = self.bandwidth.get((source, s.name))
                per_byte.append(0.0 if s.name == source else 8 / (mbps * 1e6) if mbps else default)
                known.append(s.name == source or mbps is not None)
            cached = self.caches.upstream.put(key, (per_byte, known))
        return cached

    def upstream_costs(self, source: str, nbytes: int, assumed: bool) -> _Costs:
        key = (source, nbytes, assumed)
        cached = self.caches.upstream.get(key)
        if cached is None:
            sites = self.sites
            per_byte, known = self.link_row(source)
            size = f"~{human_bytes(nbytes)} (assumed)" if assumed else human_bytes(nbytes)
            seconds = [nbytes * f for f in per_byte]
            no_link = f", no link: assumed {DEFAULT_BANDWIDTH_MBPS:.0f} Mbit/s"

            def note(i: int) -> str:
                if sites[i].name == source:
                    return ""
                link = "" if known[i] else no_link
                return f"upstream output {size} from {source} ({human_seconds(seconds[i])}{link})"

            moved = [0 if s.name == source else nbytes for s in sites]
            cached = self.caches.upstream.put(
                key, _Costs(moved, seconds, _memo_note(note, len(sites)))
            )
        return cached


class _Eligibility:
    """Per site (by name): why it is ineligible or None; the eligible positions; and, for an
    unplaceable unit, the reasons grouped."""

    __slots__ = ("_summary", "idx", "whys")

    def __init__(self, whys: list[str | None]) -> None:
        self.whys = whys
        self.idx = [i for i, why in enumerate(whys) if why is None]
        self._summary: str | None = None

    def summary(self, sites: Sequence[SiteState]) -> str:
        if self._summary is None:
            groups: dict[str, list[str]] = {}
            for s, why in zip(sites, self.whys, strict=True):
                groups.setdefault(why or "eligible", []).append(s.name)
            parts = []
            ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
            for why, names in ordered[:4]:
                more = f" and {len(names) - 3} more" if len(names) > 3 else ""
                parts.append(f"{', '.join(names[:3])}{more}: {why}")
            if len(groups) > 4:
                parts.append(f"{len(groups) - 4} other reasons")
            self._summary = "; ".join(parts) if parts else "no sites"
        return self._summary


def _memo_note(note: Callable[[int], str], n: int) -> Callable[[int], str]:
    """``note`` computed at most once per site (the vectors are shared by many decisions)."""
    done: list[str | None] = [None] * n

    def cached(i: int) -> str:
        text = done[i]
        if text is None:
            text = done[i] = note(i)
        return text

    return cached


class _Table:
    """A decision's candidate table: numbers now (for eligible sites: positions ``idx`` in the
    site list, their ``scores`` and transfer ``seconds``), rows with their text on first access."""

    __slots__ = (
        "_rows",
        "cap_notes",
        "capacity",
        "costs",
        "elig",
        "has_inputs",
        "idx",
        "n_data",
        "scores",
        "seconds",
        "sites",
    )

    def __init__(
        self,
        sites: Sequence[SiteState],
        elig: list[str | None],
        capacity: tuple[list[float], list[str]],
        costs: Sequence[_Costs],
        idx: list[int],
        scores: list[float],
        seconds: list[float],
        has_inputs: bool,
        n_data: int = 0,
    ) -> None:
        self.sites = sites
        self.n_data = n_data  # how many of ``costs`` (first) are dataset costs: 0 or 1
        self.elig = elig
        self.capacity, self.cap_notes = capacity
        self.costs = costs
        self.idx = idx
        self.scores = scores
        self.seconds = seconds
        self.has_inputs = has_inputs
        self._rows: tuple[Candidate, ...] | None = None

    @property
    def any_eligible(self) -> bool:
        return bool(self.idx)

    def bytes_at(self, i: int) -> int:
        return sum(c.bytes[i] for c in self.costs)

    def rows(self) -> tuple[Candidate, ...]:
        if self._rows is None:
            numbers = dict(zip(self.idx, zip(self.scores, self.seconds, strict=True), strict=True))
            fallback = "data local" if self.has_inputs else "no input data"
            costs = self.costs
            cap_notes = self.cap_notes
            # tuple.__new__ skips NamedTuple's Python-level __new__: rows are built by the
            # hundred thousand for a large preview.
            new, cls = tuple.__new__, Candidate
            rows = []
            for i, s in enumerate(self.sites):
                why = self.elig[i]
                if why is not None:
                    rows.append(new(cls, (s.name, False, why, None, 0, 0.0)))
                    continue
                score, seconds = numbers[i]
                if not costs:
                    notes, moved = fallback, 0
                elif len(costs) == 1:
                    notes, moved = costs[0].note(i) or fallback, costs[0].bytes[i]
                else:
                    notes, moved = self._combined(i, fallback)
                rows.append(
                    new(
                        cls,
                        (
                            s.name,
                            True,
                            f"{cap_notes[i]}; {notes}",
                            round(score, 4),
                            moved,
                            round(seconds, 1),
                        ),
                    )
                )
            self._rows = tuple(rows)
        return self._rows

    def _combined(self, i: int, fallback: str) -> tuple[str, int]:
        """Notes and bytes for a site when several inputs move: the dataset note as is, the
        upstream outputs summed into one note (one line per upstream would be long and slow)."""
        data = self.costs[: self.n_data]
        ups = self.costs[self.n_data :]
        parts = [data[0].note(i)] if data else []
        moved_up = 0
        seconds_up = 0.0
        moving = [c for c in ups if c.bytes[i]]
        for c in moving:
            moved_up += c.bytes[i]
            seconds_up += c.seconds[i]
        sources = len(moving)
        if sources == 1:
            parts.append(moving[0].note(i))
        elif sources:
            parts.append(
                f"upstream outputs {human_bytes(moved_up)} from {sources} other sites "
                f"({human_seconds(seconds_up)})"
            )
        moved = moved_up + (data[0].bytes[i] if data else 0)
        return "; ".join([p for p in parts if p]) or fallback, moved

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Table) and self.rows() == other.rows()

    def __hash__(self) -> int:
        return hash(self.rows())


def _freeze(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _exclusions(rule: Rule, sites: Sequence[SiteState]) -> dict[str, str]:
    out: dict[str, str] = {}
    p = rule.params
    label = f"rule '{rule.name}'"
    if rule.effect == "pin":
        allowed = set(_str_list(p.get("sites")))
        why = f"{label}: pinned to {', '.join(sorted(allowed)) or 'no site'}"
        if len(why) > 200:
            why = f"{label}: pinned to {len(allowed)} other sites"
        for s in sites:
            if s.name not in allowed:
                out[s.name] = why
    elif rule.effect == "exclude":
        banned = set(_str_list(p.get("sites")))
        why = f"{label}: site excluded"
        for s in sites:
            if s.name in banned:
                out[s.name] = why
    elif rule.effect == "require_labels":
        raw = p.get("labels")
        wanted = sorted((str(k), v) for k, v in raw.items()) if isinstance(raw, Mapping) else []
        for s in sites:
            missing = [
                k if v in (None, "*") else f"{k}={v}"
                for k, v in wanted
                if k not in s.labels or (v not in (None, "*") and s.labels[k] != str(v))
            ]
            if missing:
                out[s.name] = f"{label}: site lacks label {', '.join(missing)}"
    elif rule.effect == "require_capabilities":
        caps = _str_list(p.get("capabilities"))
        for s in sites:
            missing = [c for c in caps if c not in s.capabilities]
            if missing:
                out[s.name] = f"{label}: site lacks capability {', '.join(missing)}"
    return out


def _str_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple | set | frozenset):
        return [str(v) for v in value]
    return []


def decide(
    unit: Unit,
    fleet: Fleet,
    rules: Sequence[Rule] | RuleBook,
    datasets: Sequence[DatasetInfo] | DataCatalogue,
    project: str | None = None,
    upstream_sites: UpstreamArg = None,
    exclude_sites: Iterable[str] = (),
    *,
    timing: Timing | None = None,
    strict_capacity: bool = False,
) -> Decision:
    """Decide one unit now (the webhook, failover, or a re-plan).

    ``upstream_sites`` maps upstream unit names to where they ran (a site name, or an
    ``Upstream(site, bytes)`` when the size of their outputs is known). ``exclude_sites`` are
    removed with the reason "excluded by caller" (a lost site during failover). ``timing`` is
    reported as given (default: the timing the matching rules ask for); the site is always
    chosen. ``strict_capacity`` makes free CPU and memory a hard filter (deciding for *now*).
    """
    with _gc_paused():
        ctx = _Context(fleet, rules, datasets, project)
        where = _normalise_upstream(upstream_sites, unit.upstream)
        decision = _decide(
            ctx, unit, where, frozenset(exclude_sites), timing, strict_capacity, force_site=True
        )
        # One unit: its caller records the candidate table, so build the rows now.
        decision.table.rows()
    return decision


def plan(
    parsed_or_units: ParsedWorkflow | Sequence[Unit],
    fleet: Fleet,
    rules: Sequence[Rule] | RuleBook,
    datasets: Sequence[DatasetInfo] | DataCatalogue,
    project: str | None = None,
    upstream_sites: UpstreamArg = None,
) -> Plan:
    """Plan every unit in topological order (the order ``ParsedWorkflow.units`` has).

    A unit whose matching rules include one with timing ``runtime`` gets ``site=None`` and
    ``timing="runtime"``; its candidate table is still computed, as if its upstream units ran
    where they are planned. ``upstream_sites`` pre-seeds known locations (e.g. a re-plan of a
    run in progress: units that already ran).
    """
    units = (
        parsed_or_units.units
        if isinstance(parsed_or_units, ParsedWorkflow)
        else tuple(parsed_or_units)
    )
    ctx = _Context(fleet, rules, datasets, project)
    where = _normalise_upstream(upstream_sites)
    decisions: list[Decision] = []
    with _gc_paused():
        for unit in units:
            ups = {u: where[u] for u in unit.upstream if u in where}
            d = _decide(ctx, unit, ups, frozenset(), None, False, force_site=False)
            decisions.append(d)
            # Later units plan with the site a runtime decision would choose today.
            planned = d.site or d.runtime_hint
            if planned is not None and unit.name not in where:
                where[unit.name] = Upstream(planned)
    return Plan(tuple(decisions))


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Deciding allocates many small acyclic objects; the cyclic collector would walk them (and
    everything else alive) again and again for nothing, which shows as latency spikes. Paused
    for the computation only, and restored even on error."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _decide(
    ctx: _Context,
    unit: Unit,
    upstream: Mapping[str, Upstream],
    exclude: frozenset[str],
    timing: Timing | None,
    strict_capacity: bool,
    force_site: bool,
) -> Decision:
    matched = ctx.rulebook.matching(unit, ctx.project)
    reads = ctx.data.read_by(unit)
    rule_timing: Timing = "runtime" if any(r.timing == "runtime" for r in matched) else "submit"
    effective: Timing = timing or rule_timing
    moving = tuple(
        sorted(
            (u.site, ASSUMED_UPSTREAM_BYTES if u.bytes is None else u.bytes, u.bytes is None)
            for u in upstream.values()
            if u.bytes is None or u.bytes > 0
        )
    )
    # Units with the same rules, data, requests and upstream locations share one evaluation.
    memo_key = (
        tuple(r.id for r in matched),
        tuple(d.name for d in reads),
        unit.resources,
        moving,
        exclude,
        strict_capacity,
    )
    memo = ctx.memo.get(memo_key)
    if memo is None:
        memo = _evaluate(ctx, unit.resources, matched, reads, moving, exclude, strict_capacity)
        ctx.memo[memo_key] = memo
    else:
        ctx.memo_hits += 1
    table, best, reason = memo
    site = best
    hint = None
    if effective == "runtime" and not force_site:
        site, hint = None, best
        reason = f"placed at runtime by rule '{_first_runtime(matched)}'; now it would be: {reason}"
    return Decision(
        unit=unit.name,
        template=template_display_name(unit.template),
        depends=unit.depends,
        timing=effective,
        site=site,
        reason=reason,
        table=table,
        rules=tuple(r.name for r in matched),
        datasets=tuple(d.name for d in reads),
        runtime_hint=hint,
    )


def _first_runtime(rules: Sequence[Rule]) -> str:
    return next((r.name for r in rules if r.timing == "runtime"), "?")


def _evaluate(
    ctx: _Context,
    req: Resources,
    matched: Sequence[Rule],
    reads: Sequence[DatasetInfo],
    moving: Sequence[tuple[str, int, bool]],
    exclude: frozenset[str],
    strict_capacity: bool,
) -> tuple[_Table, str | None, str]:
    hard = [r for r in matched if r.effect in HARD_EFFECTS]
    locality_w = DATA_WEIGHT + sum(r.weight for r in matched if r.effect == "prefer_data_locality")
    capacity_w = CAPACITY_WEIGHT + sum(
        r.weight for r in matched if r.effect == "prefer_free_capacity"
    )
    elig = ctx.eligibility(hard, reads, req, exclude, strict_capacity)
    capacity = ctx.capacity(req)
    costs = [ctx.dataset_costs(reads)] if reads else []
    costs += [ctx.upstream_costs(src, b, assumed) for src, b, assumed in moving]
    # The hot path: only eligible sites, in list comprehensions. Scores are rounded when rows
    # are built; ranking uses the exact values.
    idx = elig.idx
    if not costs:
        seconds = [0.0] * len(idx)
    else:
        first = costs[0].seconds
        seconds = [first[i] for i in idx]
        for more in costs[1:]:
            vector = more.seconds
            seconds = [t + vector[i] for t, i in zip(seconds, idx, strict=True)]
    fractions = capacity[0]
    lw, cw, half = locality_w, capacity_w, TRANSFER_HALF_SCORE_S
    scores = [
        lw * (1.0 - t / (t + half)) + cw * fractions[i] for t, i in zip(seconds, idx, strict=True)
    ]
    best = _best(scores, idx, costs, skip=-1)
    second = _best(scores, idx, costs, skip=best) if best >= 0 else -1

    table = _Table(
        ctx.sites,
        elig.whys,
        capacity,
        costs,
        idx,
        scores,
        seconds,
        bool(reads or moving),
        n_data=1 if reads else 0,
    )
    if best < 0:
        return table, None, f"unplaceable: no eligible site ({elig.summary(ctx.sites)})"
    reason = _reason(ctx, table, best, second, hard, reads, req, locality_w, capacity_w)
    return table, ctx.sites[idx[best]].name, reason


def _ineligible(
    s: SiteState,
    req: Resources,
    exclude: frozenset[str],
    hard_out: Sequence[dict[str, str]],
    residency: Sequence[tuple[DatasetInfo, frozenset[str]]],
    strict_capacity: bool,
) -> str | None:
    if not s.ready:
        return "not ready"
    if s.cordoned:
        return "cordoned"
    if s.name in exclude:
        return "excluded by caller"
    for out in hard_out:
        why = out.get(s.name)
        if why is not None:
            return why
    for d, regions in residency:
        if s.region not in regions:
            allowed = ", ".join(sorted(regions))
            return f"dataset {d.name} must stay in {allowed} (site region {s.region or 'unknown'})"
    if req.gpus and s.gpu_free < req.gpus:
        return f"needs {req.gpus} GPU, {s.gpu_free} free of {s.gpu_allocatable}"
    if req.cpu_millicores > s.cpu_allocatable and s.cpu_allocatable > 0:
        return (
            f"needs {req.cpu_millicores / 1000:g} CPU, site has {s.cpu_allocatable / 1000:g} in all"
        )
    if req.memory_bytes > s.memory_allocatable and s.memory_allocatable > 0:
        total = human_bytes(s.memory_allocatable)
        return f"needs {human_bytes(req.memory_bytes)} memory, site has {total} in all"
    if strict_capacity:
        if req.cpu_millicores > s.cpu_free:
            return f"busy: needs {req.cpu_millicores / 1000:g} CPU, {s.cpu_free / 1000:g} free"
        if req.memory_bytes > s.memory_free:
            free = human_bytes(s.memory_free)
            return f"busy: needs {human_bytes(req.memory_bytes)} memory, {free} free"
        if s.pods_allocatable and s.pods_allocated >= s.pods_allocatable:
            return "busy: no pod slots free"
    return None


def _dataset_cost(ctx: _Context, d: DatasetInfo, site: str) -> tuple[int, float, str, bool]:
    """(bytes to move, seconds, source site, link known) to read dataset ``d`` at ``site`` from
    its best replica; source "" when it is local or has no replica."""
    best: tuple[float, int, str, bool] | None = None
    for r in d.replicas:
        size = r.bytes or d.bytes
        if r.site == site:
            return 0, 0.0, "", True
        t, known = ctx.transfer(r.site, site, size)
        cand = (t, size, r.site, known)
        if best is None or cand[:3] < best[:3]:
            best = cand
    if best is None:
        return 0, 0.0, "", True
    t, size, src, known = best
    return size, t, src, known


def _dataset_note(ctx: _Context, d: DatasetInfo, site: str) -> str:
    if not d.replicas:
        return f"dataset {d.name} has no replica"
    size, t, src, known = _dataset_cost(ctx, d, site)
    if not src:
        return f"dataset {d.name} local"
    link = "" if known else f", no link: assumed {DEFAULT_BANDWIDTH_MBPS:.0f} Mbit/s"
    return f"dataset {d.name} {human_bytes(size)} from {src} ({human_seconds(t)}{link})"


def _capacity(s: SiteState, req: Resources) -> tuple[float, bool]:
    """Mean free fraction left after the request (0 if it does not fit now), and whether it
    fits now. GPUs count only for units that need them: free GPUs do not make a site better for
    CPU work."""
    fractions: list[float] = []
    fits = True
    dims = [
        (s.cpu_free, s.cpu_allocatable, req.cpu_millicores),
        (s.memory_free, s.memory_allocatable, req.memory_bytes),
    ]
    if req.gpus:
        dims.append((s.gpu_free, s.gpu_allocatable, req.gpus))
    for free, total, need in dims:
        if total <= 0:
            continue
        if need > free:
            fits = False
        fractions.append(max(free - need, 0) / total)
    if not fits:
        return 0.0, False
    return (sum(fractions) / len(fractions) if fractions else 0.0), True


def _best(scores: list[float], idx: Sequence[int], costs: Sequence[_Costs], skip: int) -> int:
    """Position (in ``idx``) of the best eligible site: highest score, then fewer bytes, then
    name (sites are ordered by name); -1 if none. ``skip`` leaves one position out."""
    if skip >= 0:
        scores = [*scores[:skip], -1.0, *scores[skip + 1 :]]  # scores are never negative
    if not scores or (skip >= 0 and len(scores) == 1):
        return -1
    top = max(scores)
    if scores.count(top) == 1:
        return scores.index(top)
    tied = [k for k, sc in enumerate(scores) if sc == top]
    return min(tied, key=lambda k: (sum(c.bytes[idx[k]] for c in costs), k))


def _reason(
    ctx: _Context,
    table: _Table,
    best: int,
    second: int,
    hard: Sequence[Rule],
    reads: Sequence[DatasetInfo],
    req: Resources,
    locality_w: float,
    capacity_w: float,
) -> str:
    """One human line naming what decided: a hard rule, data locality or free capacity."""
    site = ctx.sites[table.idx[best]]
    prefix = ""
    if hard:
        r = hard[0]
        what = {
            "pin": f"pinned to {', '.join(_str_list(r.params.get('sites')))}",
            "exclude": f"excludes {', '.join(_str_list(r.params.get('sites')))}",
            "require_labels": "requires "
            + ", ".join(
                f"{k}={v}" if v not in (None, "*") else str(k)
                for k, v in sorted((r.params.get("labels") or {}).items())
            ),
            "require_capabilities": "requires "
            + ", ".join(_str_list(r.params.get("capabilities"))),
        }[r.effect]
        if len(what) > 160:
            what = what[:157] + "..."
        prefix = f"rule '{r.name}': {what}; "
    gpu = f"{site.name} has {site.gpu_free} free GPUs" if req.gpus else ""
    if second < 0:
        tail = gpu or f"{site.name} is the only eligible site"
        return f"{prefix}{tail}"
    runner = ctx.sites[table.idx[second]]
    half = TRANSFER_HALF_SCORE_S
    t_b, t_r = table.seconds[best], table.seconds[second]
    d_loc = locality_w * ((1.0 - t_b / (t_b + half)) - (1.0 - t_r / (t_r + half)))
    d_cap = capacity_w * (table.capacity[table.idx[best]] - table.capacity[table.idx[second]])
    if d_loc <= 0 and d_cap <= 0:
        core = f"tie with {runner.name}, broken by name"
    elif d_loc >= d_cap:
        local = [d for d in reads if any(r.site == site.name for r in d.replicas)]
        if local:
            d = local[0]
            core = f"data locality: dataset {d.name} ({human_bytes(d.bytes)}) is at {site.name}"
        elif table.bytes_at(table.idx[best]) == 0:
            core = f"data locality: inputs are at {site.name}"
        else:
            size = human_bytes(table.bytes_at(table.idx[best]))
            eta = human_seconds(t_b)
            core = f"data locality: least to move to {site.name} ({size}, {eta})"
    else:
        free = f"{site.cpu_free / 1000:g} CPU, {human_bytes(site.memory_free)} free"
        core = f"free capacity: {site.name} has {free}"
    if gpu and prefix:
        return f"{prefix}{gpu}; {core}"
    return f"{prefix}{core}"
