"""Argo's `{{= expr}}` tags and expr-lang expressions, evaluated where Argo's controller
evaluates them, with `placement.expression` (the one implementation of Argo's expression
language in this repository: a library the sandbox and the portal share, not portal logic;
`tests/portal/test_import_rules.py` checks that the sandbox imports nothing else of the
project).

Argo's template substitution (util/template/expression_template.go, `expressionReplaceStrict`
and `expressionReplaceCore`) has two modes the sandbox copies:

* lenient (`template.Replace(..., allowUnresolved=true)`: a template's body in
  `common.SubstituteParams`): a tag that names a missing variable or fails to evaluate is left
  as it is;
* strict on `steps`/`tasks` (`template.ReplaceStrictAny(..., {"steps", "tasks"})`: a step or a
  task, `when` first, in workflow/controller/steps.go `resolveReferences` and dag.go
  `resolveDependencyReferences`): a missing `steps.*`/`tasks.*` variable is an error
  (`failed to evaluate expression: <name> is missing`), another missing variable leaves the
  tag, and a tag whose variables are all there must evaluate, or it is an error
  (`failed to evaluate expression: ...`), as is a nil result.

Bare expressions (hooks' `expression`, `retryStrategy.expression`, an output parameter's
`valueFrom.expression`) are compiled against the scope (`expr.Compile(..., expr.Env(env))`:
an unknown top-level name does not compile) and run (util/expr/argoexpr/eval.go `EvalBool`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from placement.expression import EXPRESSION_TAG, ExprError, missing_variables, render
from placement.expression import evaluate as evaluate_expression

# The strict prefixes of a step's or task's substitution (steps.go, dag.go).
STRICT = ("steps", "tasks")

__all__ = ["STRICT", "ExprError", "evaluate", "evaluate_bool", "fill", "render"]


def fill(value: Any, scope: Mapping[str, Any], strict: tuple[str, ...] | None = None) -> Any:
    """`value` (a string, or lists and maps of them) with its `{{= }}` tags replaced.
    `strict=None` is Argo's lenient mode, `strict=STRICT` a step's or task's (see above).
    Raises `ExprError` with Argo's message where Argo fails."""
    if isinstance(value, str):
        return _fill_text(value, scope, strict) if "{{=" in value else value
    if isinstance(value, dict):
        return {k: fill(v, scope, strict) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, scope, strict) for v in value]
    return value


def _fill_text(text: str, scope: Mapping[str, Any], strict: tuple[str, ...] | None) -> str:
    def one(m: re.Match[str]) -> str:
        source = m.group(1).strip()
        try:
            missing = missing_variables(source, scope)
        except ExprError as exc:
            if strict is None:
                return m.group(0)
            raise ExprError(f"failed to evaluate expression: {exc}") from None
        if strict is not None:
            for name in missing:
                if name.split(".")[0] in strict:
                    raise ExprError(f"failed to evaluate expression: {name} is missing")
        if missing:
            return m.group(0)
        try:
            result = evaluate_expression(source, scope)
        except ExprError as exc:
            if strict is None:
                return m.group(0)
            raise ExprError(f"failed to evaluate expression: {exc}") from None
        if result is None:
            if strict is None:
                return m.group(0)
            raise ExprError(f'failed to evaluate expression "{source}"')
        return render(result)

    return EXPRESSION_TAG.sub(one, text)


def evaluate(expression: str, scope: Mapping[str, Any]) -> Any:
    """A bare expression's value, as `expr.Compile` with the scope as its environment and then
    `expr.Run`: a top-level name the scope does not hold does not compile."""
    tops = {str(k).split(".")[0] for k in scope}
    for name in missing_variables(expression, scope):
        top = name.split(".")[0]
        if top not in tops:
            raise ExprError(f"unknown name {top}")
    return evaluate_expression(expression, scope)


def evaluate_bool(expression: str, scope: Mapping[str, Any]) -> bool:
    """Argo's `argoexpr.EvalBool`: the expression's value, which must be a boolean."""
    try:
        result = evaluate(expression, scope)
    except ExprError as exc:
        raise ExprError(f"unable to evaluate expression '{expression}': {exc}") from None
    if not isinstance(result, bool):
        raise ExprError(f"unable to cast expression result '{render(result)}' to bool")
    return result
