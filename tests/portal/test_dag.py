"""The pure layout of portal/dag.py: layers respect edges, ordering reduces crossings, the same
input always gives the same picture, and site colours are stable and distinct."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement import parser
from portal.dag import PALETTE, depends_names, layout, site_colours


def crossings(lay, edges) -> int:
    pos = {n.id: (n.layer, n.order) for n in lay.nodes}
    count = 0
    for i, (a, b) in enumerate(edges):
        for c, d in edges[i + 1 :]:
            same_layers = pos[a][0] == pos[c][0] and pos[b][0] == pos[d][0]
            if same_layers and (pos[a][1] - pos[c][1]) * (pos[b][1] - pos[d][1]) < 0:
                count += 1
    return count


def test_it_layers_by_longest_path() -> None:
    lay = layout(["a", "b", "c", "d"], [("a", "b"), ("b", "c"), ("a", "c"), ("a", "d")])
    layers = {n.id: n.layer for n in lay.nodes}
    assert layers == {"a": 0, "b": 1, "c": 2, "d": 1}
    assert lay.layers == 3


def test_every_edge_points_to_a_later_layer_and_rightwards() -> None:
    ids = [f"n{i}" for i in range(30)]
    rng = random.Random(7)
    edges = [(ids[i], ids[j]) for i in range(30) for j in range(i + 1, 30) if rng.random() < 0.1]
    lay = layout(ids, edges)
    layer = {n.id: n.layer for n in lay.nodes}
    for s, t in edges:
        assert layer[s] < layer[t]
    for e in lay.edges:
        assert e.x1 < e.x2


def test_nodes_do_not_overlap_and_fit_the_canvas() -> None:
    ids = [f"n{i}" for i in range(12)]
    edges = [("n0", f"n{i}") for i in range(1, 12)]
    lay = layout(ids, edges)
    boxes = {(n.x, n.y) for n in lay.nodes}
    assert len(boxes) == 12
    for n in lay.nodes:
        assert n.x >= 0 and n.x + lay.node_w <= lay.width
        assert n.y >= 0 and n.y + lay.node_h <= lay.height


def test_barycentric_ordering_untangles_crossed_pairs() -> None:
    # Input order would cross every edge between layer 1 and layer 2.
    ids = ["r", "a", "b", "c", "z", "y", "x"]
    edges = [("r", "a"), ("r", "b"), ("r", "c"), ("a", "x"), ("b", "y"), ("c", "z")]
    lay = layout(ids, edges)
    assert crossings(lay, edges) == 0


def test_it_is_deterministic() -> None:
    ids = [f"n{i}" for i in range(200)]
    rng = random.Random(1)
    edges = [(ids[rng.randrange(i)], ids[i]) for i in range(1, 200) for _ in range(2)]
    assert layout(ids, edges) == layout(list(ids), list(edges))


def test_it_ignores_unknown_ends_self_loops_and_duplicates() -> None:
    lay = layout(["a", "b"], [("a", "b"), ("a", "b"), ("b", "b"), ("ghost", "a")])
    assert [(e.source, e.target) for e in lay.edges] == [("a", "b")]


def test_a_cycle_does_not_hang_and_every_node_is_placed() -> None:
    lay = layout(["a", "b", "c"], [("a", "b"), ("b", "c"), ("c", "a")])
    assert {n.id for n in lay.nodes} == {"a", "b", "c"}


def test_a_deep_chain_does_not_hit_the_recursion_limit() -> None:
    ids = [f"n{i}" for i in range(5000)]
    lay = layout(ids, list(itertools.pairwise(ids)))
    assert lay.layers == 5000


def test_an_empty_graph_is_empty() -> None:
    lay = layout([], [])
    assert lay.nodes == () and lay.width == 0 and lay.height == 0


@settings(max_examples=60, deadline=None)
@given(
    st.integers(min_value=1, max_value=25).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(
                st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(
                    lambda e: e[0] < e[1]
                ),
                max_size=60,
            ),
        )
    )
)
def test_layers_respect_edges_for_any_dag(graph: tuple[int, list[tuple[int, int]]]) -> None:
    n, pairs = graph
    ids = [f"t{i}" for i in range(n)]
    edges = [(ids[a], ids[b]) for a, b in pairs]
    lay = layout(ids, edges)
    layer = {node.id: node.layer for node in lay.nodes}
    assert set(layer) == set(ids)
    for s, t in edges:
        assert layer[s] < layer[t]
    # longest path: a node not in layer 0 has a predecessor exactly one layer before it
    for node in lay.nodes:
        if node.layer:
            assert any(layer[s] == node.layer - 1 for s, t in edges if t == node.id)
    assert lay == layout(ids, edges)


def test_depends_names_reads_argo_expressions_and_lists() -> None:
    known = ["ingest", "pre-process", "b", "c"]
    assert depends_names("ingest && (pre-process.Succeeded || b.Failed)", known) == [
        "ingest",
        "pre-process",
        "b",
    ]
    assert depends_names(["c", "unknown"], known) == ["c"]
    assert depends_names("", known) == []


def test_site_colours_are_stable_and_distinct() -> None:
    names = ["site-a", "site-b", "site-c"]
    colours = site_colours(names)
    assert colours == site_colours(reversed(names))
    assert len(set(colours.values())) == 3
    assert set(colours.values()) <= set(PALETTE)
    many = site_colours(f"site-{i}" for i in range(len(PALETTE)))
    assert len(set(many.values())) == len(PALETTE)


@pytest.mark.parametrize(
    "expr",
    [
        "a",
        "a && b",
        "c || (a.Failed && !b.Succeeded)",
        "b.AnySucceeded || a.AllFailed || b",
        "(a||b)&&c.Errored",
    ],
)
def test_depends_names_reads_what_the_parser_reads(expr: str) -> None:
    known = {"a", "b", "c"}
    assert depends_names(expr, known) == list(parser.depends_tasks(expr))
    assert set(depends_names(expr, known)) == parser.parse_depends(expr).tasks()


def test_depends_names_draws_nothing_for_an_expression_the_parser_refuses() -> None:
    for bad in ("a &&", "a.Unknown || b", "(a"):
        with pytest.raises(parser.DependsSyntaxError):
            parser.parse_depends(bad)
        assert depends_names(bad, {"a", "b"}) == []
