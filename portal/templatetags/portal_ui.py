"""Drawing helpers for the dashboard: the DAG and the timeline as plain SVG, and formatting.

The SVG is assembled in Python rather than in a template loop: a 2,000-unit run means thousands
of elements, and string joins are an order of magnitude cheaper than template nodes. Only plain
rects, lines and text, no script, so Chromium draws it without freezing.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from html import escape
from typing import Any

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
LABEL_CHARS = 19


UNIT_KEYS = (
    "name",
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


def _edges(units: list[dict[str, Any]]) -> list[tuple[str, str]]:
    names = [str(u["name"]) for u in units]
    known = frozenset(names)
    edges: list[tuple[str, str]] = []
    for u, name in zip(units, names, strict=True):
        deps = depends_names(u.get("upstream") or u.get("depends") or "", known)
        edges.extend((d, name) for d in deps)
    return edges


@register.simple_tag
def dag_svg(units: Sequence[Any], colours: Mapping[str, str], label: str = "") -> SafeString:
    """The DAG of ``units`` (UnitRuns or preview dicts with name, site, phase, depends or
    upstream) coloured by site and outlined by phase."""
    units = _plain(units)
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
        cls = f"node phase-{phase or 'none'}{' likely' if likely else ''}"
        parts.append(
            f'<g class="{cls}" data-unit="{escape(n.id)}" data-site="{escape(site)}">'
            f"<title>{escape(tip)}</title>"
            f'<rect x="{n.x}" y="{n.y}" width="{lay.node_w}" height="{lay.node_h}" '
            f'rx="{3 if compact else 6}" fill="{fill}"/>'
        )
        if not compact:
            glyph = PHASE_GLYPH.get(phase, "≈" if likely else "")
            text = n.id if len(n.id) <= LABEL_CHARS else n.id[: LABEL_CHARS - 1] + "…"
            parts.append(
                f'<text x="{n.x + 8}" y="{n.y + lay.node_h // 2 + 5}">'
                f"{escape(glyph + ' ' if glyph else '')}{escape(text)}</text>"
            )
        parts.append("</g>")
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
    units: Sequence[Any], colours: Mapping[str, str], now: datetime | None = None
) -> SafeString:
    """One lane per site; each started unit is a bar from its start to its end (or now)."""
    started = [u for u in _plain(units) if u.get("started_at")]
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
            parts.append(
                f'<rect class="bar phase-{escape(phase)}" x="{x:.1f}" y="{by}" width="{w:.1f}" '
                f'height="{BAR_H}" fill="{fill}"><title>{escape(tip)}</title></rect>'
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
def millicores(value: Any) -> str:
    return f"{int(value) / 1000:g}" if value is not None else "—"


@register.filter
def colour_of(colours: Mapping[str, str], name: str) -> str:
    return colours.get(name, UNPLACED) if name else UNPLACED
