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
    if len(tokens) > MAX_DEPENDS_TOKENS:
        raise DependsSyntaxError(f"expression has more than {MAX_DEPENDS_TOKENS} tokens")
    return _DependsParser(tokens).parse()


class _DependsParser:
    """Recursive descent over the tokens: ``||`` binds loosest, then ``&&``, then ``!``."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.depth = 0

    def parse(self) -> DependsExpr:
        tree = self.parse_or()
        if self.pos != len(self.tokens):
            raise DependsSyntaxError(f"unexpected {self.tokens[self.pos]!r}")
        return tree

    def nest(self, delta: int) -> None:
        self.depth += delta
        if self.depth > MAX_DEPENDS_DEPTH:
            raise DependsSyntaxError(f"nested deeper than {MAX_DEPENDS_DEPTH} levels")

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        tok = self.tokens[self.pos]
        self.pos += 1
        return tok

    def parse_or(self) -> DependsExpr:
        args = [self.parse_and()]
        while self.peek() == "||":
            self.take()
            args.append(self.parse_and())
        return args[0] if len(args) == 1 else DependsExpr("or", args=tuple(args))

    def parse_and(self) -> DependsExpr:
        args = [self.parse_not()]
        while self.peek() == "&&":
            self.take()
            args.append(self.parse_not())
        return args[0] if len(args) == 1 else DependsExpr("and", args=tuple(args))

    def parse_not(self) -> DependsExpr:
        tok = self.peek()
        if tok is None:
            raise DependsSyntaxError("expression ends too early")
        if tok == "!":
            self.take()
            self.nest(1)
            negated = self.parse_not()
            self.nest(-1)
            return DependsExpr("not", args=(negated,))
        if tok == "(":
            self.take()
            self.nest(1)
            inner = self.parse_or()
            self.nest(-1)
            if self.peek() != ")":
                raise DependsSyntaxError("missing ')'")
            self.take()
            return inner
        if tok in ("&&", "||", ")"):
            raise DependsSyntaxError(f"unexpected {tok!r}")
        self.take()
        name, _, result = tok.partition(".")
        if result and result not in TASK_RESULTS:
            raise DependsSyntaxError(
                f"unknown task result {result!r}; use one of {', '.join(TASK_RESULTS)}"
            )
        return DependsExpr("name", task=name, result=result or None)


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
