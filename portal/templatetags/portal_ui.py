"""Drawing helpers for the dashboard: the DAG and the timeline as plain SVG, and formatting.

The SVG is assembled in Python rather than in a template loop: a 2,000-unit run means thousands
of elements, and string joins are an order of magnitude cheaper than template nodes. Only plain
rects, lines and text, no script, so Chromium draws it without freezing.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from html import escape
from typing import Any
from urllib.parse import quote

from django import template
from django.utils.safestring import SafeString, mark_safe

from placement import units
from portal.dag import UNPLACED, depends_names, layout

register = template.Library()

PHASE_GLYPH = {
    "Succeeded": "✓",
    "Running": "▶",
    "Failed": "✗",
    "Error": "!",
    "Skipped": "↷",
    "Omitted": "-",
    "Pending": "…",
}
# Beyond this many nodes labels are dropped (each node keeps a <title> tooltip) and nodes shrink.
COMPACT_NODES = 300
# A looped task (withItems, withParam) with more items than this is drawn as one group node
# with its counts per site and per phase, unless the page asks to expand it.
GROUP_ITEMS = 12
# The phases in the order the legend and the counts list them.
TIMES = "\u00d7"  # the multiplication sign, as in "task x500" drawn with it
PHASES = ("Succeeded", "Running", "Pending", "Failed", "Error", "Skipped", "Omitted")
LABEL_CHARS = 19


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


def _plain(units: Sequence[Any]) -> list[dict[str, Any]]:
    """Units as dicts (the views pass ``.values()`` rows already; the rest is converted once,
    so the loops below use cheap ``dict.get``)."""
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


def group_units(
    units: Sequence[Any], expand: Sequence[str] = ()
) -> tuple[list[dict[str, Any]], dict[str, Group]]:
    """The units to draw: the items of a looped task with more than ``GROUP_ITEMS`` items
    (and the task's own row, for withParam) become one node named after the task, unless the
    task is in ``expand``. Returns the nodes and the groups drawn."""
    plain = _plain(units)
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
        task = in_group
        if task in placed:
            continue
        placed.add(task)
        g = groups[task]
        first = g.members[0]
        known = _all_names(plain)
        ups = [
            member_of.get(d, d)
            for m in g.members
            for d in depends_names(m.get("upstream") or m.get("depends") or "", known)
        ]
        top_site = g.site_counts[0][0] if g.site_counts else ""
        out.append(
            {
                "name": task,
                "group": g,
                "site": top_site,
                "planned_site": "",
                "phase": g.phase,
                "timing": first.get("timing"),
                "upstream": [x for x in dict.fromkeys(ups) if x != task],
                "depends": "",
            }
        )
    return out, groups


_names_cache: dict[int, frozenset[str]] = {}


def _all_names(units: list[dict[str, Any]]) -> frozenset[str]:
    key = id(units)
    if key not in _names_cache:
        _names_cache.clear()
        _names_cache[key] = frozenset(str(u["name"]) for u in units)
    return _names_cache[key]


def _edges(units: list[dict[str, Any]]) -> list[tuple[str, str]]:
    names = [str(u["name"]) for u in units]
    known = frozenset(names)
    edges: list[tuple[str, str]] = []
    for u, name in zip(units, names, strict=True):
        deps = depends_names(u.get("upstream") or u.get("depends") or "", known)
        edges.extend((d, name) for d in deps)
    return edges


@register.simple_tag
def dag_svg(
    units: Sequence[Any],
    colours: Mapping[str, str],
    label: str = "",
    link: str = "",
    expand: Sequence[str] = (),
    ended: Mapping[str, Sequence[Any]] | None = None,
    group_link: str = "",
) -> SafeString:
    """The DAG of ``units`` (UnitRuns or preview dicts with name, site, phase, depends or
    upstream) coloured by site and outlined by phase. With ``link`` (a URL prefix) each node
    opens its step panel; big looped tasks are group nodes (``group_units``); ``ended`` are
    the earlier attempts per unit name, drawn greyed behind the node."""
    units, _groups = group_units(units, expand)
    ended = ended or {}
    names = [str(u["name"]) for u in units]
    compact = len(units) > COMPACT_NODES
    lay = layout(
        names,
        _edges(units),
        node_w=44 if compact else 150,
        node_h=12 if compact else 30,
        gap_x=28 if compact else 50,
        gap_y=4 if compact else 12,
    )
    by_name = dict(zip(names, units, strict=True))
    parts: list[str] = [
        f'<svg class="dag{" compact" if compact else ""}" xmlns="http://www.w3.org/2000/svg" '
        f'width="{lay.width}" height="{lay.height}" viewBox="0 0 {lay.width} {lay.height}" '
        f'role="img" aria-label="{escape(label or "Workflow graph")}">',
        '<g class="edges">',
    ]
    for e in lay.edges:
        mid = (e.x1 + e.x2) // 2
        parts.append(
            f'<path d="M{e.x1} {e.y1}C{mid} {e.y1} {mid} {e.y2} {e.x2} {e.y2}"/>'
            if not compact
            else f'<line x1="{e.x1}" y1="{e.y1}" x2="{e.x2}" y2="{e.y2}"/>'
        )
    parts.append('</g><g class="nodes">')
    for n in lay.nodes:
        u = by_name[n.id]
        site = str(u.get("site") or u.get("planned_site") or "")
        phase = str(u.get("phase") or "")
        # A runtime unit not placed yet shows where the planner expects it, marked as such.
        likely = bool(u.get("likely")) or (
            not u.get("site") and bool(site) and u.get("timing") == "runtime"
        )
        fill = colours.get(site, UNPLACED) if site else UNPLACED
        where = site or "not placed yet"
        if likely:
            where = f"likely {site}, placed at runtime"
        tip = f"{n.id} · {where}" + (f" · {phase}" if phase else "")
        group: Group | None = u.get("group")
        earlier = ended.get(n.id) or ()
        if earlier:
            tip += "".join(
                f"\nattempt {a.number} at {a.site or '?'}: {a.ended}"
                + (f" ({a.why})" if a.why else "")
                for a in earlier
            )
        if group is not None:
            tip = (
                f"{n.id}: {group.size} items\n"
                + " · ".join(f"{s or 'unplaced'} {c}" for s, c in group.site_counts)
                + "\n"
                + " · ".join(f"{p} {c}" for p, c in group.phase_counts)
            )
        cls = f"node phase-{phase or 'none'}{' likely' if likely else ''}"
        cls += " transfer" if u.get("kind") == "transfer" else ""
        cls += " group" if group is not None else ""
        cls += " retried" if earlier else ""
        href = ""
        if group is not None and group_link:
            href = f"{group_link}{quote(n.id)}"
        elif link and group is None and u.get("slug"):
            href = f"{link}{quote(str(u['slug']))}/"
        if href:
            target = "#run-live" if group is not None else "#unit-panel-slot"
            swap = "outerHTML" if group is not None else "innerHTML show:#unit-panel-slot:top"
            push = "" if group is not None else ' hx-push-url="true"'
            if group is not None:
                # The live partial asks for the events newer than the page's newest only.
                push = ' hx-include="#live-since"'
            parts.append(
                f'<a href="{escape(href)}" hx-get="{escape(href)}" hx-target="{target}" '
                f'hx-swap="{swap}"{push}>'
            )
        parts.append(
            f'<g class="{cls}" data-unit="{escape(n.id)}" data-site="{escape(site)}"'
            + (f' data-items="{group.size}"' if group is not None else "")
            + f"><title>{escape(tip)}</title>"
        )
        for k in range(min(len(earlier), 2), 0, -1):
            # Earlier attempts: greyed cards stacked behind the node.
            parts.append(
                f'<rect class="ghost" x="{n.x + 5 * k}" y="{n.y - 5 * k}" width="{lay.node_w}" '
                f'height="{lay.node_h}" rx="{3 if compact else 6}"/>'
            )
        if group is not None and group.size:
            # Filled by site in proportion, with a strip of phases along the bottom.
            x = float(n.x)
            for s_name, count in group.site_counts:
                w = lay.node_w * count / group.size
                parts.append(
                    f'<rect class="share" x="{x:.1f}" y="{n.y}" width="{w:.1f}" '
                    f'height="{lay.node_h}" fill="{colours.get(s_name, UNPLACED)}"/>'
                )
                x += w
            x = float(n.x)
            for p_name, count in group.phase_counts:
                w = lay.node_w * count / group.size
                parts.append(
                    f'<rect class="strip strip-{p_name}" x="{x:.1f}" y="{n.y + lay.node_h - 4}" '
                    f'width="{w:.1f}" height="4"/>'
                )
                x += w
            parts.append(
                f'<rect class="frame" x="{n.x}" y="{n.y}" width="{lay.node_w}" '
                f'height="{lay.node_h}" rx="{3 if compact else 6}" fill="none"/>'
            )
        elif u.get("kind") == "transfer":
            # A transfer (a copy to a relay site) is a parallelogram: data moving, not a step.
            s = lay.node_h // 2
            x0, y0, x1, y1 = n.x, n.y, n.x + lay.node_w, n.y + lay.node_h
            parts.append(
                f'<polygon class="transfer" points="{x0 + s},{y0} {x1},{y0} {x1 - s},{y1} '
                f'{x0},{y1}" fill="{fill}"/>'
            )
        else:
            parts.append(
                f'<rect x="{n.x}" y="{n.y}" width="{lay.node_w}" height="{lay.node_h}" '
                f'rx="{3 if compact else 6}" fill="{fill}"/>'
            )
        if not compact:
            glyph = PHASE_GLYPH.get(phase, "≈" if likely else "")
            shown = f"{n.id} {TIMES}{group.size}" if group is not None else n.id
            if earlier:
                shown = f"{n.id} #{len(earlier) + 1}"
            text = shown if len(shown) <= LABEL_CHARS else shown[: LABEL_CHARS - 1] + "…"
            if group is not None and len(shown) > LABEL_CHARS:
                text = n.id[: LABEL_CHARS - 6] + f"… {TIMES}{group.size}"
            parts.append(
                f'<text x="{n.x + 8}" y="{n.y + lay.node_h // 2 + 5}">'
                f"{escape(glyph + ' ' if glyph else '')}{escape(text)}</text>"
            )
        parts.append("</g>")
        if href:
            parts.append("</a>")
    parts.append("</g></svg>")
    return mark_safe("".join(parts))  # every interpolated string is escaped


def _pack(
    bars: list[tuple[float, float, Any]], max_rows: int
) -> list[tuple[int, float, float, Any]]:
    """Interval packing: the sub-row of each bar, so bars in a lane overlap only once
    ``max_rows`` rows are full (then a bar joins the row that frees up first)."""
    free: list[tuple[float, int]] = []  # (end of the row's last bar, row)
    out = []
    for start, end, unit in sorted(bars, key=lambda b: (b[0], b[1])):
        if free and (free[0][0] <= start or len(free) >= max_rows):
            _, row = heapq.heappop(free)
        else:
            row = len(free)
        heapq.heappush(free, (end, row))
        out.append((row, start, end, unit))
    return out


TIMELINE_W = 1000
LANE_LABEL_W = 110
BAR_H = 14
MAX_SUBROWS = 12


def _fmt_offset(seconds: float, fine: bool = False) -> str:
    if fine and seconds < 10:
        return f"{seconds:.1f}s"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


@register.simple_tag
def timeline_svg(
    units: Sequence[Any],
    colours: Mapping[str, str],
    now: datetime | None = None,
    ended: Mapping[str, Sequence[Any]] | None = None,
) -> SafeString:
    """One lane per site; each started unit is a bar from its start to its end (or now).
    ``ended``: earlier attempts per unit name, drawn greyed in the lane of their site."""
    started = [u for u in _plain(units) if u.get("started_at")]
    for name, attempts in (ended or {}).items():
        for a in attempts:
            if a.started_at is not None:
                started.append(
                    {
                        "name": name,
                        "site": a.site,
                        "phase": a.phase,
                        "started_at": a.started_at,
                        "finished_at": a.finished_at or a.started_at,
                        "ended": f"attempt {a.number} {a.ended}" + (f": {a.why}" if a.why else ""),
                    }
                )
    if not started:
        return mark_safe('<p class="muted">No unit has started yet.</p>')
    end_of = {id(u): u.get("finished_at") or now or u["started_at"] for u in started}
    t0 = min(u["started_at"] for u in started)
    t1 = max(end_of.values())
    span = max((t1 - t0).total_seconds(), 1.0)
    scale = (TIMELINE_W - LANE_LABEL_W - 10) / span
    lanes: dict[str, list[tuple[float, float, Any]]] = {}
    for u in started:
        s = (u["started_at"] - t0).total_seconds()
        e = (end_of[id(u)] - t0).total_seconds()
        lanes.setdefault(str(u.get("site") or "(unplaced)"), []).append((s, e, u))
    parts: list[str] = []
    y = 22
    for site in sorted(lanes):
        packed = _pack(lanes[site], MAX_SUBROWS)
        rows = max(r for r, *_ in packed) + 1
        lane_h = rows * (BAR_H + 2) + 8
        parts.append(
            f'<g class="lane"><rect class="lane-bg" x="0" y="{y}" width="{TIMELINE_W}" '
            f'height="{lane_h}"/><text class="lane-label" x="6" y="{y + 15}">'
            f"{escape(site)}</text>"
        )
        fill = colours.get(site, UNPLACED)
        for row, s, e, u in packed:
            x = LANE_LABEL_W + s * scale
            w = max((e - s) * scale, 4.0)
            by = y + 4 + row * (BAR_H + 2)
            phase = str(u.get("phase") or "")
            tip = f"{u['name']} · {site} · {phase} · {_fmt_offset(e - s, fine=True)}"
            extra = ""
            label = ""
            if u.get("kind") == "transfer":
                # A copy to a relay site: a dashed bar (CSS), said in its tip, labelled with
                # what it moved (the estimate, marked so, until it has moved).
                tip = f"transfer {tip}"
                extra = " transfer"
                moved = u.get("moved") or {}
                if moved.get("bytes") is not None:
                    size = human_bytes(moved["bytes"])
                    label = size if moved.get("measured") else f"≈{size}"
                    tip += f" · {size} " + ("moved" if moved.get("measured") else "estimated")
            if u.get("ended"):
                tip += f" · {u['ended']}"
                extra = " ended"
            parts.append(
                f'<rect class="bar phase-{escape(phase)}{extra}" x="{x:.1f}" y="{by}" '
                f'width="{w:.1f}" height="{BAR_H}" fill="{fill}">'
                f"<title>{escape(tip)}</title></rect>"
            )
            if label:
                # Inside the bar when it has room, else just after it.
                inside = w >= 7.5 * len(label) + 6
                lx = x + 4 if inside else x + w + 3
                parts.append(
                    f'<text class="bar-label" x="{lx:.1f}" y="{by + BAR_H - 4}">'
                    f"{escape(label)}</text>"
                )
        parts.append("</g>")
        y += lane_h + 4
    ticks = []
    for i in range(5):
        x = LANE_LABEL_W + i * (TIMELINE_W - LANE_LABEL_W - 10) / 4
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        ticks.append(
            f'<line class="tick" x1="{x:.1f}" y1="16" x2="{x:.1f}" y2="{y}"/>'
            f'<text class="tick-label" x="{x:.1f}" y="12" text-anchor="{anchor}">'
            f"+{_fmt_offset(span * i / 4, fine=span < 10)}</text>"
        )
    return mark_safe(  # every interpolated string is escaped
        f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{TIMELINE_W}" '
        f'height="{y}" viewBox="0 0 {TIMELINE_W} {y}" role="img" '
        f'aria-label="Timeline, one lane per site">{"".join(ticks)}{"".join(parts)}</svg>'
    )


@register.filter
def human_bytes(value: Any) -> str:
    if value is None or value == "":
        return "—"
    # The planner's reasons use the same function: one size reads the same across a page.
    return units.human_bytes(float(value))


@register.filter
def human_seconds(value: Any) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, timedelta):
        value = value.total_seconds()
    s = float(value)
    if s < 1:
        return "< 1 s" if s > 0 else "0 s"
    return _fmt_offset(s).replace("s", " s").replace("m", " min ").replace("h", " h ").strip()


@register.filter
def duration_to(start: datetime | None, end: datetime | None) -> timedelta | None:
    """From ``start`` to ``end`` (or to now, for what still runs)."""
    if start is None:
        return None
    from django.utils import timezone

    return (end or timezone.now()) - start


ARTIFACT_KINDS = ("s3", "gcs", "azure", "oss", "hdfs", "http", "git", "artifactory", "hf")


@register.filter
def artifact_location(artifact: Any) -> str:
    """Where an Argo artifact lives, in full (``s3://bucket/key``, a URL, a path)."""
    if not isinstance(artifact, Mapping):
        return ""
    if artifact.get("locations"):
        return ", ".join(str(x) for x in artifact["locations"])
    raw = artifact.get("raw") if isinstance(artifact.get("raw"), Mapping) else {}
    for kind in ARTIFACT_KINDS:
        loc = artifact.get(kind) or (raw or {}).get(kind)
        if not isinstance(loc, Mapping):
            continue
        if kind in ("s3", "oss", "gcs"):
            scheme = {"s3": "s3", "oss": "oss", "gcs": "gs"}[kind]
            bucket = loc.get("bucket") or "(the site's default bucket)"
            where = f"{scheme}://{bucket}/{loc.get('key', '')}"
            return where + (f" at {loc['endpoint']}" if loc.get("endpoint") else "")
        if kind == "azure":
            return f"azure://{loc.get('container', '')}/{loc.get('blob', '')}"
        if kind == "hdfs":
            return f"hdfs://{loc.get('path', '')}"
        if kind == "git":
            return f"{loc.get('repo', '')}@{loc.get('revision', 'HEAD')}"
        return str(loc.get("url") or loc.get("path") or kind)
    return str(artifact.get("path") or "")


@register.filter
def millicores(value: Any) -> str:
    return f"{int(value) / 1000:g}" if value is not None else "—"


@register.filter
def colour_of(colours: Mapping[str, str], name: str) -> str:
    return colours.get(name, UNPLACED) if name else UNPLACED
