"""The fields the portal owns in an object it applies (``portal.karmada.client.apply``): pure
comparisons and a three-way merge of plain JSON values, kept apart from the client that writes
them."""

from __future__ import annotations

import json
from typing import Any


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def covers(current: Any, want: Any) -> bool:
    """Whether ``current`` holds every field of ``want`` with the same value (extra fields in
    ``current`` are someone else's: a default, a namespace the webhook filled in)."""
    if isinstance(want, dict):
        return isinstance(current, dict) and all(
            k in current and covers(current[k], v) for k, v in want.items()
        )
    if isinstance(want, list):
        return (
            isinstance(current, list)
            and len(current) == len(want)
            and all(covers(c, w) for c, w in zip(current, want, strict=True))
        )
    return bool(current == want)


def three_way(current: Any, last: Any, want: Any) -> Any:
    """``want`` laid over ``current``: keys the portal wrote last time and no longer wants are
    dropped, keys only others wrote are kept, lists of the same length merge item by item."""
    if isinstance(want, dict) and isinstance(current, dict):
        last_d = last if isinstance(last, dict) else {}
        out = {k: v for k, v in current.items() if k in want or k not in last_d}
        for k, v in want.items():
            out[k] = three_way(current.get(k), last_d.get(k), v)
        return out
    if isinstance(want, list) and isinstance(current, list) and len(want) == len(current):
        last_l = last if isinstance(last, list) and len(last) == len(want) else [None] * len(want)
        return [three_way(c, p, w) for c, p, w in zip(current, last_l, want, strict=True)]
    return want
