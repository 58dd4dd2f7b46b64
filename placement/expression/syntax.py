"""The expr-lang grammar Argo's ``{{= ...}}`` tags use (``github.com/expr-lang/expr``), read
into a small tree, bounded.

Operators and their precedence follow expr-lang's ``parser/operator`` table: ``??`` binds
tightest of the binary operators, then ``**``/``^`` (right-associative), ``*``/``/``/``%``,
``+``/``-``, ``..``, the comparisons and word operators (``in``, ``matches``, ``contains``,
``startsWith``, ``endsWith``), ``and``/``&&``, ``or``/``||``; ``?:`` is lowest. Bounds: the
text's length, the number of tokens and the nesting depth, so no input makes the reader slow
or deep.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

MAX_EXPR_CHARS = 64 * 1024
MAX_EXPR_TOKENS = 2000
MAX_EXPR_DEPTH = 32


class ExprError(ValueError):
    """An expression that cannot be read or evaluated, or that goes beyond the bounds."""


@dataclass(frozen=True)
class Node:
    """``kind`` is one of lit, id, pointer, member, call, bin, un, cond, arr, map, closure."""

    kind: str
    value: Any = None
    args: tuple[Node, ...] = ()
    optional: bool = False


_TOKEN = re.compile(
    r"\s*(?:"
    r"(?P<comment>/\*.*?\*/|//[^\n]*)"
    r"|(?P<num>0[xX][0-9a-fA-F_]+|(?:\d[\d_]*)?\.?\d[\d_]*(?:[eE][+-]?\d+)?)"
    r"|(?P<str>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|`[^`]*`)"
    r"|(?P<name>[A-Za-z_$][\w$]*)"
    r"|(?P<op>\?\?|\?\.|\.\.|==|!=|<=|>=|&&|\|\||\*\*|[-+*/%^<>!?:.,()\[\]{}#|=;])"
    r")",
    re.DOTALL,
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "0": "\0"}
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|.)", re.DOTALL)
_WORD_OPS = frozenset({"and", "or", "not", "in", "matches", "contains", "startsWith", "endsWith"})
# Binary operators: (precedence, right-associative).
_BINARY = {
    "or": (10, False),
    "||": (10, False),
    "and": (15, False),
    "&&": (15, False),
    "==": (20, False),
    "!=": (20, False),
    "<": (20, False),
    ">": (20, False),
    "<=": (20, False),
    ">=": (20, False),
    "in": (20, False),
    "not in": (20, False),
    "matches": (20, False),
    "contains": (20, False),
    "startsWith": (20, False),
    "endsWith": (20, False),
    "..": (25, False),
    "+": (30, False),
    "-": (30, False),
    "*": (60, False),
    "/": (60, False),
    "%": (60, False),
    "**": (100, True),
    "^": (100, True),
    "??": (500, False),
}
# `a not matches b` is `not (a matches b)`, likewise for the other word operators.
_NEGATED = frozenset({"matches", "contains", "startsWith", "endsWith"})
_ALIASES = {"and": "&&", "or": "||", "^": "**"}
_UNARY_PRECEDENCE = {"not": 50, "!": 50, "-": 90, "+": 90}
# Builtins whose second argument is a predicate (``#`` is the element).
PREDICATE_BUILTINS = frozenset(
    {
        "all",
        "any",
        "none",
        "one",
        "filter",
        "map",
        "count",
        "find",
        "findIndex",
        "findLast",
        "findLastIndex",
        "sum",
    }
)


def _unquote(text: str) -> str:
    if text[0] == "`":
        return text[1:-1]

    def one(m: re.Match[str]) -> str:
        e = m.group(1)
        if e[0] in "ux" and len(e) > 1:
            return chr(int(e[1:], 16))
        if e in _ESCAPES:
            return _ESCAPES[e]
        raise ExprError(f"invalid escape \\{e} in string")

    return _ESCAPE.sub(one, text[1:-1])


def tokens(text: str) -> list[tuple[str, Any]]:
    if len(text) > MAX_EXPR_CHARS:
        raise ExprError(f"expression is {len(text)} characters; the limit is {MAX_EXPR_CHARS}")
    out: list[tuple[str, Any]] = []
    pos, end = 0, len(text.rstrip())
    while pos < end:
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ExprError(f"unexpected character {text[pos:].lstrip()[:1]!r}")
        pos = m.end()
        kind = m.lastgroup or ""
        raw = m.group(kind)
        if kind == "comment":
            continue
        if kind == "num":
            out.append(("lit", _number(raw)))
        elif kind == "str":
            out.append(("lit", _unquote(raw)))
        elif kind == "name" and raw in _WORD_OPS:
            out.append(("op", raw))
        elif kind == "name" and raw in ("true", "false", "nil"):
            out.append(("lit", {"true": True, "false": False, "nil": None}[raw]))
        else:
            out.append((kind, raw))
        if len(out) > MAX_EXPR_TOKENS:
            raise ExprError(f"expression has more than {MAX_EXPR_TOKENS} tokens")
    out.append(("end", ""))
    return out


def _number(raw: str) -> int | float:
    clean = raw.replace("_", "")
    if clean[:2].lower() == "0x":
        return int(clean, 16)
    if re.fullmatch(r"\d+", clean):
        return int(clean)
    return float(clean)


class _Reader:
    def __init__(self, toks: list[tuple[str, Any]]) -> None:
        self.toks = toks
        self.i = 0
        self.depth = 0

    def peek(self, ahead: int = 0) -> tuple[str, Any]:
        return self.toks[min(self.i + ahead, len(self.toks) - 1)]

    def take(self) -> tuple[str, Any]:
        tok = self.toks[self.i]
        if tok[0] != "end":
            self.i += 1
        return tok

    def expect(self, value: str) -> None:
        tok = self.take()
        if tok != ("op", value):
            raise ExprError(f"expected {value!r}, found {_show(tok)}")

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_EXPR_DEPTH:
            raise ExprError(f"expression nests deeper than {MAX_EXPR_DEPTH} levels")

    def expression(self) -> Node:
        self.enter()
        try:
            if self.peek() == ("name", "let") and self.peek(2) == ("op", "="):
                return self.let()
            cond = self.binary(0)
            # expr's pipe (parser.go parsePipe): `x | f(a)` is `f(x, a)`
            while self.peek() == ("op", "|"):
                self.take()
                kind, name = self.take()
                if kind != "name":
                    raise ExprError(f"a function expected after '|', found {_show((kind, name))}")
                cond = self.call(Node("id", name), name, first=cond)
            if self.peek() == ("op", "?"):
                self.take()
                yes = self.expression()
                self.expect(":")
                no = self.expression()
                return Node("cond", args=(cond, yes, no))
            return cond
        finally:
            self.depth -= 1

    def let(self) -> Node:
        """expr's variable declaration (parser.go parseVariableDeclaration):
        ``let name = value; body``, the name bound in the body only."""
        self.take()
        kind, name = self.take()
        if kind != "name":
            raise ExprError(f"a name expected after 'let', found {_show((kind, name))}")
        self.expect("=")
        value = self.expression()
        self.expect(";")
        return Node("let", name, (value, self.expression()))

    def _binary_op(self) -> str | None:
        kind, val = self.peek()
        if kind != "op":
            return None
        if val == "not" and self.peek(1) == ("op", "in"):
            return "not in"
        if val == "not" and self.peek(1)[0] == "op" and self.peek(1)[1] in _NEGATED:
            return f"not {self.peek(1)[1]}"
        return val if val in _BINARY else None

    def binary(self, min_prec: int) -> Node:
        left = self.unary()
        while True:
            op = self._binary_op()
            if op is None:
                return left
            negated = op.startswith("not ") and op != "not in"
            prec, right_assoc = _BINARY[op[4:] if negated else op]
            if prec < min_prec:
                return left
            self.take()
            if op.startswith("not "):
                self.take()
            self.enter()
            right = self.binary(prec if right_assoc else prec + 1)
            self.depth -= 1
            if negated:
                left = Node("un", "!", (Node("bin", op[4:], (left, right)),))
            else:
                left = Node("bin", _ALIASES.get(op, op), (left, right))

    def unary(self) -> Node:
        kind, val = self.peek()
        if kind == "op" and val in _UNARY_PRECEDENCE:
            self.take()
            self.enter()
            operand = self.binary(_UNARY_PRECEDENCE[val])
            self.depth -= 1
            return Node("un", "!" if val == "not" else val, (operand,))
        return self.postfix(self.primary())

    def primary(self) -> Node:
        kind, val = self.take()
        if kind == "lit":
            return Node("lit", val)
        if kind == "name":
            if self.peek() == ("op", "("):
                return self.call(Node("id", val), val)
            return Node("id", val)
        if (kind, val) == ("op", "#"):
            return Node("pointer")
        if (kind, val) == ("op", "("):
            inner = self.expression()
            self.expect(")")
            return inner
        if (kind, val) == ("op", "["):
            return Node("arr", args=tuple(self.listing("]")))
        if (kind, val) == ("op", "{"):
            return self.map_literal()
        raise ExprError(f"unexpected {_show((kind, val))}")

    def listing(self, close: str) -> list[Node]:
        items: list[Node] = []
        while self.peek() != ("op", close):
            items.append(self.expression())
            if self.peek() != ("op", ","):
                break
            self.take()
        self.expect(close)
        return items

    def map_literal(self) -> Node:
        pairs: list[Node] = []
        while self.peek() != ("op", "}"):
            kind, val = self.take()
            if kind not in ("name", "lit"):
                raise ExprError(f"map key expected, found {_show((kind, val))}")
            self.expect(":")
            pairs += [Node("lit", val), self.expression()]
            if self.peek() != ("op", ","):
                break
            self.take()
        self.expect("}")
        return Node("map", args=tuple(pairs))

    def call(self, callee: Node, name: str | None, first: Node | None = None) -> Node:
        self.expect("(")
        args: list[Node] = [] if first is None else [first]
        while self.peek() != ("op", ")"):
            if name in PREDICATE_BUILTINS and len(args) == 1:
                args.append(self.predicate())
            else:
                args.append(self.expression())
            if self.peek() != ("op", ","):
                break
            self.take()
        self.expect(")")
        return Node("call", args=(callee, *args))

    def predicate(self) -> Node:
        if self.peek() == ("op", "{"):
            self.take()
            body = self.expression()
            self.expect("}")
        else:
            body = self.expression()
        return Node("closure", args=(body,))

    def postfix(self, node: Node) -> Node:
        while True:
            kind, val = self.peek()
            if (kind, val) in (("op", "."), ("op", "?.")):
                self.take()
                nk, name = self.take()
                if nk not in ("name", "op") or (nk == "op" and name not in _WORD_OPS):
                    raise ExprError(f"name expected after '.', found {_show((nk, name))}")
                node = Node("member", args=(node, Node("lit", name)), optional=val == "?.")
                if self.peek() == ("op", "("):
                    node = self.call(node, None)
            elif (kind, val) == ("op", "["):
                self.take()
                node = self.index(node)
            else:
                return node

    def index(self, node: Node) -> Node:
        if self.peek() == ("op", ":"):
            self.take()
            hi = None if self.peek() == ("op", "]") else self.expression()
            self.expect("]")
            return Node("slice", args=(node, Node("lit", None), hi or Node("lit", None)))
        key = self.expression()
        if self.peek() == ("op", ":"):
            self.take()
            hi = None if self.peek() == ("op", "]") else self.expression()
            self.expect("]")
            return Node("slice", args=(node, key, hi or Node("lit", None)))
        self.expect("]")
        return Node("member", args=(node, key))


def _show(tok: tuple[str, Any]) -> str:
    return "the end" if tok[0] == "end" else repr(tok[1])


def parse(text: str) -> Node:
    """The tree of one expression; raises ``ExprError`` (with why) when it cannot be read."""
    reader = _Reader(tokens(text))
    if reader.peek()[0] == "end":
        raise ExprError("empty expression")
    try:
        node = reader.expression()
    except RecursionError:
        raise ExprError(f"expression nests deeper than {MAX_EXPR_DEPTH} levels") from None
    if reader.peek()[0] != "end":
        raise ExprError(f"unexpected {_show(reader.peek())}")
    return node
