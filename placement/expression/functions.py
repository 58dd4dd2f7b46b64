"""The functions Argo puts in an expression's environment (``util/expr/env/env.go`` in Argo:
expr-lang's builtins, ``asInt``/``asFloat``, ``jsonpath``, ``toJson`` and ``sprig``), each
bounded by the evaluator's size limits. The ``sprig`` map holds the commonly used, pure part of
Sprig's generic function map (``env`` and ``expandenv`` are removed by Argo too)."""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import re
from collections.abc import Callable
from typing import Any

from placement.expression.evaluate import MAX_VALUE_CHARS, bounded, equal, is_number, type_name
from placement.expression.jsonpath import query as jsonpath_query
from placement.expression.syntax import ExprError


def go_json(value: Any) -> str:
    """Go's ``json.Marshal``: compact, ``<``, ``>`` and ``&`` escaped, whole floats without a
    fraction (``30``, not ``30.0``)."""

    def norm(v: Any) -> Any:
        if isinstance(v, float) and v.is_integer() and abs(v) < 1e21:
            return int(v)
        if isinstance(v, float) and not math.isfinite(v):
            raise ExprError("json: unsupported value: " + str(v))
        if isinstance(v, list):
            return [norm(x) for x in v]
        if isinstance(v, dict):
            return {str(k): norm(x) for k, x in sorted(v.items())}
        return v

    text = json.dumps(norm(value), separators=(",", ":"), ensure_ascii=False)
    return bounded(text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


def go_string(v: Any) -> str:
    """``fmt.Sprint`` of a value, as expr-lang's ``string()``."""
    if v is None:
        return "<nil>"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() and abs(v) < 1e21 else repr(v)
    if isinstance(v, list):
        return "[" + " ".join(go_string(x) for x in v) + "]"
    if isinstance(v, dict):
        return "map[" + " ".join(f"{k}:{go_string(x)}" for k, x in sorted(v.items())) + "]"
    return str(v)


def to_int(v: Any) -> int:
    if isinstance(v, bool):
        raise ExprError("invalid operation: int(bool)")
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v)
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            raise ExprError(f'strconv.Atoi: parsing "{v[:40]}": invalid syntax') from None
    raise ExprError(f"invalid operation: int({type_name(v)})")


def to_float(v: Any) -> float:
    if isinstance(v, bool):
        raise ExprError("invalid operation: float(bool)")
    if is_number(v):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            raise ExprError(f'strconv.ParseFloat: parsing "{v[:40]}": invalid syntax') from None
    raise ExprError(f"invalid operation: float({type_name(v)})")


def _len(v: Any) -> int:
    if isinstance(v, str | list | dict):
        return len(v)
    raise ExprError(f"invalid argument for len (type {type_name(v)})")


def _from_json(text: Any) -> Any:
    if not isinstance(text, str):
        raise ExprError("fromJSON needs a string")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ExprError(f"fromJSON: {exc}") from None


def jsonpath(text: Any, path: Any) -> Any:
    """Argo's ``jsonpath(jsonStr, path)``: the JSON text decoded, then queried."""
    if not isinstance(text, str) or not isinstance(path, str):
        raise ExprError(
            f"jsonpath: cannot use {type_name(text)}, {type_name(path)} as (string, string)"
        )
    return jsonpath_query(path, _from_json(text))


def _predicate(fn: Callable[[list[Any], Callable[[Any], Any]], Any]) -> Callable[..., Any]:
    fn.predicate = True  # type: ignore[attr-defined]
    return fn


