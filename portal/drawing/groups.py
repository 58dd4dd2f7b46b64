"""The nodes a run's graph draws: its units, with the items of a big looped task folded into
one group node that carries its counts per site and per phase."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from portal.dag import depends_names

# The phases in the order the legend and the counts list them.
PHASES = ("Succeeded", "Running", "Pending", "Failed", "Error", "Skipped", "Omitted")
# A looped task (withItems, withParam) with more items than this is drawn as one group node
# with its counts per site and per phase, unless the page asks to expand it.
GROUP_ITEMS = 12

UNIT_KEYS = (
    "name",
    "kind",
    "slug",
    "task",
    "item_index",
    "expanded",
    "site",
    "planned_site",
    "phase",
    "timing",
    "likely",
    "upstream",
    "depends",
    "started_at",
    "finished_at",
)


def _get(unit: Any, key: str, default: Any = "") -> Any:
    if isinstance(unit, Mapping):
        return unit.get(key, default)
    return getattr(unit, key, default)


def plain_units(units: Sequence[Any]) -> list[dict[str, Any]]:
    """Units as dicts (the views pass ``.values()`` rows already; the rest is converted once,
    so the loops that draw them use cheap ``dict.get``)."""
    return [u if type(u) is dict else {k: _get(u, k, None) for k in UNIT_KEYS} for u in units]


@dataclass
class Group:
    """The items of one looped task, drawn as one node."""

    task: str
    members: list[dict[str, Any]] = field(default_factory=list)
    sites: dict[str, int] = field(default_factory=dict)
    phases: dict[str, int] = field(default_factory=dict)

    @property
    def size(self) -> int:
        # From the counts, which the live page fills without reading the members.
        return sum(self.phases.values())

    @property
    def phase(self) -> str:
        """The group's phase as Argo would give its fan-out node."""
        for p in ("Running", "Pending", "Error", "Failed"):
            if self.phases.get(p):
                return p
        return "Succeeded" if self.phases.get("Succeeded") else next(iter(self.phases), "")

    @property
    def site_counts(self) -> list[tuple[str, int]]:
        return sorted(self.sites.items(), key=lambda kv: (-kv[1], kv[0]))

    @property
    def phase_counts(self) -> list[tuple[str, int]]:
        return [(p, self.phases[p]) for p in PHASES if self.phases.get(p)]


_names_cache: dict[int, frozenset[str]] = {}


def _all_names(units: list[dict[str, Any]]) -> frozenset[str]:
    key = id(units)
    if key not in _names_cache:
        _names_cache.clear()
        _names_cache[key] = frozenset(str(u["name"]) for u in units)
    return _names_cache[key]


def _find_groups(
    plain: list[dict[str, Any]], expand: Sequence[str]
) -> tuple[dict[str, Group], dict[str, str]]:
    """The groups to draw, by task, and the task each folded unit belongs to."""
    by_task: dict[str, list[dict[str, Any]]] = {}
    for u in plain:
        if u.get("item_index") is not None or u.get("expanded"):
            by_task.setdefault(str(u.get("task") or u["name"]), []).append(u)
    groups: dict[str, Group] = {}
    member_of: dict[str, str] = {}
    for task, members in by_task.items():
        items = [m for m in members if m.get("item_index") is not None]
        if len(items) <= GROUP_ITEMS or task in expand:
            continue
        g = Group(task=task, members=items)
        for m in items:
            site = str(m.get("site") or m.get("planned_site") or "")
            phase = str(m.get("phase") or "")
            g.sites[site] = g.sites.get(site, 0) + 1
            g.phases[phase] = g.phases.get(phase, 0) + 1
        groups[task] = g
        for m in members:
            member_of[str(m["name"])] = task
    return groups, member_of


def _group_node(
    g: Group, plain: list[dict[str, Any]], member_of: Mapping[str, str]
) -> dict[str, Any]:
    """The node drawn for group ``g``: its upstream are its members' (folded too)."""
    task = g.task
    known = _all_names(plain)
    ups = [
        member_of.get(d, d)
        for m in g.members
        for d in depends_names(m.get("upstream") or m.get("depends") or "", known)
    ]
    top_site = g.site_counts[0][0] if g.site_counts else ""
    return {
        "name": task,
        "group": g,
        "site": top_site,
        "planned_site": "",
        "phase": g.phase,
        "timing": g.members[0].get("timing"),
        "upstream": [x for x in dict.fromkeys(ups) if x != task],
        "depends": "",
    }


def group_units(
    units: Sequence[Any], expand: Sequence[str] = ()
) -> tuple[list[dict[str, Any]], dict[str, Group]]:
    """The units to draw: the items of a looped task with more than ``GROUP_ITEMS`` items
    (and the task's own row, for withParam) become one node named after the task, unless the
    task is in ``expand``. Returns the nodes and the groups drawn."""
    plain = plain_units(units)
    groups, member_of = _find_groups(plain, expand)
    if not groups:
        return plain, {}
    out: list[dict[str, Any]] = []
    placed: set[str] = set()
    for u in plain:
        in_group = member_of.get(str(u["name"]))
        if in_group is None:
            deps = depends_names(u.get("upstream") or u.get("depends") or "", _all_names(plain))
            mapped = list(dict.fromkeys(member_of.get(d, d) for d in deps))
            out.append({**u, "upstream": mapped, "depends": ""})
            continue
        if in_group in placed:
            continue
        placed.add(in_group)
        out.append(_group_node(groups[in_group], plain, member_of))
    return out, groups


def graph_edges(units: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Every (upstream, unit) edge among ``units``."""
    names = [str(u["name"]) for u in units]
    known = frozenset(names)
    edges: list[tuple[str, str]] = []
    for u, name in zip(units, names, strict=True):
        deps = depends_names(u.get("upstream") or u.get("depends") or "", known)
        edges.extend((d, name) for d in deps)
    return edges
