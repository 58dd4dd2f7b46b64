"""Layered layout of a workflow DAG, and a stable colour per site name.

Pure module (no Django): the run page and the submit preview draw its result as plain SVG.

``layout`` places nodes left to right in layers. A node's layer is the length of the longest
path from a root to it, so every edge points to a later layer. Within a layer, nodes are ordered
by the barycentre (mean position) of their neighbours in the adjacent layer, sweeping forwards
and backwards a few times; ties keep the input order, so the same input always gives the same
picture.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from placement.parser import DependsSyntaxError, depends_tasks

NODE_W = 150
NODE_H = 30
GAP_X = 50
GAP_Y = 12
MARGIN = 10
SWEEPS = 4


@dataclass(frozen=True)
class Node:
    id: str
    layer: int
    order: int
    x: int
    y: int


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    x1: int
    y1: int
    x2: int
    y2: int


@dataclass(frozen=True)
class Layout:
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    width: int
    height: int
    layers: int
    node_w: int
    node_h: int

    def node(self, node_id: str) -> Node:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise KeyError(node_id)


def _layers(ids: Sequence[str], preds: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Longest-path layering (iterative, so deep chains do not hit the recursion limit).

    Edges that close a cycle are ignored (the parser refuses cycles; this keeps the page alive
    should one slip through).
    """
    layer: dict[str, int] = {}
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    for root in ids:
        if root in layer:
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        state[root] = 1
        while stack:
            node, i = stack[-1]
            ps = preds.get(node, ())
            if i < len(ps):
                stack[-1] = (node, i + 1)
                p = ps[i]
                if state.get(p) is None:
                    state[p] = 1
                    stack.append((p, 0))
                continue
            stack.pop()
            state[node] = 2
            layer[node] = max((layer[p] + 1 for p in ps if p in layer), default=0)
    return layer


def _graph(
    ids: Sequence[str], edges: Iterable[tuple[str, str]]
) -> tuple[dict[str, int], dict[str, list[str]], dict[str, list[str]]]:
    """The nodes' input order, and each node's predecessors and successors (edges with an
    unknown end, self-loops and repeats dropped)."""
    index = {n: i for i, n in enumerate(dict.fromkeys(ids))}
    preds: dict[str, list[str]] = {n: [] for n in index}
    succs: dict[str, list[str]] = {n: [] for n in index}
    seen: set[tuple[str, str]] = set()
    for s, t in edges:
        if s in index and t in index and s != t and (s, t) not in seen:
            seen.add((s, t))
            preds[t].append(s)
            succs[s].append(t)
    return index, preds, succs


def _ordered_rows(
    index: Mapping[str, int],
    layer: Mapping[str, int],
    preds: Mapping[str, Sequence[str]],
    succs: Mapping[str, Sequence[str]],
    sweeps: int,
) -> list[list[str]]:
    """The nodes of each layer in drawing order: the barycentre of their neighbours in the
    adjacent layer, sweeping forwards and backwards; ties keep the input order."""
    nlayers = max(layer.values(), default=-1) + 1
    rows: list[list[str]] = [[] for _ in range(nlayers)]
    for n in index:
        rows[layer[n]].append(n)
    pos: dict[str, float] = {}
    for row in rows:
        for i, n in enumerate(row):
            pos[n] = i

    def reorder(row: list[str], neighbours: Mapping[str, Sequence[str]], adj: int) -> None:
        def key(n: str) -> tuple[float, int]:
            near = [pos[m] for m in neighbours[n] if layer[m] == adj]
            bary = sum(near) / len(near) if near else pos[n]
            return (bary, index[n])

        row.sort(key=key)
        for i, n in enumerate(row):
            pos[n] = i

    for sweep in range(sweeps):
        if sweep % 2 == 0:
            for li in range(1, nlayers):
                reorder(rows[li], preds, li - 1)
        else:
            for li in range(nlayers - 2, -1, -1):
                reorder(rows[li], succs, li + 1)
    return rows


def _place(
    rows: list[list[str]], node_w: int, node_h: int, gap_x: int, gap_y: int
) -> dict[str, Node]:
    """Each node's position: layers left to right, each centred vertically so short layers
    sit beside the middle of tall ones."""
    tallest = max((len(r) for r in rows), default=0)
    nodes: dict[str, Node] = {}
    for li, row in enumerate(rows):
        offset = (tallest - len(row)) * (node_h + gap_y) // 2
        for oi, n in enumerate(row):
            nodes[n] = Node(
                id=n,
                layer=li,
                order=oi,
                x=MARGIN + li * (node_w + gap_x),
                y=MARGIN + offset + oi * (node_h + gap_y),
            )
    return nodes


