"""Argo's ``{{= expr}}`` expression tags (expr-lang), evaluated by the portal where it fills a
template itself: ``when``, arguments and ``withParam`` of the units it builds.

Pure and bounded: at most ``MAX_EXPR_CHARS`` of text, ``MAX_EXPR_TOKENS``
tokens, ``MAX_EXPR_DEPTH`` levels of nesting, ``MAX_STEPS`` evaluation steps, values of at
most ``MAX_VALUE_CHARS`` characters or ``MAX_ITEMS`` items, and ``matches`` through RE2. Every
failure is an ``ExprError`` with the reason.

The environment follows Argo's ``util/template/expression_template.go`` and
``util/expr/env/env.go``: the scope's dotted names (``workflow.parameters.x``,
``tasks.a.outputs.result``...) become nested maps (``expand.Expand``, the less specific key
dropped on a conflict), plus the builtins. A tag that names a variable the scope does not hold
is left as it is, as Argo leaves it for a later pass (``allowUnresolved``), unless the name is
under ``??`` or ``?.`` (Argo's ``guardVisitor``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping
from typing import Any

from placement.expression.evaluate import MAX_ITEMS, MAX_STEPS, MAX_VALUE_CHARS, Evaluator
from placement.expression.functions import BUILTINS, SPRIG, go_json
from placement.expression.regex import compile_regex
from placement.expression.syntax import (
    MAX_EXPR_CHARS,
    MAX_EXPR_DEPTH,
    MAX_EXPR_TOKENS,
    ExprError,
    Node,
    parse,
)

__all__ = [
    "EXPRESSION_TAG",
    "MAX_EXPR_CHARS",
    "MAX_EXPR_DEPTH",
    "MAX_EXPR_TOKENS",
    "MAX_ITEMS",
    "MAX_STEPS",
    "MAX_VALUE_CHARS",
    "ExprError",
    "evaluate",
    "expand_scope",
    "fill_expressions",
    "has_expression",
    "missing_variables",
    "parse",
    "render",
]

# Argo's template lexer ends a tag at the first "}}".
EXPRESSION_TAG = re.compile(r"\{\{=(.*?)\}\}", re.DOTALL)


def has_expression(text: str | None) -> bool:
    return bool(text) and "{{=" in str(text)


def expand_scope(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Argo's ``expand.Expand``: ``{"a.b": 1, "a.c": 2}`` → ``{"a": {"b": 1, "c": 2}}``; a key
    that is the prefix of another (``workflow.parameters`` beside ``workflow.parameters.x``)
    is dropped."""
    keys = sorted(flat)
    dropped = {k for k, nxt in itertools.pairwise(keys) if nxt.startswith(k + ".")}
    env: dict[str, Any] = {}
    for k in keys:
        if k in dropped:
            continue
        parts = k.split(".")
        node = env
        for p in parts[:-1]:
            child = node.get(p)
            if not isinstance(child, dict):
                child = node[p] = {}
            node = child
        node[parts[-1]] = flat[k]
    return env


def _environment(scope: Mapping[str, Any]) -> dict[str, Any]:
    env = expand_scope(scope)
    env.setdefault("sprig", dict(SPRIG))
    return env


def evaluate(text: str, scope: Mapping[str, Any]) -> Any:
    """The value of one expression (the text between ``{{=`` and ``}}``) over ``scope``'s
    dotted variables."""
    return _run(parse(text.strip()), _environment(scope))


def _run(tree: Node, env: Mapping[str, Any]) -> Any:
    try:
        return Evaluator(env, BUILTINS, compile_regex).run(tree)
    except RecursionError:
        raise ExprError(f"expression nests deeper than {MAX_EXPR_DEPTH} levels") from None


def render(value: Any) -> str:
    """A result as Argo writes it into a template: JSON, a string without its quotes."""
    if isinstance(value, str):
        return value
    return go_json(value)


def _paths(node: Node, guarded: bool, out: dict[str, bool]) -> None:
    """Dotted variable paths the tree reads; the flag says whether a ``??``/``?.`` guards it."""
    if node.kind == "id":
        out.setdefault(str(node.value), guarded)
        return
    if node.kind == "member":
        path = _member_path(node)
        if path is not None:
            out[path] = out.get(path, True) and (guarded or node.optional)
            return
    if node.kind == "bin" and node.value == "??":
        _paths(node.args[0], True, out)
        _paths(node.args[1], guarded, out)
        return
    if node.kind == "call" and node.args[0].kind == "id":
        for a in node.args[1:]:
            _paths(a, guarded, out)
        return
    for a in node.args:
        _paths(a, guarded, out)


def _member_path(node: Node) -> str | None:
    parts: list[str] = []
    cur = node
    while cur.kind == "member":
        prop = cur.args[1]
        if prop.kind != "lit" or not isinstance(prop.value, str):
            return None
        parts.append(prop.value)
        cur = cur.args[0]
    if cur.kind != "id":
        return None
    return ".".join([str(cur.value), *reversed(parts)])


def _has(env: Mapping[str, Any], path: str) -> bool:
    cur: Any = env
    for p in path.split("."):
        if not isinstance(cur, Mapping) or p not in cur:
            return False
        cur = cur[p]
    return True


def missing_variables(text: str, scope: Mapping[str, Any]) -> list[str]:
    """The unguarded variables an expression reads that ``scope`` does not hold (builtins and
    the predicate's ``#`` are not variables)."""
    return _missing(parse(text.strip()), _environment(scope))


def _missing(tree: Node, env: Mapping[str, Any]) -> list[str]:
    found: dict[str, bool] = {}
    _paths(tree, False, found)
    return [
        p
        for p, guarded in found.items()
        if not guarded and not _has(env, p) and p.split(".")[0] not in BUILTINS
    ]


def fill_expressions(
    text: str,
    scope: Mapping[str, Any],
    *,
    unresolved: Callable[[str, list[str]], None] | None = None,
) -> str:
    """``text`` with each ``{{= expr}}`` tag replaced by its rendered value. A tag that reads a
    variable ``scope`` does not hold stays as it is (``unresolved`` is told which); a tag that
    cannot be read or evaluated raises ``ExprError`` naming it."""
    if "{{=" not in text:
        return text
    env = _environment(scope)

    def one(m: re.Match[str]) -> str:
        source = m.group(1)
        try:
            tree = parse(source.strip())
            missing = _missing(tree, env)
            if missing:
                if unresolved is not None:
                    unresolved(source.strip(), missing)
                return m.group(0)
            return render(_run(tree, env))
        except ExprError as exc:
            raise ExprError(f"{{{{={source.strip()[:80]}}}}}: {exc}") from None

    return EXPRESSION_TAG.sub(one, text)
