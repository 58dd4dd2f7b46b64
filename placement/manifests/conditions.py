"""Whether a unit runs: Argo's ``depends`` over upstream phases, and ``when`` after
substitution. ``depends`` has one reader, ``placement.parser.parse_depends``; this module only
evaluates the expression tree it returns."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from placement.manifests.substitution import TaskOutputs, _as_text, substitute
from placement.parser import DependsExpr, parse_depends

FINAL_PHASES = frozenset({"Succeeded", "Failed", "Error", "Skipped", "Omitted"})


def _group(phases: str | Sequence[str] | None) -> list[str] | None:
    if phases is None:
        return None
    group = [phases] if isinstance(phases, str) else list(phases)
    if not group or any(p not in FINAL_PHASES for p in group):
        return None
    return group


def evaluate_depends(expr: str, phases: Mapping[str, str | Sequence[str] | None]) -> bool | None:
    """Argo's ``depends`` over finished upstream tasks: True (run), False (omit), or None (an
    upstream task is not finished yet). ``phases`` maps task names to a phase, or to the list
    of phases of an expanded task. A bare ``A`` means ``A.Succeeded || A.Skipped || A.Daemoned``;
    an empty expression is True."""
    if not expr.strip():
        return True
    tree = parse_depends(expr.strip())
    groups: dict[str, list[str]] = {}
    for task in tree.tasks():
        g = _group(phases.get(task))
        if g is None:
            return None
        groups[task] = g
    return _eval_depends(tree, groups)


def _eval_depends(node: DependsExpr, groups: Mapping[str, list[str]]) -> bool:
    if node.op == "and":
        return all(_eval_depends(a, groups) for a in node.args)
    if node.op == "or":
        return any(_eval_depends(a, groups) for a in node.args)
    if node.op == "not":
        return not _eval_depends(node.args[0], groups)
    g = groups[node.task]
    result = node.result
    if result is None:
        return all(p in ("Succeeded", "Skipped") for p in g)
    if result == "AnySucceeded":
        return any(p == "Succeeded" for p in g)
    if result == "AllFailed":
        return all(p == "Failed" for p in g)
    if result == "Daemoned":
        return False
    phase = _group_phase(g)
    return phase == {"Errored": "Error"}.get(result, result)


def _group_phase(g: Sequence[str]) -> str:
    if len(g) == 1:
        return g[0]
    if any(p == "Error" for p in g):
        return "Error"
    if any(p == "Failed" for p in g):
        return "Failed"
    if all(p == "Skipped" for p in g):
        return "Skipped"
    if all(p == "Omitted" for p in g):
        return "Omitted"
    return "Succeeded"


class WhenError(ValueError):
    pass


_WHEN_TOKEN = re.compile(
    r"\s*(?:(?P<op>==|!=|>=|<=|=~|!~|&&|\|\||[<>!()])"
    r"|(?P<str>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
    r"|(?P<num>[+-]?\d+(?:\.\d+)?(?![\w.\-/:]))"
    r"|(?P<word>[^\s()=!<>&|'\"]+))"
)


def evaluate_when(
    expr: str,
    workflow_parameters: Mapping[str, str] | None = None,
    outputs: Mapping[str, TaskOutputs] | None = None,
    *,
    item: Any = None,
    has_item: bool = False,
) -> bool:
    """Argo's ``when`` after substitution, in the govaluate subset Argo's examples use:
    ``==``, ``!=``, ``<``, ``>``, ``<=``, ``>=``, ``=~``, ``!~``, ``&&``, ``||``, ``!``,
    parentheses, quoted strings, numbers, ``true``/``false``, and bare words as strings.
    Raises ``WhenError`` when it cannot be evaluated (also when a reference is missing)."""
    missing: list[str] = []
    text = substitute(
        expr, workflow_parameters, outputs, item=item, has_item=has_item, missing=missing
    )
    if missing:
        raise WhenError(f"unresolved: {', '.join(sorted(set(missing)))}")
    if "{{" in text:
        # {{=expr}} (Argo's expr language) and references Argo fills are not evaluated here.
        raise WhenError(f"cannot evaluate {text.strip()[:80]!r} before Argo fills it")
    tokens: list[tuple[str, Any]] = []
    pos = 0
    while pos < len(text):
        if not text[pos:].strip():
            break
        m = _WHEN_TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise WhenError(f"cannot read {text[pos:].strip()[:20]!r}")
        pos = m.end()
        if m.group("op"):
            tokens.append(("op", m.group("op")))
        elif m.group("str") is not None:
            tokens.append(("val", m.group("str")[1:-1].encode().decode("unicode_escape")))
        elif m.group("num") is not None:
            tokens.append(("val", float(m.group("num"))))
        else:
            word = m.group("word")
            tokens.append(("val", {"true": True, "false": False}.get(word, word)))
    return bool(_WhenParser(tokens).parse())


class _WhenParser:
    def __init__(self, tokens: list[tuple[str, Any]]) -> None:
        self.tokens = tokens
        self.pos = 0

    def parse(self) -> Any:
        if not self.tokens:
            raise WhenError("empty expression")
        value = self.or_()
        if self.pos != len(self.tokens):
            raise WhenError(f"unexpected {self.tokens[self.pos][1]!r}")
        return value

    def peek(self) -> str | None:
        if self.pos < len(self.tokens) and self.tokens[self.pos][0] == "op":
            return str(self.tokens[self.pos][1])
        return None

    def or_(self) -> Any:
        value = self.and_()
        while self.peek() == "||":
            self.pos += 1
            right = self.and_()
            value = _truthy(value) or _truthy(right)
        return value

    def and_(self) -> Any:
        value = self.cmp()
        while self.peek() == "&&":
            self.pos += 1
            right = self.cmp()
            value = _truthy(value) and _truthy(right)
        return value

    def cmp(self) -> Any:
        left = self.unary()
        op = self.peek()
        if op in ("==", "!=", "<", ">", "<=", ">=", "=~", "!~"):
            self.pos += 1
            right = self.unary()
            return _compare(op, left, right)
        return left

    def unary(self) -> Any:
        if self.pos >= len(self.tokens):
            raise WhenError("expression ends too early")
        kind, value = self.tokens[self.pos]
        if kind == "op" and value == "!":
            self.pos += 1
            return not _truthy(self.unary())
        if kind == "op" and value == "(":
            self.pos += 1
            inner = self.or_()
            if self.peek() != ")":
                raise WhenError("missing ')'")
            self.pos += 1
            return inner
        if kind == "op":
            raise WhenError(f"unexpected {value!r}")
        self.pos += 1
        return value


def _truthy(v: Any) -> bool:
    if isinstance(v, str):
        return v.lower() == "true"
    return bool(v)


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return float(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _compare(op: str, left: Any, right: Any) -> bool:
    if op in ("=~", "!~"):
        try:
            hit = re.search(str(right), _as_text(left)) is not None
        except re.error as exc:
            raise WhenError(f"bad regular expression {right!r}: {exc}") from None
        return hit if op == "=~" else not hit
    ln, rn = _number(left), _number(right)
    if ln is not None and rn is not None:
        a: Any = ln
        b: Any = rn
    elif isinstance(left, bool) or isinstance(right, bool):
        a, b = _truthy(left), _truthy(right)
    else:
        a, b = _as_text(left), _as_text(right)
    if op == "==":
        return bool(a == b)
    if op == "!=":
        return bool(a != b)
    try:
        return bool({"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op])
    except TypeError:
        raise WhenError(f"cannot compare {left!r} {op} {right!r}") from None
