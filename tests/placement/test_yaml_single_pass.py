"""The single-pass YAML reader gives what the full loader gives (values, refusals, messages),
and hands every document it does not cover to the full loader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement.parser import DEFAULT_LIMITS, Limits, WorkflowInvalid
from placement.parser import decode as parser
from tests.placement.schemas import EXAMPLES, need_reference

ROOT = Path(__file__).resolve().parents[2]


def decoded(text: str, limits: Limits = DEFAULT_LIMITS, *, full: bool = False) -> Any:
    """``decode_document``'s value or its refusal, by the single pass or by the full loader."""
    if full:
        saved = parser.load_plain

        def refuse(text: str, limits: Limits) -> None:
            raise parser.NeedsFullLoader

        parser.load_plain = refuse  # type: ignore[assignment]
    try:
        return ("ok", parser.decode_document(text, limits))
    except WorkflowInvalid as exc:
        return ("refused", exc.as_dicts())
    finally:
        if full:
            parser.load_plain = saved


def same_both_ways(text: str, limits: Limits = DEFAULT_LIMITS) -> Any:
    fast = decoded(text, limits)
    assert fast == decoded(text, limits, full=True)
    return fast


def documents() -> list[Path]:
    need_reference()
    return sorted(EXAMPLES.rglob("*.yaml")) + sorted((ROOT / "examples").glob("*.yaml"))


def test_every_reference_example_decodes_the_same_both_ways() -> None:
    paths = documents()
    single = 0
    for path in paths:
        text = path.read_text()
        same_both_ways(text)
        try:
            parser.load_plain(text, DEFAULT_LIMITS)
            single += 1
        except parser.NeedsFullLoader:
            pass
    # Most examples take the single pass; the rest (anchors, tags) exercised the fallback.
    assert single > len(paths) // 2, (single, len(paths))


# Plain scalars that YAML 1.1 types in surprising ways: each must come out as the full
# loader types it (timestamps stay strings in both).
TRICKY = [
    "yes", "No", "on", "OFF", "y", "~", "null", "Null", "", "true", "False",
    "1:30", "0x1F", "0o17", "017", "0b101", "1_000", "-12", "+3", "1e3", "1.5e-3", ".inf",
    "-.Inf", ".nan", "2001-12-14", "2001-12-14t21:59:43.10-05:00", "12:30:00", "=", "<<",
    "1.", "-", "--x", "a: b", "#no", "@x", "{{inputs.parameters.x}}", "0", "-0", "00", "3.14",
]  # fmt: skip


@pytest.mark.parametrize("scalar", TRICKY)
def test_tricky_plain_and_quoted_scalars_type_the_same(scalar: str) -> None:
    for text in (
        f"v: {scalar}\n",
        f"v: '{scalar}'\n",
        f"v: [{scalar}]\n",
        f"{scalar}: v\n",
        f"v:\n  - {scalar}\n  - k: {scalar}\n",
    ):
        try:
            yaml.safe_load(text)
        except yaml.YAMLError:
            continue  # not YAML at all (e.g. ": b" inside a flow sequence): refused alike
        same_both_ways(text)


def test_merge_keys_anchors_tags_and_other_keys_take_the_full_loader() -> None:
    assert same_both_ways("v: !!str 12\nw: !!int '7'\n") == ("ok", {"v": "12", "w": 7})
    for text, value in [
        ("base: &b {x: 1}\nv:\n  <<: *b\n  y: 2\n", {"x": 1, "y": 2}),
        ("a: &a 1\nb: *a\n", 1),
        ("v: !!binary aGk=\n", None),
        ("v: !!set {a}\n", None),
        ("1: one\nnull: t\n", "one"),
        ("v: .inf\n", None),
    ]:
        with pytest.raises(parser.NeedsFullLoader):
            parser.load_plain(text, DEFAULT_LIMITS)
        outcome = same_both_ways(text)
        if outcome[0] == "ok" and value is not None:
            assert value in outcome[1].values()


def test_the_single_pass_keeps_the_limits_and_their_messages() -> None:
    # The root mapping is one level: 63 sequences inside it reach the limit, 64 pass it.
    outcomes = {n: same_both_ways("v: " + "[" * n + "]" * n + "\n")[0] for n in range(60, 68)}
    assert outcomes == {n: "ok" if n <= 63 else "refused" for n in range(60, 68)}
    deep = "v: " + "[" * 80 + "]" * 80 + "\n"
    assert "nesting deeper than 64 levels" in same_both_ways(deep)[1][0]["message"]
    # Nodes: the root mapping, the key, the sequence and its items.
    counted = {
        k: same_both_ways("v: [" + ", ".join(["1"] * k) + "]\n", Limits(max_expanded_nodes=20))[0]
        for k in range(14, 20)
    }
    assert counted == {k: "ok" if k <= 17 else "refused" for k in range(14, 20)}
    wide = "v: [" + ", ".join(["1"] * 50) + "]\n"
    small = Limits(max_expanded_nodes=20)
    assert "expands to more than 20 nodes" in same_both_ways(wide, small)[1][0]["message"]
    for text in ("a: [1, 2\n", "---\na: 1\n---\nb: 2\n", "- 1\n- 2\n", "", "a: b: c\n"):
        assert same_both_ways(text)[0] == "refused"


keys = st.one_of(st.sampled_from(TRICKY), st.text(max_size=8))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(TRICKY),
)
trees = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(keys, inner, min_size=1, max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tree=st.dictionaries(keys, trees, min_size=1, max_size=4),
    flow=st.sampled_from([None, True, False]),
    style=st.sampled_from([None, "'", '"']),
)
def test_generated_documents_decode_the_same_both_ways(
    tree: dict[str, Any], flow: bool | None, style: str | None
) -> None:
    same_both_ways(yaml.safe_dump(tree, default_flow_style=flow, default_style=style))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(keys, st.sampled_from(TRICKY)), min_size=1, max_size=6))
def test_generated_plain_scalars_decode_the_same_both_ways(pairs: list[tuple[str, str]]) -> None:
    # Written by hand, unquoted: every plain scalar goes through YAML's implicit typing.
    text = "".join(f"k{i}: {value}\n" for i, (_, value) in enumerate(pairs))
    try:
        yaml.safe_load(text)
    except yaml.YAMLError:
        return
    same_both_ways(text)