def _truth(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ExprError(f"predicate must return a bool, not {type_name(v)}")
    return v


@_predicate
def _filter(items: list[Any], f: Callable[[Any], Any]) -> Any:
    return [x for x in items if _truth(f(x))]


@_predicate
def _map(items: list[Any], f: Callable[[Any], Any]) -> Any:
    return [f(x) for x in items]


@_predicate
def _all(items: list[Any], f: Callable[[Any], Any]) -> Any:
    return all(_truth(f(x)) for x in items)


@_predicate
def _any(items: list[Any], f: Callable[[Any], Any]) -> Any:
    return any(_truth(f(x)) for x in items)


@_predicate
def _none(items: list[Any], f: Callable[[Any], Any]) -> Any:
    return not any(_truth(f(x)) for x in items)


@_predicate
def _one(items: list[Any], f: Callable[[Any], Any]) -> Any:
    return sum(1 for x in items if _truth(f(x))) == 1


@_predicate
def _count(items: list[Any], f: Callable[[Any], Any]) -> Any:
    return sum(1 for x in items if _truth(f(x)))


_count.predicate_optional = True  # type: ignore[attr-defined]


@_predicate
def _find_last(items: list[Any], f: Callable[[Any], Any]) -> Any:
    return next((x for x in reversed(items) if _truth(f(x))), None)


@_predicate
def _find_last_index(items: list[Any], f: Callable[[Any], Any]) -> Any:
    return next((i for i in range(len(items) - 1, -1, -1) if _truth(f(items[i]))), -1)


@_predicate
def _find(items: list[Any], f: Callable[[Any], Any]) -> Any:
    return next((x for x in items if _truth(f(x))), None)


@_predicate
def _find_index(items: list[Any], f: Callable[[Any], Any]) -> Any:
    return next((i for i, x in enumerate(items) if _truth(f(x))), -1)


def _repeat(s: str, n: int) -> str:
    if len(s) * max(n, 0) > MAX_VALUE_CHARS:
        raise ExprError(f"repeat would make more than {MAX_VALUE_CHARS} characters")
    return s * n


def _join(items: list[Any], sep: str = "") -> str:
    return sep.join(go_string(x) for x in items)


def _split(s: str, sep: str) -> list[str]:
    return list(s) if sep == "" else s.split(sep)


def _minmax(pick: Callable[..., Any]) -> Callable[..., Any]:
    def f(*args: Any) -> Any:
        values = list(args[0]) if len(args) == 1 and isinstance(args[0], list) else list(args)
        if not values or not all(is_number(v) for v in values):
            raise ExprError("needs numbers")
        return pick(values)

    return f


def _numbers(a: Any) -> list[Any]:
    if not isinstance(a, list) or not all(is_number(v) for v in a):
        raise ExprError("needs an array of numbers")
    return a


def _median(a: Any) -> float:
    xs = sorted(_numbers(a))
    if not xs:
        return 0.0
    mid = len(xs) // 2
    return float(xs[mid]) if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def _flatten(a: list[Any]) -> list[Any]:
    out: list[Any] = []
    for v in a:
        out.extend(_flatten(v) if isinstance(v, list) else [v])
    return out


def _uniq(a: list[Any]) -> list[Any]:
    out: list[Any] = []
    for v in a:
        if not any(equal(v, w) for w in out):
            out.append(v)
    return out


def _get(v: Any, key: Any) -> Any:
    if isinstance(v, dict):
        return v.get(key)
    if isinstance(v, list) and isinstance(key, int):
        return v[key] if -len(v) <= key < len(v) else None
    return None


def _go_round(x: float) -> float:
    # Go's math.Round: half away from zero
    return float(math.copysign(math.floor(abs(x) + 0.5), x))


def _split_after(s: str, sep: str) -> list[str]:
    parts = s.split(sep)
    return [p + sep for p in parts[:-1]] + parts[-1:]


# expr-lang/expr builtin/builtin.go (the builtins of expr's default environment).
MORE_BUILTINS: dict[str, Callable[..., Any]] = {
    "lastIndexOf": lambda s, sub: s.rfind(sub),
    "splitAfter": _split_after,
    "ceil": lambda x: float(math.ceil(x)),
    "floor": lambda x: float(math.floor(x)),
    "round": _go_round,
    "sum": lambda a: sum(_numbers(a)),
    "mean": lambda a: float(sum(_numbers(a))) / len(a) if a else 0.0,
    "median": _median,
    "toBase64": lambda s: base64.b64encode(str(s).encode()).decode(),
    "fromBase64": lambda s: base64.b64decode(str(s)).decode(),
    "get": _get,
    "take": lambda a, n: list(a[: max(int(n), 0)]),
    "uniq": _uniq,
    "concat": lambda *arrays: [v for a in arrays for v in a],
    "flatten": _flatten,
    "sort": lambda a, order="asc": sorted(a, reverse=order == "desc"),
    "bitand": lambda a, b: int(a) & int(b),
    "bitor": lambda a, b: int(a) | int(b),
    "bitxor": lambda a, b: int(a) ^ int(b),
    "bitnand": lambda a, b: int(a) & ~int(b),
    "bitshl": lambda a, b: int(a) << int(b),
    "bitshr": lambda a, b: int(a) >> int(b),
    "bitnot": lambda a: ~int(a),
}


BUILTINS: dict[str, Callable[..., Any]] = {
    **MORE_BUILTINS,
    "len": _len,
    "int": to_int,
    "float": to_float,
    "string": go_string,
    # Go's json.MarshalIndent: map keys sorted
    "toJSON": lambda v: bounded(json.dumps(v, indent=2, ensure_ascii=False, sort_keys=True)),
    "fromJSON": _from_json,
    "upper": lambda s: str(s).upper(),
    "lower": lambda s: str(s).lower(),
    "trim": lambda s, cut=None: s.strip(cut),
    "trimPrefix": lambda s, p: s[len(p) :] if s.startswith(p) else s,
    "trimSuffix": lambda s, p: s[: -len(p)] if p and s.endswith(p) else s,
    "split": _split,
    "join": _join,
    "replace": lambda s, old, new: bounded(s.replace(old, new)),
    "repeat": _repeat,
    "indexOf": lambda s, sub: s.find(sub),
    "hasPrefix": lambda s, p: s.startswith(p),
    "hasSuffix": lambda s, p: s.endswith(p),
    "keys": lambda m: sorted(m),
    "values": lambda m: [m[k] for k in sorted(m)],
    "abs": lambda n: abs(n) if is_number(n) else to_int("x"),
    "max": _minmax(max),
    "min": _minmax(min),
    "first": lambda a: a[0] if a else None,
    "last": lambda a: a[-1] if a else None,
    "reverse": lambda a: list(reversed(a)),
    "filter": _filter,
    "map": _map,
    "all": _all,
    "any": _any,
    "none": _none,
    "one": _one,
    "count": _count,
    "find": _find,
    "findIndex": _find_index,
    "findLast": _find_last,
    "findLastIndex": _find_last_index,
    # Argo's own (util/expr/env/env.go).
    "asInt": to_int,
    "asFloat": to_float,
    "jsonpath": jsonpath,
    "toJson": go_json,
}


# Go's reference-time layout elements, longest first, as strftime-like renderers.
_GO_LAYOUT: list[tuple[str, Callable[[dt.datetime], str]]] = [
    ("January", lambda t: t.strftime("%B")),
    ("Monday", lambda t: t.strftime("%A")),
    ("2006", lambda t: f"{t.year:04d}"),
    ("-07:00", lambda t: _zone(t, ":")),
    ("-0700", lambda t: _zone(t, "")),
    ("Z07:00", lambda t: "Z" if not t.utcoffset() else _zone(t, ":")),
    (".000", lambda t: f".{t.microsecond // 1000:03d}"),
    ("Jan", lambda t: t.strftime("%b")),
    ("Mon", lambda t: t.strftime("%a")),
    ("MST", lambda t: t.tzname() or "UTC"),
    ("01", lambda t: f"{t.month:02d}"),
    ("02", lambda t: f"{t.day:02d}"),
    ("_2", lambda t: f"{t.day:2d}"),
    ("15", lambda t: f"{t.hour:02d}"),
    ("03", lambda t: f"{(t.hour % 12) or 12:02d}"),
    ("04", lambda t: f"{t.minute:02d}"),
    ("05", lambda t: f"{t.second:02d}"),
    ("06", lambda t: f"{t.year % 100:02d}"),
    ("PM", lambda t: "PM" if t.hour >= 12 else "AM"),
    ("pm", lambda t: "pm" if t.hour >= 12 else "am"),
    ("1", lambda t: str(t.month)),
    ("2", lambda t: str(t.day)),
    ("3", lambda t: str((t.hour % 12) or 12)),
    ("4", lambda t: str(t.minute)),
    ("5", lambda t: str(t.second)),
]
_LAYOUT_RE = re.compile("|".join(re.escape(k) for k, _ in _GO_LAYOUT))
_LAYOUT = dict(_GO_LAYOUT)


def _zone(t: dt.datetime, sep: str) -> str:
    off = t.utcoffset() or dt.timedelta(0)
    mins = int(off.total_seconds() // 60)
    sign = "-" if mins < 0 else "+"
    return f"{sign}{abs(mins) // 60:02d}{sep}{abs(mins) % 60:02d}"


def go_format(layout: str, t: dt.datetime) -> str:
    return _LAYOUT_RE.sub(lambda m: _LAYOUT[m.group(0)](t), layout)


def _sprig_date(layout: Any, when: Any) -> str:
    """Sprig's ``date``: a time, or Unix seconds; anything else (a string such as
    ``workflow.creationTimestamp``) formats the current time, as Sprig does."""
    if isinstance(when, int) and not isinstance(when, bool):
        t = dt.datetime.fromtimestamp(when, tz=dt.UTC)
    else:
        t = dt.datetime.now(tz=dt.UTC)
    return go_format(str(layout), t)


def _b64dec(s: str) -> str:
    try:
        return base64.b64decode(s.encode(), validate=True).decode("utf-8", "replace")
    except ValueError as exc:
        return str(exc)


def _empty(v: Any) -> bool:
    return v is None or v is False or v == 0 or (isinstance(v, str | list | dict) and not v)


def _sprig_int(v: Any) -> int:
    # Sprig's cast.ToInt: 0 for what does not read as a number.
    if isinstance(v, str) and not v.strip().lstrip("-+").isdigit():
        return 0
    return to_int(v)


SPRIG: dict[str, Callable[..., Any]] = {
    "date": _sprig_date,
    "trim": lambda s: go_string(s).strip(),
    "upper": lambda s: go_string(s).upper(),
    "lower": lambda s: go_string(s).lower(),
    "title": lambda s: go_string(s).title(),
    "replace": lambda old, new, s: bounded(go_string(s).replace(old, new)),
    "contains": lambda sub, s: sub in go_string(s),
    "hasPrefix": lambda p, s: go_string(s).startswith(p),
    "hasSuffix": lambda p, s: go_string(s).endswith(p),
    "trimPrefix": lambda p, s: s[len(p) :] if s.startswith(p) else s,
    "trimSuffix": lambda p, s: s[: -len(p)] if p and s.endswith(p) else s,
    "default": lambda d, v=None: d if _empty(v) else v,
    "empty": _empty,
    "toString": go_string,
    "toJson": go_json,
    "atoi": lambda s: to_int(s) if re.fullmatch(r"\s*[-+]?\d+\s*", str(s)) else 0,
    "int": lambda v: to_int(v) if not isinstance(v, str) or v.strip().lstrip("-+").isdigit() else 0,
    "int64": lambda v: to_int(v)
    if not isinstance(v, str) or v.strip().lstrip("-+").isdigit()
    else 0,
    "float64": to_float,
    "b64enc": lambda s: base64.b64encode(go_string(s).encode()).decode(),
    "b64dec": _b64dec,
    "quote": lambda *a: " ".join(json.dumps(go_string(x)) for x in a if x is not None),
    "squote": lambda *a: " ".join(f"'{go_string(x)}'" for x in a if x is not None),
    "list": lambda *a: list(a),
    "join": lambda sep, items: sep.join(go_string(x) for x in items),
    "split": lambda sep, s: {f"_{i}": p for i, p in enumerate(s.split(sep))},
    "splitList": lambda sep, s: s.split(sep),
    "add": lambda *a: sum(to_int(x) for x in a),
    "sub": lambda a, b: to_int(a) - to_int(b),
    "mul": lambda *a: math.prod(to_int(x) for x in a),
    "div": lambda a, b: int(to_int(a) / to_int(b)),
    "mod": lambda a, b: to_int(a) % to_int(b),
    "max": lambda *a: max(to_int(x) for x in a),
    "min": lambda *a: min(to_int(x) for x in a),
    "len": _len,
    "eq": equal,
}
