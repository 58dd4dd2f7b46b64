"""Argo's ``when`` grammar (the govaluate subset the portal evaluates), bounded.

The one reader of ``when``: ``parse_when`` gives the expression's tree, which
``placement.manifests.evaluate_when`` evaluates after substitution, and ``when_problem`` checks
a ``when`` as submitted (its ``{{...}}`` references not filled yet). Everything here is bounded:
the text's length, the number of tokens, the nesting of parentheses and ``!``, the length of a
regular expression; regular expressions are RE2's (linear time, and the syntax Go's ``regexp``
takes, which govaluate uses), so no operand can make a match run for ever.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from placement.expression import regex as expression_regex
from placement.expression.syntax import ExprError

# Bounds of one expression after substitution: room for realistic outputs, none for a bomb.
MAX_WHEN_CHARS = 64 * 1024
MAX_WHEN_TOKENS = 1000
MAX_WHEN_DEPTH = 32
# RE2 gives up (an error, not a hang) when a pattern's automaton needs more than its budget.
MAX_REGEX_CHARS = expression_regex.MAX_REGEX_CHARS

COMPARISONS = ("==", "!=", "<", ">", "<=", ">=", "=~", "!~")


class WhenSyntaxError(ValueError):
    """A ``when`` that cannot be read, or that is beyond the bounds above."""


@dataclass(frozen=True)
class WhenExpr:
    """A parsed ``when``: ``op`` is "value", "not", "and", "or" or a comparison operator."""

    op: str
    value: Any = None
    args: tuple[WhenExpr, ...] = ()


_WHEN_TOKEN = re.compile(
    r"\s*(?:(?P<op>==|!=|>=|<=|=~|!~|&&|\|\||[<>!(),])"
    r"|(?P<str>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
    r"|(?P<num>[+-]?\d+(?:\.\d+)?(?![\w.\-/:]))"
    r"|(?P<word>[^\s()=!<>&|,'\"]+))",
    re.DOTALL,
)
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)


def _unquote(literal: str) -> str:
    # govaluate's lexer: a backslash takes the next character literally ('\'' is a quote, '\x'
    # is x). Never Python's unicode_escape, which fails on '\x' and mangles non-ASCII text.
    return _ESCAPE.sub(lambda m: m.group(1), literal[1:-1])


def _tokens(text: str) -> list[tuple[str, Any]]:
    if len(text) > MAX_WHEN_CHARS:
        raise WhenSyntaxError(
            f"expression is {len(text)} characters long; the limit is {MAX_WHEN_CHARS}"
        )
    tokens: list[tuple[str, Any]] = []
    pos, end = 0, len(text.rstrip())
    while pos < end:
        m = _WHEN_TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise WhenSyntaxError(f"cannot read {text[pos:].strip()[:20]!r}")
        pos = m.end()
        if len(tokens) >= MAX_WHEN_TOKENS:
            raise WhenSyntaxError(f"expression has more than {MAX_WHEN_TOKENS} tokens")
        if m.group("op"):
            tokens.append(("op", m.group("op")))
        elif m.group("str") is not None:
            tokens.append(("val", _unquote(m.group("str"))))
        elif m.group("num") is not None:
            tokens.append(("val", float(m.group("num"))))
        else:
            word = m.group("word")
            tokens.append(("val", {"true": True, "false": False}.get(word, word)))
    return tokens


def parse_when(text: str) -> WhenExpr:
    """The tree of a substituted ``when``: ``==``, ``!=``, ``<``, ``>``, ``<=``, ``>=``,
    ``=~``, ``!~``, ``in (a, b)``, ``&&``, ``||``, ``!``, parentheses, quoted strings, numbers,
    ``true``/``false`` and bare words as strings. Raises ``WhenSyntaxError``."""
    return _WhenParser(_tokens(text)).parse()


class _WhenParser:
    # Recursive descent; the nesting bound keeps it far from Python's recursion limit.
    def __init__(self, tokens: list[tuple[str, Any]]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.depth = 0

    def parse(self) -> WhenExpr:
        if not self.tokens:
            raise WhenSyntaxError("empty expression")
        tree = self.or_()
        if self.pos != len(self.tokens):
            raise WhenSyntaxError(f"unexpected {self.tokens[self.pos][1]!r}")
        return tree

    def peek(self) -> str | None:
        if self.pos < len(self.tokens) and self.tokens[self.pos][0] == "op":
            return str(self.tokens[self.pos][1])
        return None

    def or_(self) -> WhenExpr:
        args = [self.and_()]
        while self.peek() == "||":
            self.pos += 1
            args.append(self.and_())
        return args[0] if len(args) == 1 else WhenExpr("or", args=tuple(args))

    def and_(self) -> WhenExpr:
        args = [self.cmp()]
        while self.peek() == "&&":
            self.pos += 1
            args.append(self.cmp())
        return args[0] if len(args) == 1 else WhenExpr("and", args=tuple(args))

    def cmp(self) -> WhenExpr:
        left = self.unary()
        op = self.peek()
        if op in COMPARISONS:
            self.pos += 1
            right = self.unary()
            if op in ("=~", "!~") and right.op == "value":
                compile_regex(right.value)  # a literal pattern is checked when it is read
            return WhenExpr(op, args=(left, right))
        if self.pos < len(self.tokens) and self.tokens[self.pos] == ("val", "in"):
            # govaluate's IN: `x in (a, b)`, true when x equals one of the list's values
            self.pos += 1
            if self.peek() != "(":
                raise WhenSyntaxError("'in' needs a parenthesised list")
            self.pos += 1
            items = [self.unary()]
            while self.peek() == ",":
                self.pos += 1
                items.append(self.unary())
            if self.peek() != ")":
                raise WhenSyntaxError("missing ')'")
            self.pos += 1
            return WhenExpr("in", args=(left, *items))
        return left

    def nest(self) -> None:
        self.depth += 1
        if self.depth > MAX_WHEN_DEPTH:
            raise WhenSyntaxError(f"nested deeper than {MAX_WHEN_DEPTH} levels")

    def unary(self) -> WhenExpr:
        if self.pos >= len(self.tokens):
            raise WhenSyntaxError("expression ends too early")
        kind, value = self.tokens[self.pos]
        if kind == "op" and value == "!":
            self.pos += 1
            self.nest()
            inner = self.unary()
            self.depth -= 1
            return WhenExpr("not", args=(inner,))
        if kind == "op" and value == "(":
            self.pos += 1
            self.nest()
            tree = self.or_()
            self.depth -= 1
            if self.peek() != ")":
                raise WhenSyntaxError("missing ')'")
            self.pos += 1
            return tree
        if kind == "op":
            raise WhenSyntaxError(f"unexpected {value!r}")
        self.pos += 1
        return WhenExpr("value", value=value)


def compile_regex(pattern: Any) -> Any:
    """An RE2 pattern (Go's ``regexp`` syntax, as govaluate's ``=~``). Raises
    ``WhenSyntaxError`` when it is too long, invalid or too large to match in bounded memory."""
    try:
        return expression_regex.compile_regex(pattern)
    except ExprError as exc:
        raise WhenSyntaxError(str(exc)) from None


# A reference the portal or Argo fills later; for the check at submission it stands for a word.
_REFERENCE = re.compile(r"\{\{.*?\}\}", re.DOTALL)
_PLACEHOLDER = "portal-reference"


def when_problem(expr: str) -> str | None:
    """Why a ``when`` as submitted cannot be evaluated, or None. References (``{{...}}``) stand
    for a word, so the check is on the expression's shape, its literal regular expressions and
    the bounds; what the references bring is checked again when the unit is about to run."""
    if len(expr) > MAX_WHEN_CHARS:
        return f"expression is {len(expr)} characters long; the limit is {MAX_WHEN_CHARS}"
    try:
        tree = parse_when(_REFERENCE.sub(_PLACEHOLDER, expr))
    except WhenSyntaxError as exc:
        return str(exc)
    del tree
    return None
