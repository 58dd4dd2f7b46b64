"""Helpers of the Argo-like engine: variables, durations, requests and the govaluate-ish
evaluator for `when` and `depends`."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from typing import Any

from sandbox import quantity
from sandbox.store import Obj

LEAF_KINDS = ("container", "script", "resource", "containerSet", "data", "http", "plugin")
# Bounds runaway recursion (e.g. coinflip-recursive with a result that never changes).
MAX_NODE_NAME = 2000
DONE = ("Succeeded", "Failed", "Error", "Skipped", "Omitted")
FAILED = ("Failed", "Error")
VAR_RE = re.compile(r"\{\{\s*([^{}=][^{}]*?)\s*\}\}")
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


# -- small helpers -------------------------------------------------------------------------
def parse_duration(value: Any, default: float) -> float:
    if value is None or value == "":
        return default
    if isinstance(value, int | float):
        return float(value)
    total = 0.0
    matched = False
    for num, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)?", str(value)):
        matched = True
        total += float(num) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "": 1}[unit]
    return total if matched else default


@functools.lru_cache(maxsize=65536)
def fnv32a(text: str) -> int:
    """FNV-1a, 32 bits, of the UTF-8 bytes (Go's hash/fnv ``New32a``), as names are hashed
    upstream. Cached: a Work's name is hashed from its Workflow's on every reconcile pass."""
    h = 0x811C9DC5
    for b in text.encode():
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def as_param(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def render(value: Any, scope: dict[str, Any]) -> Any:
    """Substitute the {{...}} variables that scope knows; leave the rest for a later pass,
    as Argo resolves step outputs only once those steps have run."""
    if isinstance(value, str):
        if "{{" not in value:
            return value

        def sub(m: re.Match[str]) -> str:
            key = m.group(1).strip()
            # None: a skipped step's absent output, which only an expression's `??` can read.
            if key in scope and scope[key] is not None and not isinstance(scope[key], dict):
                return as_param(scope[key])
            return m.group(0)

        return VAR_RE.sub(sub, value)
    if isinstance(value, dict):
        return {k: render(v, scope) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v, scope) for v in value]
    return value


def template_requests(tmpl: dict[str, Any]) -> dict[str, float]:
    req: dict[str, float] = {}
    containers = []
    for kind in ("container", "script"):
        if isinstance(tmpl.get(kind), dict):
            containers.append(tmpl[kind])
    if isinstance(tmpl.get("containerSet"), dict):
        containers.extend(tmpl["containerSet"].get("containers") or [])
    for c in containers:
        res = c.get("resources") or {}
        amounts = quantity.parse_map(res.get("requests") or res.get("limits"))
        for k, v in amounts.items():
            req[k] = req.get(k, 0.0) + v
    return req


def workflow_requests(wf: Obj) -> dict[str, float]:
    """What the largest single leaf of a workflow needs: a cluster without that much free
    cannot run it, which is what the scheduler's fit check is about."""
    out: dict[str, float] = {}
    for tmpl in (wf.get("spec") or {}).get("templates") or []:
        if any(k in tmpl for k in LEAF_KINDS):
            for k, v in template_requests(tmpl).items():
                out[k] = max(out.get(k, 0.0), v)
    return out


# -- a govaluate-ish expression evaluator for `when` and `depends` ---------------------------
_TOKEN_RE = re.compile(
    r"\s*(?:(?P<str>'[^']*'|\"[^\"]*\")|(?P<op>==|!=|<=|>=|=~|!~|&&|\|\||[<>!(),])"
    r"|(?P<word>[^\s()=!<>&|,]+))"
)


class ExprError(ValueError):
    pass


def tokens_of(expr: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(expr):
        m = _TOKEN_RE.match(expr, pos)
        if not m or m.end() == pos:
            raise ExprError(f"cannot parse {expr!r}")
        pos = m.end()
        kind = m.lastgroup or ""
        tokens.append((kind, m.group(kind)))
    return tokens


class Parser:
    """govaluate's grammar as `when` and `depends` use it, evaluated as it is parsed:
    `||` over `&&` over `!` over comparisons (and `in (...)`) over atoms."""

    def __init__(self, tokens: list[tuple[str, str]], word: Callable[[str], Any] | None) -> None:
        self._it = iter([*tokens, ("end", "")])
        self._cur = next(self._it)
        self.word = word

    def peek(self) -> tuple[str, str]:
        return self._cur

    def take(self) -> tuple[str, str]:
        tok = self._cur
        self._cur = next(self._it)
        return tok

    def atom(self) -> Any:
        kind, val = self.take()
        if kind == "op" and val == "(":
            v = self.or_()
            if self.take() != ("op", ")"):
                raise ExprError("missing )")
            return v
        if kind == "op" and val == "!":
            return not truthy(self.atom())
        if kind == "str":
            return val[1:-1]
        if kind == "word":
            if self.word is not None:
                return self.word(val)
            return literal(val)
        raise ExprError(f"unexpected {val!r}")

    def cmp(self) -> Any:
        left = self.atom()
        kind, val = self.peek()
        if kind == "op" and val in ("==", "!=", "<", ">", "<=", ">=", "=~", "!~"):
            self.take()
            return compare(left, val, self.atom())
        if (kind, val) == ("word", "in"):
            # govaluate's IN: `x in (a, b)` is true when x equals one of the list's values
            self.take()
            return any(compare(left, "==", item) for item in self.in_list())
        return left

    def in_list(self) -> list[Any]:
        if self.take() != ("op", "("):
            raise ExprError("'in' needs a parenthesised list")
        items = [self.atom()]
        while self.peek() == ("op", ","):
            self.take()
            items.append(self.atom())
        if self.take() != ("op", ")"):
            raise ExprError("missing )")
        return items

    def not_(self) -> Any:
        if self.peek() == ("op", "!"):
            self.take()
            return not truthy(self.not_())
        return self.cmp()

    def and_(self) -> Any:
        v = self.not_()
        while self.peek() == ("op", "&&"):
            self.take()
            rhs = self.not_()
            v = truthy(v) and truthy(rhs)
        return v

    def or_(self) -> Any:
        v = self.and_()
        while self.peek() == ("op", "||"):
            self.take()
            rhs = self.and_()
            v = truthy(v) or truthy(rhs)
        return v


def evaluate(expr: str, word: Callable[[str], Any] | None = None) -> bool:
    expr = expr.strip()
    parser = Parser(tokens_of(expr), word)
    result = parser.or_()
    if parser.peek()[0] != "end":
        raise ExprError(f"trailing tokens in {expr!r}")
    return truthy(result)


def literal(val: str) -> Any:
    if val in ("true", "false"):
        return val == "true"
    try:
        return float(val)
    except ValueError:
        return val


def truthy(v: Any) -> bool:
    if isinstance(v, str):
        return v not in ("", "false")
    return bool(v)


def compare(a: Any, op: str, b: Any) -> bool:
    if op in ("=~", "!~"):
        found = re.search(str(b), as_param(a)) is not None
        return found if op == "=~" else not found
    if (
        isinstance(a, float | int)
        and isinstance(b, float | int)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
    ):
        x: Any = a
        y: Any = b
    else:
        x, y = as_param(a), as_param(b)
    if op == "==":
        return bool(x == y)
    if op == "!=":
        return bool(x != y)
    if op == "<":
        return bool(x < y)
    if op == ">":
        return bool(x > y)
    if op == "<=":
        return bool(x <= y)
    return bool(x >= y)


def literal_json(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


# The template-type fields of a Template (wfv1.TemplateType); a default of another type than
# the template's is not applied.
TEMPLATE_TYPES = (
    "container",
    "containerSet",
    "script",
    "resource",
    "dag",
    "suspend",
    "data",
    "http",
    "plugin",
)


def with_defaults(tmpl: dict[str, Any], defaults: dict[str, Any] | None) -> dict[str, Any]:
    """`spec.templateDefaults` merged under a template (`mergedTemplateDefaultsInto` in
    workflow/controller/operator.go: defaults of another template type dropped, then the
    template merged over them, maps key by key, the template's value winning)."""
    if not isinstance(defaults, dict) or not defaults:
        return tmpl
    own = next((k for k in TEMPLATE_TYPES if k in tmpl), None)
    applicable = {k: v for k, v in defaults.items() if k not in TEMPLATE_TYPES or k == own}
    merged: dict[str, Any] = _merge(applicable, tmpl)
    return merged


def _merge(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _merge(base[k], v) if k in base else v
        return out
    return over
