"""Loops: ``withItems``, ``withSequence`` and ``withParam`` items, and ``{{item}}``."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from placement.parser.arguments import artifact_locations, scalar_str
from placement.parser.names import dedupe_slugs, item_label, slugify
from placement.parser.results import Arguments, Artifact, Parameter, Unit


class SequenceInvalid(ValueError):
    """A ``withSequence`` field that cannot give a sequence; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


# 18 digits: any count a limit could allow, and far from what makes int() or range() slow.
_MAX_DIGITS = 18
_FORMAT_WIDTH = re.compile(r"%[-+ #0]*(\d*)(?:\.(\d*))?")


def sequence_range(seq: Mapping[str, Any]) -> range | None:
    """The numbers a literal ``withSequence`` gives, as a ``range`` (its length is known
    before anything is built), or None when a field is templated (known at run time). Raises
    ``SequenceInvalid`` naming the field."""

    def num(name: str) -> int | None:
        v = seq.get(name)
        if isinstance(v, bool):
            raise SequenceInvalid(name, "must be a number")
        if isinstance(v, int):
            text = str(abs(v)) if abs(v) < 10**_MAX_DIGITS else "9" * (_MAX_DIGITS + 1)
        elif isinstance(v, str):
            if "{{" in v:
                return None
            text = v.strip().lstrip("+-")
            if not re.fullmatch(r"\d+", text):
                raise SequenceInvalid(name, f"{v[:40]!r} is not a whole number")
        else:
            raise SequenceInvalid(name, "must be a number")
        if len(text.lstrip("0")) > _MAX_DIGITS:
            raise SequenceInvalid(name, f"is too large (more than {_MAX_DIGITS} digits)")
        return int(v)

    count, end = seq.get("count"), seq.get("end")
    if count is not None and end is not None:
        raise SequenceInvalid("count", "use either count or end, not both")
    s = num("start") if seq.get("start") is not None else 0
    fmt = seq.get("format")
    if isinstance(fmt, str):
        for m in _FORMAT_WIDTH.finditer(fmt):
            if any(len(g or "") > 3 for g in m.groups()):
                raise SequenceInvalid("format", "field width or precision is too large")
    if count is not None:
        c = num("count")
        if c is None or s is None:
            return None
        return range(s, s + max(c, 0))
    if end is not None:
        e = num("end")
        if e is None or s is None:
            return None
        return range(s, e + 1) if e >= s else range(s, e - 1, -1)
    raise SequenceInvalid("count", "needs a count or an end")


def sequence_items(seq: Mapping[str, Any], numbers: range) -> list[str]:
    """The items of a ``withSequence`` whose ``sequence_range`` the caller has bounded."""
    fmt = seq.get("format")
    if isinstance(fmt, str) and fmt:
        try:
            return [fmt % i for i in numbers]
        except (TypeError, ValueError):
            return [str(i) for i in numbers]
    return [str(i) for i in numbers]


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
            return scalar_str(v) or ""

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
    return scalar_str(v) or ""


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
    return tuple(dedupe_slugs(out))


_SEQUENCE_FIELDS = frozenset({"count", "start", "end", "format"})


def parse_with_param_value(value: str, *, max_items: int | None = None) -> list[Any]:
    """Argo's withParam input: a JSON list (from an output parameter), or the JSON of a
    ``withSequence`` whose fields were templated. ``max_items`` bounds the number of items,
    checked before any unit is built. Raises ValueError with the reason."""
    data = json.loads(value)
    if isinstance(data, dict) and data and set(data) <= _SEQUENCE_FIELDS:
        try:
            numbers = sequence_range(data)
        except SequenceInvalid as exc:
            raise ValueError(f"withSequence.{exc.field}: {exc}") from None
        if numbers is None:
            raise ValueError("withSequence is still templated")
        _check_items(len(numbers), max_items)
        return list(sequence_items(data, numbers))
    if not isinstance(data, list):
        raise ValueError("withParam must evaluate to a JSON list")
    _check_items(len(data), max_items)
    return data


def _check_items(n: int, max_items: int | None) -> None:
    if max_items is not None and n > max_items:
        raise ValueError(f"{n} items; the run can take at most {max(max_items, 0)} more units")
