"""Drawing helpers for the dashboard: the DAG and the timeline as plain SVG, and formatting.

The SVG is assembled in Python rather than in a template loop: a 2,000-unit run means thousands
of elements, and string joins are an order of magnitude cheaper than template nodes. Only plain
rects, lines and text, no script, so Chromium draws it without freezing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

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


def _get(unit: Any, key: str, default: Any = "") -> Any:
    if isinstance(unit, Mapping):
        return unit.get(key, default)
    return getattr(unit, key, default)


def _edges(units: Sequence[Any]) -> list[tuple[str, str]]:
    names = [str(_get(u, "name")) for u in units]
    edges: list[tuple[str, str]] = []
    for u, name in zip(units, names, strict=True):
        upstream = _get(u, "upstream", None)
        deps = depends_names(upstream or _get(u, "depends", ""), names)
        edges.extend((d, name) for d in deps)
    return edges


@register.simple_tag
def dag_svg(units: Sequence[Any], colours: Mapping[str, str], label: str = "") -> SafeString:
    """The DAG of ``units`` (UnitRuns or preview dicts with name, site, phase, depends or
    upstream) coloured by site and outlined by phase."""
    names = [str(_get(u, "name")) for u in units]
    compact = len(units) > COMPACT_NODES
    lay = layout(
        names,
        _edges(units),
        node_w=44 if compact else 150,
        node_h=12 if compact else 30,
        gap_x=28 if compact else 50,
        gap_y=4 if compact else 12,
    )
    by_name = {str(_get(u, "name")): u for u in units}
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
        site = str(_get(u, "site") or _get(u, "planned_site") or "")
        phase = str(_get(u, "phase") or "")
        # A runtime unit not placed yet shows where the planner expects it, marked as such.
        likely = bool(_get(u, "likely", False)) or (
            not _get(u, "site") and bool(site) and _get(u, "timing") == "runtime"
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


def _pack(bars: list[tuple[float, float, Any]]) -> list[tuple[int, float, float, Any]]:
    """Greedy interval packing: the sub-row of each bar so bars in a lane do not overlap."""
    ends: list[float] = []
    out = []
    for start, end, unit in sorted(bars, key=lambda b: (b[0], b[1])):
        for row, row_end in enumerate(ends):
            if row_end <= start:
                ends[row] = end
                break
        else:
            row = len(ends)
            ends.append(end)
        out.append((row, start, end, unit))
    return out


TIMELINE_W = 1000
LANE_LABEL_W = 110
BAR_H = 14
MAX_SUBROWS = 12


def _fmt_offset(seconds: float) -> str:
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
    started = [u for u in units if _get(u, "started_at", None)]
    if not started:
        return mark_safe('<p class="muted">No unit has started yet.</p>')
    end_of = {id(u): _get(u, "finished_at", None) or now or _get(u, "started_at") for u in started}
    t0 = min(_get(u, "started_at") for u in started)
    t1 = max(end_of.values())
    span = max((t1 - t0).total_seconds(), 1.0)
    scale = (TIMELINE_W - LANE_LABEL_W - 10) / span
    lanes: dict[str, list[tuple[float, float, Any]]] = {}
    for u in started:
        s = (_get(u, "started_at") - t0).total_seconds()
        e = (end_of[id(u)] - t0).total_seconds()
        lanes.setdefault(str(_get(u, "site") or "(unplaced)"), []).append((s, e, u))
    parts: list[str] = []
    y = 22
    for site in sorted(lanes):
        packed = _pack(lanes[site])
        rows = min(max(r for r, *_ in packed) + 1, MAX_SUBROWS)
        lane_h = rows * (BAR_H + 2) + 8
        parts.append(
            f'<g class="lane"><rect class="lane-bg" x="0" y="{y}" width="{TIMELINE_W}" '
            f'height="{lane_h}"/><text class="lane-label" x="6" y="{y + 15}">'
            f"{escape(site)}</text>"
        )
        fill = colours.get(site, UNPLACED)
        for row, s, e, u in packed:
            x = LANE_LABEL_W + s * scale
            w = max((e - s) * scale, 2.0)
            by = y + 4 + min(row, rows - 1) * (BAR_H + 2)
            phase = str(_get(u, "phase"))
            tip = f"{_get(u, 'name')} · {site} · {phase} · {_fmt_offset(e - s)}"
            parts.append(
                f'<rect class="bar phase-{escape(phase)}" x="{x:.1f}" y="{by}" width="{w:.1f}" '
                f'height="{BAR_H}" fill="{fill}"><title>{escape(tip)}</title></rect>'
            )
        parts.append("</g>")
        y += lane_h + 4
    ticks = []
    for i in range(5):
        x = LANE_LABEL_W + i * (TIMELINE_W - LANE_LABEL_W - 10) / 4
        ticks.append(
            f'<line class="tick" x1="{x:.1f}" y1="16" x2="{x:.1f}" y2="{y}"/>'
            f'<text class="tick-label" x="{x:.1f}" y="12">+{_fmt_offset(span * i / 4)}</text>'
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
    n = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


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
