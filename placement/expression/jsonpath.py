"""The JSONPath Argo's ``jsonpath()`` reads (``github.com/evilmonkeyinc/jsonpath``): ``$``,
``.key``, ``['key']``, ``[n]`` (negative from the end), ``[a:b]``, ``[*]``/``.*``, unions
``[0,1]``, recursive ``..key`` and filters ``[?(@.x == 'v' && @.y > 1)]``. A path of plain keys
and indexes gives one value; a wildcard, slice, union, filter or ``..`` gives the list of the
values found. Bounded by the path's length and the document it walks."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator
from typing import Any

from placement.expression.syntax import ExprError

MAX_PATH_CHARS = 4096
_KEY = re.compile(r"[A-Za-z_$][\w$-]*")
_FILTER_TOKEN = re.compile(
    r"\s*(?:(?P<op>==|!=|<=|>=|&&|\|\||[<>!()])|(?P<str>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
    r"|(?P<num>-?\d+(?:\.\d+)?)|(?P<ref>[@$](?:\.[\w$-]+|\[\d+\]|\['[^']*'\])*)"
    r"|(?P<lit>true|false|null))"
)


def query(path: str, data: Any) -> Any:
    if len(path) > MAX_PATH_CHARS:
        raise ExprError(f"jsonpath longer than {MAX_PATH_CHARS} characters")
    path = path.strip()
    if not path.startswith("$"):
        raise ExprError("jsonpath: must start with $")
    values, many = [data], False
    pos = 1
    while pos < len(path):
        pos, step, collects = _segment(path, pos)
        many |= collects
        values = [v for x in values for v in step(x)]
        if not many and not values:
            raise ExprError(f"jsonpath: {path[:pos]!r} found nothing")
    if many:
        return values
    return values[0]


def _segment(path: str, pos: int) -> tuple[int, Any, bool]:
    if path.startswith("..", pos):
        m = _KEY.match(path, pos + 2)
        if m is None:
            raise ExprError(f"jsonpath: key expected at {pos + 2}")
        key = m.group(0)
        return m.end(), lambda x: list(_recursive(x, key)), True
    if path.startswith(".*", pos) or path.startswith("[*]", pos):
        end = pos + (2 if path[pos] == "." else 3)
        return end, _children, True
    if path[pos] == ".":
        m = _KEY.match(path, pos + 1)
        if m is None:
            raise ExprError(f"jsonpath: key expected at {pos + 1}")
        key = m.group(0)
        return m.end(), lambda x: _key(x, key), False
    if path.startswith("[?(", pos):
        end = _closing(path, pos + 3)
        expr = path[pos + 3 : end]
        return end + 2, lambda x: [c for c in _children(x) if _filter(expr, c)], True
    if path[pos] == "[":
        end = path.find("]", pos)
        if end < 0:
            raise ExprError("jsonpath: missing ]")
        return end + 1, *_bracket(path[pos + 1 : end].strip())
    raise ExprError(f"jsonpath: unexpected {path[pos]!r} at {pos}")


def _closing(path: str, start: int) -> int:
    depth = 1
    quote = ""
    for i in range(start, len(path)):
        ch = path[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                if path[i + 1 : i + 2] != "]":
                    raise ExprError("jsonpath: filter must end with )]")
                return i
    raise ExprError("jsonpath: unclosed filter")


def _bracket(inner: str) -> tuple[Any, bool]:
    if re.fullmatch(r"'[^']*'|\"[^\"]*\"", inner):
        key = inner[1:-1]
        return (lambda x: _key(x, key)), False
    if re.fullmatch(r"-?\d+", inner):
        n = int(inner)
        return (lambda x: _at(x, n)), False
    m = re.fullmatch(r"(-?\d*):(-?\d*)(?::(-?\d+))?", inner)
    if m:
        lo, hi, st = (int(g) if g else None for g in m.groups())
        if st == 0:
            raise ExprError("jsonpath: slice step 0")
        return (lambda x: x[lo:hi:st] if isinstance(x, list) else []), True
    parts = [p.strip() for p in inner.split(",")]
    if len(parts) > 1:
        steps = [_bracket(p)[0] for p in parts]
        return (lambda x: [v for s in steps for v in s(x)]), True
    raise ExprError(f"jsonpath: cannot read [{inner[:40]}]")


def _key(x: Any, key: str) -> list[Any]:
    return [x[key]] if isinstance(x, dict) and key in x else []


def _at(x: Any, n: int) -> list[Any]:
    if isinstance(x, list) and -len(x) <= n < len(x):
        return [x[n]]
    return []


def _children(x: Any) -> list[Any]:
    if isinstance(x, dict):
        return [x[k] for k in sorted(x)]
    if isinstance(x, list):
        return list(x)
    return []


def _recursive(x: Any, key: str) -> Iterator[Any]:
    stack = deque([x])  # breadth first, as the library walks; linear in the document
    while stack:
        cur = stack.popleft()
        if isinstance(cur, dict) and key in cur:
            yield cur[key]
        stack.extend(_children(cur))


def _filter(expr: str, current: Any) -> bool:
    toks: list[tuple[str, str]] = []
    pos = 0
    while pos < len(expr.rstrip()):
        m = _FILTER_TOKEN.match(expr, pos)
        if m is None or m.end() == pos:
            raise ExprError(f"jsonpath: cannot read filter {expr[:60]!r}")
        pos = m.end()
        toks.append((m.lastgroup or "", m.group(m.lastgroup or "")))
    toks.append(("end", ""))
    reader = _FilterReader(toks, current)
    value = reader.or_()
    if reader.toks[reader.i][0] != "end":
        raise ExprError(f"jsonpath: cannot read filter {expr[:60]!r}")
    return bool(value) and value is not _MISSING


_MISSING = object()


class _FilterReader:
    def __init__(self, toks: list[tuple[str, str]], current: Any) -> None:
        self.toks, self.i, self.current = toks, 0, current

    def take(self) -> tuple[str, str]:
        tok = self.toks[self.i]
        self.i += tok[0] != "end"
        return tok

    def or_(self) -> Any:
        v = self.and_()
        while self.toks[self.i] == ("op", "||"):
            self.take()
            r = self.and_()
            v = _truthy(v) or _truthy(r)
        return v

    def and_(self) -> Any:
        v = self.cmp()
        while self.toks[self.i] == ("op", "&&"):
            self.take()
            r = self.cmp()
            v = _truthy(v) and _truthy(r)
        return v

    def cmp(self) -> Any:
        left = self.atom()
        kind, op = self.toks[self.i]
        if kind == "op" and op in ("==", "!=", "<", ">", "<=", ">="):
            self.take()
            return _compare(op, left, self.atom())
        return left

    def atom(self) -> Any:
        kind, val = self.take()
        if (kind, val) == ("op", "("):
            v = self.or_()
            if self.take() != ("op", ")"):
                raise ExprError("jsonpath: missing ) in filter")
            return v
        if (kind, val) == ("op", "!"):
            return not _truthy(self.atom())
        if kind == "str":
            return val[1:-1]
        if kind == "num":
            return float(val) if "." in val else int(val)
        if kind == "lit":
            return {"true": True, "false": False, "null": None}[val]
        if kind == "ref":
            return _ref(val, self.current)
        raise ExprError(f"jsonpath: unexpected {val!r} in filter")


def _ref(ref: str, current: Any) -> Any:
    v = current
    for part in re.findall(r"\.([\w$-]+)|\[(\d+)\]|\['([^']*)'\]", ref):
        key = part[0] or part[2]
        if key:
            if not isinstance(v, dict) or key not in v:
                return _MISSING
            v = v[key]
        else:
            n = int(part[1])
            if not isinstance(v, list) or n >= len(v):
                return _MISSING
            v = v[n]
    return v


def _truthy(v: Any) -> bool:
    return v is not _MISSING and bool(v)


def _compare(op: str, a: Any, b: Any) -> bool:
    if a is _MISSING or b is _MISSING:
        return False
    numeric = all(isinstance(x, int | float) and not isinstance(x, bool) for x in (a, b))
    if op == "==":
        return bool(a == b) if numeric or type(a) is type(b) else False
    if op == "!=":
        return not (bool(a == b) if numeric or type(a) is type(b) else False)
    if not numeric and not (isinstance(a, str) and isinstance(b, str)):
        return False
    return bool({"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op])
