"""``sites.merge_patch`` against the examples of RFC 7386, Appendix A."""

from __future__ import annotations

from typing import Any

import pytest

from sites.merge_patch import changes, merge_patch

# (original, patch, result), RFC 7386 Appendix A, in its order.
RFC_7386 = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("original", "patch", "result"), RFC_7386)
def test_it_merges_as_rfc_7386_appendix_a(original: Any, patch: Any, result: Any) -> None:
    before = repr(original)
    assert merge_patch(original, patch) == result
    assert repr(original) == before  # the stored value is not changed in place


def test_it_lists_each_changed_leaf_with_its_path() -> None:
    before = {"x": {"a": 1, "b": [1]}, "y": True}
    after = {"x": {"a": 2, "c": "new"}, "y": True}
    assert changes(before, after, "overrides") == [
        {"path": "overrides.x.a", "op": "replace", "old": 1, "new": 2},
        {"path": "overrides.x.b", "op": "remove", "old": [1]},
        {"path": "overrides.x.c", "op": "add", "new": "new"},
    ]
    assert changes({"n": 1}, {"n": True}, "") == [
        {"path": "n", "op": "replace", "old": 1, "new": True}
    ]
