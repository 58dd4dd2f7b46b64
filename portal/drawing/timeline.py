"""A run's timeline as plain SVG: one lane per site, each started unit a bar from its start to
its end (or now), earlier attempts greyed in the lane of their site. Every interpolated string
is escaped."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from datetime import datetime
from html import escape
from typing import Any

from placement import units as unit_text
from portal.dag import UNPLACED
from portal.drawing.groups import plain_units

TIMELINE_W = 1000
LANE_LABEL_W = 110
BAR_H = 14
MAX_SUBROWS = 12
TICKS = 4
NOTHING_STARTED = '<p class="muted">No unit has started yet.</p>'


def format_offset(seconds: float, fine: bool = False) -> str:
    """A duration as the timeline's ticks say it: ``4.2s``, ``12s``, ``3m05s``, ``1h02m``."""
    if fine and seconds < 10:
        return f"{seconds:.1f}s"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def size_text(value: Any) -> str:
    """A size in bytes in binary units, as the planner's reasons say it; a dash for none."""
    if value is None or value == "":
        return "—"
    return unit_text.human_bytes(float(value))


def pack(
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


def _ended_bars(ended: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """The earlier attempts that started, as bars."""
    return [
        {
            "name": name,
            "site": a.site,
            "phase": a.phase,
            "started_at": a.started_at,
            "finished_at": a.finished_at or a.started_at,
            "ended": f"attempt {a.number} {a.ended}" + (f": {a.why}" if a.why else ""),
        }
        for name, attempts in ended.items()
        for a in attempts
        if a.started_at is not None
    ]


class Timeline:
    """One lane per site of ``units`` (and of the ``ended`` attempts per unit name), from the
    first start to the last end (or ``now``)."""

    def __init__(
        self,
        units: Sequence[Any],
        colours: Mapping[str, str],
        *,
        now: datetime | None = None,
        ended: Mapping[str, Sequence[Any]] | None = None,
    ) -> None:
        self.started = [u for u in plain_units(units) if u.get("started_at")]
        self.started += _ended_bars(ended or {})
        self.colours = colours
        self.now = now

    def render(self) -> str:
        if not self.started:
            return NOTHING_STARTED
        end_of = {id(u): u.get("finished_at") or self.now or u["started_at"] for u in self.started}
        t0 = min(u["started_at"] for u in self.started)
        span = max((max(end_of.values()) - t0).total_seconds(), 1.0)
        scale = (TIMELINE_W - LANE_LABEL_W - 10) / span
        lanes: dict[str, list[tuple[float, float, Any]]] = {}
        for u in self.started:
            s = (u["started_at"] - t0).total_seconds()
            e = (end_of[id(u)] - t0).total_seconds()
            lanes.setdefault(str(u.get("site") or "(unplaced)"), []).append((s, e, u))
        parts: list[str] = []
        y = 22
        for site in sorted(lanes):
            lane, lane_h = self._lane(site, lanes[site], y, scale)
            parts.append(lane)
            y += lane_h + 4
        return (
            f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{TIMELINE_W}" '
            f'height="{y}" viewBox="0 0 {TIMELINE_W} {y}" role="img" '
            f'aria-label="Timeline, one lane per site">{_ticks(span, y)}{"".join(parts)}</svg>'
        )

    def _lane(
        self, site: str, bars: list[tuple[float, float, Any]], y: int, scale: float
    ) -> tuple[str, int]:
        """The lane of ``site`` at ``y``, and its height."""
        packed = pack(bars, MAX_SUBROWS)
        rows = max(r for r, *_ in packed) + 1
        lane_h = rows * (BAR_H + 2) + 8
        parts = [
            f'<g class="lane"><rect class="lane-bg" x="0" y="{y}" width="{TIMELINE_W}" '
            f'height="{lane_h}"/><text class="lane-label" x="6" y="{y + 15}">'
            f"{escape(site)}</text>"
        ]
        fill = self.colours.get(site, UNPLACED)
        for row, s, e, u in packed:
            x = LANE_LABEL_W + s * scale
            w = max((e - s) * scale, 4.0)
            parts.append(_bar(u, site, fill, x, w, y + 4 + row * (BAR_H + 2), e - s))
        parts.append("</g>")
        return "".join(parts), lane_h


def _bar(u: Mapping[str, Any], site: str, fill: str, x: float, w: float, by: int, d: float) -> str:
    """One unit's bar (``d`` seconds long), with its tooltip, and a transfer's label."""
    phase = str(u.get("phase") or "")
    tip = f"{u['name']} · {site} · {phase} · {format_offset(d, fine=True)}"
    extra = ""
    label = ""
    if u.get("kind") == "transfer":
        # A copy to a relay site: a dashed bar (CSS), said in its tip, labelled with what it
        # moved (the estimate, marked so, until it has moved).
        tip = f"transfer {tip}"
        extra = " transfer"
        moved = u.get("moved") or {}
        if moved.get("bytes") is not None:
            size = size_text(moved["bytes"])
            label = size if moved.get("measured") else f"≈{size}"
            tip += f" · {size} " + ("moved" if moved.get("measured") else "estimated")
    if u.get("ended"):
        tip += f" · {u['ended']}"
        extra = " ended"
    out = (
        f'<rect class="bar phase-{escape(phase)}{extra}" x="{x:.1f}" y="{by}" '
        f'width="{w:.1f}" height="{BAR_H}" fill="{fill}">'
        f"<title>{escape(tip)}</title></rect>"
    )
    if label:
        # Inside the bar when it has room, else just after it.
        inside = w >= 7.5 * len(label) + 6
        lx = x + 4 if inside else x + w + 3
        out += f'<text class="bar-label" x="{lx:.1f}" y="{by + BAR_H - 4}">{escape(label)}</text>'
    return out


def _ticks(span: float, y: int) -> str:
    """The time axis: ``TICKS`` + 1 lines across every lane, each labelled with its offset."""
    ticks = []
    for i in range(TICKS + 1):
        x = LANE_LABEL_W + i * (TIMELINE_W - LANE_LABEL_W - 10) / TICKS
        anchor = "start" if i == 0 else "end" if i == TICKS else "middle"
        ticks.append(
            f'<line class="tick" x1="{x:.1f}" y1="16" x2="{x:.1f}" y2="{y}"/>'
            f'<text class="tick-label" x="{x:.1f}" y="12" text-anchor="{anchor}">'
            f"+{format_offset(span * i / TICKS, fine=span < 10)}</text>"
        )
    return "".join(ticks)
