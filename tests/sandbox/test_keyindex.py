"""A chunk of a list is a range read of the keys in etcd's order: what ``Store.list_range``
answers is what sorting and filtering every object would, for any mix of writes, namespace,
start key and limit, and what follows a chunk is counted exactly."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox.chunks import key_of
from sandbox.resources import CONFIG_MAP, NAMESPACE, Registry
from sandbox.store import Store

# "a-b/..." sorts before "a/..." as strings (etcd's order), not as (namespace, name) pairs.
NAMESPACES = ("a", "a-b", "ab", "b")
NAMES = st.sampled_from(["x", "y", "x-1", "z0", "m"])
WRITES = st.lists(
    st.tuples(st.booleans(), st.sampled_from(NAMESPACES), NAMES), min_size=0, max_size=40
)


def naive(store: Store, namespace: str | None, start: str) -> list[dict[str, Any]]:
    every = sorted(store.objects[CONFIG_MAP.key].values(), key=key_of)
    return [
        o
        for o in every
        if (namespace is None or o["metadata"]["namespace"] == namespace) and key_of(o) >= start
    ]


@settings(max_examples=150, deadline=None)
@given(
    writes=WRITES,
    namespace=st.sampled_from([None, *NAMESPACES]),
    start=st.sampled_from(["", "a-b/y", "a/", "a/x\x00", "ab/m", "b/z0\x00", "c/"]),
    limit=st.integers(0, 6),
    labelled=st.booleans(),
)
def test_a_range_read_answers_what_sorting_every_object_would(
    writes: list[tuple[bool, str, str]],
    namespace: str | None,
    start: str,
    limit: int,
    labelled: bool,
) -> None:
    async def scenario() -> None:
        store = Store(Registry())
        for ns in NAMESPACES:
            store.create(NAMESPACE, {"metadata": {"name": ns}})
        for create, ns, name in writes:
            there = store.find(CONFIG_MAP, ns, name) is not None
            if create and not there:
                labels = {"even": "yes"} if len(name) % 2 == 0 else {}
                store.create(CONFIG_MAP, {"metadata": {"name": name, "labels": labels}}, ns)
            elif not create and there:
                store.delete(CONFIG_MAP, ns, name)
        match = (lambda labels: labels.get("even") == "yes") if labelled else None
        expected = [
            o
            for o in naive(store, namespace, start)
            if match is None or match(o["metadata"].get("labels") or {})
        ]
        page, following = store.list_range(CONFIG_MAP, namespace, match, start=start, limit=limit)
        shown = expected[:limit] if limit else expected
        assert [key_of(o) for o in page] == [key_of(o) for o in shown]
        rest = len(expected) - len(shown)
        # Counted exactly without a selector; with one, only whether anything follows.
        assert following == (rest if match is None else min(rest, 1))

    asyncio.run(scenario())
