"""Loops: ``withItems``, ``withSequence`` and ``withParam`` items, and ``{{item}}``."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from placement.parser.arguments import _scalar_str, artifact_locations
from placement.parser.names import _dedupe_slugs, item_label, slugify
from placement.parser.results import Arguments, Artifact, Parameter, Unit


def _sequence_items(seq: Mapping[str, Any]) -> list[Any] | None:
    def num(v: Any) -> int | None:
        if isinstance(v, bool):
            return None
        if isinstance(v, int):
            return v
        if isinstance(v, str) and re.fullmatch(r"[+-]?\d+", v.strip()):
            return int(v)
        return None

    count, start, end = seq.get("count"), seq.get("start"), seq.get("end")
    s = num(start) if start is not None else 0
    if s is None:
        return None
    if count is not None:
        c = num(count)
        if c is None:
            return None
        rng = list(range(s, s + max(c, 0)))
    elif end is not None:
        e = num(end)
        if e is None:
            return None
        rng = list(range(s, e + 1)) if e >= s else list(range(s, e - 1, -1))
    else:
        return None
    fmt = seq.get("format")
    if isinstance(fmt, str) and fmt:
        try:
            return [fmt % i for i in rng]
        except (TypeError, ValueError):
            return [str(i) for i in rng]
    return [str(i) for i in rng]


_ITEM = re.compile(r"\{\{\s*item(?:\.([-\w.]+))?\s*\}\}")


def substitute_item(arguments: Arguments, item: Any) -> Arguments:
    """Replace ``{{item}}`` / ``{{item.key}}`` in argument values (Argo's loop variables)."""

    def sub(value: str | None) -> str | None:
        if value is None or "{{" not in value:
            return value

        def one(m: re.Match[str]) -> str:
            v: Any = item
            for part in (m.group(1) or "").split(".") if m.group(1) else []:
                if isinstance(v, Mapping) and part in v:
                    v = v[part]
                else:
                    return m.group(0)
            return _scalar_str(v) or ""

        return _ITEM.sub(one, value)

    params = tuple(
        Parameter(p.name, sub(p.value), p.default, p.enum, p.description, p.value_from)
        for p in arguments.parameters
    )
    arts = []
    for a in arguments.artifacts:
        raw = json.loads(
            _ITEM.sub(lambda m: _json_escape(_item_value(item, m.group(1))), json.dumps(a.raw))
        )
        arts.append(Artifact(a.name, sub(a.from_), tuple(artifact_locations(raw)), raw))
    return Arguments(params, tuple(arts))


def _item_value(item: Any, path: str | None) -> str:
    v: Any = item
    for part in path.split(".") if path else []:
        if isinstance(v, Mapping) and part in v:
            v = v[part]
        else:
            return "{{item." + (path or "") + "}}"
    return _scalar_str(v) or ""


def _json_escape(s: str) -> str:
    return json.dumps(s)[1:-1]


def expand_with_param(unit: Unit, items: Sequence[Any]) -> tuple[Unit, ...]:
    """Expand a runtime (``withParam``) unit once its JSON list is known, like ``withItems``.

    The expanded units keep the upstream of the original; units downstream of ``unit.name``
    should now wait for all of them (see ``Unit.task``: they share it)."""
    out = []
    for i, v in enumerate(items):
        name = f"{unit.task}({i}:{item_label(v)})"
        out.append(
            replace(
                unit,
                name=name,
                slug=slugify(name),
                arguments=substitute_item(unit.arguments, v),
                item=v,
                item_index=i,
                with_param=None,
            )
        )
    return tuple(_dedupe_slugs(out))


def parse_with_param_value(value: str) -> list[Any]:
    """Argo's withParam input: a JSON list (from an output parameter). Raises ValueError."""
    data = json.loads(value)
    if not isinstance(data, list):
        raise ValueError("withParam must evaluate to a JSON list")
    return data