def _edges_between(
    nodes: Mapping[str, Node], preds: Mapping[str, Sequence[str]], node_w: int, node_h: int
) -> list[Edge]:
    """Each edge from the right middle of its source to the left middle of its target."""
    out_edges = []
    for n, ps in preds.items():
        tgt = nodes[n]
        for p in ps:
            src = nodes[p]
            out_edges.append(
                Edge(
                    source=p,
                    target=n,
                    x1=src.x + node_w,
                    y1=src.y + node_h // 2,
                    x2=tgt.x,
                    y2=tgt.y + node_h // 2,
                )
            )
    return out_edges


def layout(
    ids: Sequence[str],
    edges: Iterable[tuple[str, str]],
    *,
    node_w: int = NODE_W,
    node_h: int = NODE_H,
    gap_x: int = GAP_X,
    gap_y: int = GAP_Y,
    sweeps: int = SWEEPS,
) -> Layout:
    """Lay out the DAG ``ids`` with ``edges`` (source, target); unknown ends are dropped."""
    index, preds, succs = _graph(ids, edges)
    rows = _ordered_rows(index, _layers(list(index), preds), preds, succs, sweeps)
    nodes = _place(rows, node_w, node_h, gap_x, gap_y)
    tallest = max((len(r) for r in rows), default=0)
    nlayers = len(rows)
    height = MARGIN * 2 + tallest * node_h + max(tallest - 1, 0) * gap_y
    width = MARGIN * 2 + nlayers * node_w + max(nlayers - 1, 0) * gap_x
    return Layout(
        nodes=tuple(nodes[n] for n in index),
        edges=tuple(_edges_between(nodes, preds, node_w, node_h)),
        width=width if index else 0,
        height=height if index else 0,
        layers=nlayers,
        node_w=node_w,
        node_h=node_h,
    )


# --------------------------------------------------------------------------------------------
# Reading Argo dependencies


def depends_names(
    depends: str | Sequence[str] | None, known: Iterable[str] | frozenset[str]
) -> list[str]:
    """The unit names an Argo ``depends`` expression (or a plain list of names) refers to.

    Expressions are read by the parser's grammar, so the page draws the edges the run follows;
    one the parser refuses (it never stores one) draws none."""
    known_set = known if isinstance(known, frozenset | set) else set(known)
    if not depends:
        return []
    if isinstance(depends, str):
        try:
            candidates: Sequence[str] = depends_tasks(depends)
        except DependsSyntaxError:
            return []
    else:
        candidates = [str(d) for d in depends]
    return [c for c in dict.fromkeys(candidates) if c in known_set]


# --------------------------------------------------------------------------------------------
# Site colours

# Light tints so that dark text on them stays readable (contrast above 7:1 with #1b1f24), and
# distinct hues for the common kinds of colour blindness as far as twelve allow.
PALETTE: tuple[str, ...] = (
    "#9cc9ff",  # blue
    "#ffc285",  # orange
    "#a6e3a1",  # green
    "#e3b5f5",  # purple
    "#ffe38a",  # yellow
    "#8fe0e0",  # teal
    "#ffb3c1",  # pink
    "#c9c2a5",  # khaki
    "#b8c4ff",  # periwinkle
    "#d4e88c",  # lime
    "#f5c9a8",  # peach
    "#c0d6df",  # slate
)
UNPLACED = "#ffffff"


def _hash_index(name: str, size: int) -> int:
    return int.from_bytes(hashlib.sha1(name.encode("utf-8")).digest()[:4], "big") % size


def site_colours(names: Iterable[str]) -> dict[str, str]:
    """A colour for each site name: its hash picks a palette slot, and collisions move on to the
    next free slot in name order. For a given fleet the answer never changes, and adding a site
    moves at most the sites that collided with it."""
    out: dict[str, str] = {}
    used: set[int] = set()
    for name in sorted({n for n in names if n}):
        slot = _hash_index(name, len(PALETTE))
        if len(used) < len(PALETTE):
            while slot in used:
                slot = (slot + 1) % len(PALETTE)
        used.add(slot)
        out[name] = PALETTE[slot]
    return out
