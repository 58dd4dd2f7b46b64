"""Argo's ``depends`` expressions: the one reader of them in the project.

``parse_depends`` gives the expression's tree (``DependsExpr``), which the manifests evaluate
against upstream phases; ``depends_tasks`` gives the task names it refers to, from which the
parser takes a task's upstream and the run page draws its edges. Nothing else tokenises
``depends``, so every reader agrees on what an expression means.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

TASK_RESULTS = (
    "Succeeded",
    "Failed",
    "Errored",
    "Skipped",
    "Omitted",
    "Daemoned",
    "AnySucceeded",
    "AllFailed",
)

# Nesting of parentheses and "!": far beyond any real expression, far below Python's recursion
# limit (the parser and the evaluators recurse once per level).
MAX_DEPENDS_DEPTH = 32
MAX_DEPENDS_TOKENS = 2000

_DEP_TOKEN = re.compile(r"\s*(?:(\&\&|\|\||!|\(|\))|([A-Za-z0-9_][-A-Za-z0-9_]*(?:\.[A-Za-z]+)?))")


@dataclass(frozen=True)
class DependsExpr:
    """A parsed ``depends`` expression: ``op`` is "name", "and", "or" or "not"."""

    op: str
    task: str = ""
    result: str | None = None
    args: tuple[DependsExpr, ...] = ()

    def tasks(self) -> set[str]:
        if self.op == "name":
            return {self.task}
        out: set[str] = set()
        for a in self.args:
            out |= a.tasks()
        return out


class DependsSyntaxError(ValueError):
    pass


def _tokenise_depends(expr: str) -> list[str]:
    tokens: list[str] = []
    pos, end = 0, len(expr.rstrip())
    while pos < end:
        m = _DEP_TOKEN.match(expr, pos)
        if not m:
            raise DependsSyntaxError(
                f"unexpected {expr[pos:].strip()[:20]!r} at character {pos + 1}"
            )
        tokens.append(m.group(1) or m.group(2))
        pos = m.end()
        if len(tokens) > MAX_DEPENDS_TOKENS:
            # Stop reading here: the rest of a huge expression is never looked at.
            raise DependsSyntaxError(f"expression has more than {MAX_DEPENDS_TOKENS} tokens")
    return tokens


@cache
def parse_depends(expr: str) -> DependsExpr:
    """Parse Argo's ``depends`` grammar: names, ``name.Result``, ``&&``, ``||``, ``!``, parens."""
    tokens = _tokenise_depends(expr)
    if not tokens:
        raise DependsSyntaxError("empty expression")
    pos = 0
    depth = 0

    def nest(delta: int) -> None:
        nonlocal depth
        depth += delta
        if depth > MAX_DEPENDS_DEPTH:
            raise DependsSyntaxError(f"nested deeper than {MAX_DEPENDS_DEPTH} levels")

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        return tok

    def parse_or() -> DependsExpr:
        args = [parse_and()]
        while peek() == "||":
            take()
            args.append(parse_and())
        return args[0] if len(args) == 1 else DependsExpr("or", args=tuple(args))

    def parse_and() -> DependsExpr:
        args = [parse_not()]
        while peek() == "&&":
            take()
            args.append(parse_not())
        return args[0] if len(args) == 1 else DependsExpr("and", args=tuple(args))

    def parse_not() -> DependsExpr:
        tok = peek()
        if tok is None:
            raise DependsSyntaxError("expression ends too early")
        if tok == "!":
            take()
            nest(1)
            negated = parse_not()
            nest(-1)
            return DependsExpr("not", args=(negated,))
        if tok == "(":
            take()
            nest(1)
            inner = parse_or()
            nest(-1)
            if peek() != ")":
                raise DependsSyntaxError("missing ')'")
            take()
            return inner
        if tok in ("&&", "||", ")"):
            raise DependsSyntaxError(f"unexpected {tok!r}")
        take()
        name, _, result = tok.partition(".")
        if result and result not in TASK_RESULTS:
            raise DependsSyntaxError(
                f"unknown task result {result!r}; use one of {', '.join(TASK_RESULTS)}"
            )
        return DependsExpr("name", task=name, result=result or None)

    if len(tokens) > MAX_DEPENDS_TOKENS:
        raise DependsSyntaxError(f"expression has more than {MAX_DEPENDS_TOKENS} tokens")
    tree = parse_or()
    if pos != len(tokens):
        raise DependsSyntaxError(f"unexpected {tokens[pos]!r}")
    return tree


@cache
def depends_tasks(expr: str) -> tuple[str, ...]:
    """The task names a ``depends`` expression refers to, each once, in the order they first
    appear. Raises ``DependsSyntaxError`` for what ``parse_depends`` refuses."""
    out: dict[str, None] = {}
    stack = [parse_depends(expr)]
    while stack:
        node = stack.pop()
        if node.op == "name":
            out.setdefault(node.task)
        else:
            stack.extend(reversed(node.args))
    return tuple(out)
