"""Whether a unit runs: Argo's ``depends`` over upstream phases, and ``when`` after
substitution. ``depends`` has one reader, ``placement.parser.parse_depends``; this module only
evaluates the expression tree it returns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from placement import expression
from placement.manifests.outputs import TaskOutputs
from placement.manifests.substitution import as_text, substitute
from placement.parser import (
    DependsExpr,
    DependsSyntaxError,
    WhenExpr,
    WhenSyntaxError,
    compile_regex,
    parse_depends,
    parse_when,
)

FINAL_PHASES = frozenset({"Succeeded", "Failed", "Error", "Skipped", "Omitted"})


def _group(phases: str | Sequence[str] | None) -> list[str] | None:
    if phases is None:
        return None
    group = [phases] if isinstance(phases, str) else list(phases)
    if not group or any(p not in FINAL_PHASES for p in group):
        return None
    return group


def evaluate_depends(
    expr: str,
    phases: Mapping[str, str | Sequence[str] | None],
    continues: Mapping[str, frozenset[str]] | None = None,
) -> bool | None:
    """Argo's ``depends`` over finished upstream tasks: True (run), False (omit), or None (an
    upstream task is not finished yet). ``phases`` maps task names to a phase, or to the list
    of phases of an expanded task. A bare ``A`` means ``A.Succeeded || A.Skipped || A.Daemoned``;
    an empty expression is True. ``continues`` maps a task to the phases its ``continueOn``
    allows (``Failed``, ``Error``), which a bare name accepts too (``expandDependency``,
    ``workflow/common/ancestry.go``). Raises ``DependsError`` (an ``ExpressionError``) when the
    expression cannot be read."""
    if not expr.strip():
        return True
    try:
        tree = parse_depends(expr.strip())
    except DependsSyntaxError as exc:
        raise DependsError(f"depends {expr.strip()[:80]!r}: {exc}") from None
    groups: dict[str, list[str]] = {}
    for task in tree.tasks():
        g = _group(phases.get(task))
        if g is None:
            return None
        groups[task] = g
    return _eval_depends(tree, groups, continues or {})


def _eval_depends(
    node: DependsExpr, groups: Mapping[str, list[str]], continues: Mapping[str, frozenset[str]]
) -> bool:
    if node.op == "and":
        return all(_eval_depends(a, groups, continues) for a in node.args)
    if node.op == "or":
        return any(_eval_depends(a, groups, continues) for a in node.args)
    if node.op == "not":
        return not _eval_depends(node.args[0], groups, continues)
    g = groups[node.task]
    result = node.result
    if result is None:
        allowed = continues.get(node.task)
        if allowed and _group_phase(g) in allowed:
            return True
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


class ExpressionError(ValueError):
    """A ``when`` or ``depends`` that cannot be evaluated: it does not parse, it is beyond the
    evaluator's bounds (length, nesting, regular expression), or a reference is missing. The
    one error evaluation raises (never a hang, a ``RecursionError`` or a ``UnicodeError``); the
    message says why, for the unit's failure."""


class WhenError(ExpressionError):
    """``evaluate_when`` could not decide."""


class DependsError(ExpressionError):
    """``evaluate_depends`` could not read the expression."""


def evaluate_when(
    expr: str,
    workflow_parameters: Mapping[str, str] | None = None,
    outputs: Mapping[str, TaskOutputs] | None = None,
    *,
    item: Any = None,
    has_item: bool = False,
    inputs: Mapping[str, str] | None = None,
) -> bool:
    """Argo's ``when`` after substitution, in the govaluate subset ``parse_when`` reads.
    Raises ``WhenError`` when it cannot be evaluated (also when a reference is missing)."""
    missing: list[str] = []
    try:
        text = substitute(
            expr,
            workflow_parameters,
            outputs,
            item=item,
            has_item=has_item,
            missing=missing,
            inputs=inputs,
        )
    except expression.ExprError as exc:
        raise WhenError(str(exc)) from None
    if missing:
        raise WhenError(f"unresolved: {', '.join(sorted(set(missing)))}")
    if "{{" in text:
        # A {{= expr}} over what only Argo holds, or a reference only Argo fills.
        raise WhenError(f"cannot evaluate {text.strip()[:80]!r} before Argo fills it")
    try:
        return _truthy(_eval_when(parse_when(text)))
    except WhenSyntaxError as exc:
        raise WhenError(str(exc)) from None
    except (RecursionError, UnicodeError, OverflowError, MemoryError) as exc:
        # Not expected within the parser's bounds; a unit fails with a message all the same.
        raise WhenError(f"cannot evaluate: {type(exc).__name__}") from None


def _eval_when(node: WhenExpr) -> Any:
    if node.op == "value":
        return node.value
    if node.op == "not":
        return not _truthy(_eval_when(node.args[0]))
    if node.op == "and":
        return all(_truthy(_eval_when(a)) for a in node.args)
    if node.op == "or":
        return any(_truthy(_eval_when(a)) for a in node.args)
    if node.op == "in":
        first = _eval_when(node.args[0])
        return any(_compare("==", first, _eval_when(a)) for a in node.args[1:])
    left, right = (_eval_when(a) for a in node.args)
    return _compare(node.op, left, right)


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
        # RE2: linear in the subject, which the expression's length bound keeps small.
        hit = compile_regex(right).search(as_text(left)) is not None
        return bool(hit) if op == "=~" else not hit
    ln, rn = _number(left), _number(right)
    if ln is not None and rn is not None:
        a: Any = ln
        b: Any = rn
    elif isinstance(left, bool) or isinstance(right, bool):
        a, b = _truthy(left), _truthy(right)
    else:
        a, b = as_text(left), as_text(right)
    if op == "==":
        return bool(a == b)
    if op == "!=":
        return bool(a != b)
    try:
        return bool({"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op])
    except TypeError:
        raise WhenError(f"cannot compare {left!r} {op} {right!r}") from None
