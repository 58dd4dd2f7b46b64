"""The DAG of a run (or of a preview) as plain SVG: each node coloured by site and outlined by
phase, big looped tasks as group nodes, earlier attempts as greyed cards behind a node.

The SVG is assembled in Python rather than in a template loop: a 2,000-unit run means thousands
of elements, and string joins are an order of magnitude cheaper than template nodes. Only plain
rects, lines and text, no script, so Chromium draws it without freezing. Every interpolated
string is escaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any
from urllib.parse import quote

from portal.dag import UNPLACED, Layout, Node, layout
from portal.drawing.groups import Group, graph_edges, group_units

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
TIMES = "\u00d7"  # the multiplication sign, as in "task x500" drawn with it
LABEL_CHARS = 19


@dataclass(frozen=True)
class NodeLook:
    """What one node shows: where it runs, its phase, its tooltip and its CSS classes."""

    site: str
    phase: str
    likely: bool
    fill: str
    tip: str
    group: Group | None
    earlier: Sequence[Any]
    css: str


class DagDrawing:
    """The DAG of ``units`` (UnitRuns or preview dicts with name, site, phase, depends or
    upstream). With ``link`` (a URL prefix) each node opens its step panel; big looped tasks
    are group nodes (``group_units``) linked to ``group_link`` + their name; ``ended`` are the
    earlier attempts per unit name, drawn greyed behind the node."""

    def __init__(
        self,
        units: Sequence[Any],
        colours: Mapping[str, str],
        *,
        label: str = "",
        link: str = "",
        expand: Sequence[str] = (),
        ended: Mapping[str, Sequence[Any]] | None = None,
        group_link: str = "",
    ) -> None:
        self.units, _groups = group_units(units, expand)
        self.colours = colours
        self.label = label
        self.link = link
        self.ended = ended or {}
        self.group_link = group_link
        self.compact = len(self.units) > COMPACT_NODES

    def render(self) -> str:
        names = [str(u["name"]) for u in self.units]
        c = self.compact
        lay = layout(
            names,
            graph_edges(self.units),
            node_w=44 if c else 150,
            node_h=12 if c else 30,
            gap_x=28 if c else 50,
            gap_y=4 if c else 12,
        )
        by_name = dict(zip(names, self.units, strict=True))
        parts = [self._open(lay), '<g class="edges">', *self._edges(lay), '</g><g class="nodes">']
        for n in lay.nodes:
            parts.extend(self._node(n, by_name[n.id], lay))
        parts.append("</g></svg>")
        return "".join(parts)

    def _open(self, lay: Layout) -> str:
        return (
            f'<svg class="dag{" compact" if self.compact else ""}" '
            'xmlns="http://www.w3.org/2000/svg" '
            f'width="{lay.width}" height="{lay.height}" viewBox="0 0 {lay.width} {lay.height}" '
            f'role="img" aria-label="{escape(self.label or "Workflow graph")}">'
        )

    def _edges(self, lay: Layout) -> list[str]:
        out = []
        for e in lay.edges:
            mid = (e.x1 + e.x2) // 2
            out.append(
                f'<path d="M{e.x1} {e.y1}C{mid} {e.y1} {mid} {e.y2} {e.x2} {e.y2}"/>'
                if not self.compact
                else f'<line x1="{e.x1}" y1="{e.y1}" x2="{e.x2}" y2="{e.y2}"/>'
            )
        return out

    def _look(self, node_id: str, u: Mapping[str, Any]) -> NodeLook:
        site = str(u.get("site") or u.get("planned_site") or "")
        phase = str(u.get("phase") or "")
        # A runtime unit not placed yet shows where the planner expects it, marked as such.
        likely = bool(u.get("likely")) or (
            not u.get("site") and bool(site) and u.get("timing") == "runtime"
        )
        group: Group | None = u.get("group")
        earlier = self.ended.get(node_id) or ()
        css = f"node phase-{phase or 'none'}{' likely' if likely else ''}"
        css += " transfer" if u.get("kind") == "transfer" else ""
        css += " group" if group is not None else ""
        css += " retried" if earlier else ""
        return NodeLook(
            site=site,
            phase=phase,
            likely=likely,
            fill=self.colours.get(site, UNPLACED) if site else UNPLACED,
            tip=_tip(node_id, site, phase, likely, group, earlier),
            group=group,
            earlier=earlier,
            css=css,
        )

    def _href(self, node_id: str, u: Mapping[str, Any], group: Group | None) -> str:
        if group is not None and self.group_link:
            return f"{self.group_link}{quote(node_id)}"
        if self.link and group is None and u.get("slug"):
            return f"{self.link}{quote(str(u['slug']))}/"
        return ""

    def _node(self, n: Node, u: Mapping[str, Any], lay: Layout) -> list[str]:
        look = self._look(n.id, u)
        group = look.group
        href = self._href(n.id, u, group)
        parts = [_anchor(href, group is not None)] if href else []
        parts.append(
            f'<g class="{look.css}" data-unit="{escape(n.id)}" data-site="{escape(look.site)}"'
            + (f' data-items="{group.size}"' if group is not None else "")
            + f"><title>{escape(look.tip)}</title>"
        )
        rx = 3 if self.compact else 6
        for k in range(min(len(look.earlier), 2), 0, -1):
            # Earlier attempts: greyed cards stacked behind the node.
            parts.append(
                f'<rect class="ghost" x="{n.x + 5 * k}" y="{n.y - 5 * k}" width="{lay.node_w}" '
                f'height="{lay.node_h}" rx="{rx}"/>'
            )
        if group is not None and group.size:
            parts.extend(self._group_shape(n, lay, group))
        elif u.get("kind") == "transfer":
            parts.append(_transfer_shape(n, lay, look.fill))
        else:
            parts.append(
                f'<rect x="{n.x}" y="{n.y}" width="{lay.node_w}" height="{lay.node_h}" '
                f'rx="{rx}" fill="{look.fill}"/>'
            )
        if not self.compact:
            parts.append(_label(n, lay, look))
        parts.append("</g>")
        if href:
            parts.append("</a>")
        return parts

    def _group_shape(self, n: Node, lay: Layout, group: Group) -> list[str]:
        """Filled by site in proportion, with a strip of phases along the bottom."""
        parts = []
        x = float(n.x)
        for s_name, count in group.site_counts:
            w = lay.node_w * count / group.size
            parts.append(
                f'<rect class="share" x="{x:.1f}" y="{n.y}" width="{w:.1f}" '
                f'height="{lay.node_h}" fill="{self.colours.get(s_name, UNPLACED)}"/>'
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
            f'height="{lay.node_h}" rx="{3 if self.compact else 6}" fill="none"/>'
        )
        return parts


def _tip(
    node_id: str,
    site: str,
    phase: str,
    likely: bool,
    group: Group | None,
    earlier: Sequence[Any],
) -> str:
    """The node's tooltip: where it runs and its phase, its earlier attempts, or a group's
    counts per site and per phase."""
    if group is not None:
        return (
            f"{node_id}: {group.size} items\n"
            + " · ".join(f"{s or 'unplaced'} {c}" for s, c in group.site_counts)
            + "\n"
            + " · ".join(f"{p} {c}" for p, c in group.phase_counts)
        )
    where = site or "not placed yet"
    if likely:
        where = f"likely {site}, placed at runtime"
    tip = f"{node_id} · {where}" + (f" · {phase}" if phase else "")
    return tip + "".join(
        f"\nattempt {a.number} at {a.site or '?'}: {a.ended}" + (f" ({a.why})" if a.why else "")
        for a in earlier
    )


def _anchor(href: str, group: bool) -> str:
    """The link around a node: a group re-draws the live part with it expanded (asking for the
    events newer than the page's newest only); a unit opens its step panel."""
    target = "#run-live" if group else "#unit-panel-slot"
    swap = "outerHTML" if group else "innerHTML show:#unit-panel-slot:top"
    extra = ' hx-include="#live-since"' if group else ' hx-push-url="true"'
    return (
        f'<a href="{escape(href)}" hx-get="{escape(href)}" hx-target="{target}" '
        f'hx-swap="{swap}"{extra}>'
    )


def _transfer_shape(n: Node, lay: Layout, fill: str) -> str:
    """A transfer (a copy to a relay site) is a parallelogram: data moving, not a step."""
    s = lay.node_h // 2
    x0, y0, x1, y1 = n.x, n.y, n.x + lay.node_w, n.y + lay.node_h
    return (
        f'<polygon class="transfer" points="{x0 + s},{y0} {x1},{y0} {x1 - s},{y1} '
        f'{x0},{y1}" fill="{fill}"/>'
    )


def _label(n: Node, lay: Layout, look: NodeLook) -> str:
    """The node's text: its phase glyph and name (shortened), a group's size, an attempt's
    number."""
    group = look.group
    glyph = PHASE_GLYPH.get(look.phase, "≈" if look.likely else "")
    shown = f"{n.id} {TIMES}{group.size}" if group is not None else n.id
    if look.earlier:
        shown = f"{n.id} #{len(look.earlier) + 1}"
    text = shown if len(shown) <= LABEL_CHARS else shown[: LABEL_CHARS - 1] + "…"
    if group is not None and len(shown) > LABEL_CHARS:
        text = n.id[: LABEL_CHARS - 6] + f"… {TIMES}{group.size}"
    return (
        f'<text x="{n.x + 8}" y="{n.y + lay.node_h // 2 + 5}">'
        f"{escape(glyph + ' ' if glyph else '')}{escape(text)}</text>"
    )
