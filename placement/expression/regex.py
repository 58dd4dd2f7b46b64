"""RE2 patterns (Go's ``regexp`` syntax, linear time, bounded memory): the one compiler of
``=~``/``matches`` for both expression languages, ``when``'s govaluate and Argo's expr. It lives
here, beside the expression evaluator, so that the evaluator needs nothing of the workflow
parser and the sandbox can use it as a library (``sandbox/README.md``)."""

from __future__ import annotations

import functools
from typing import Any

import re2

from placement.expression.syntax import ExprError

MAX_REGEX_CHARS = 1024
# RE2's memory budget for one compiled pattern (its default is 8 MiB as well).
RE2_MAX_MEM = 8 << 20


@functools.lru_cache(maxsize=256)
def compile_regex(pattern: Any) -> Any:
    """An RE2 pattern. Raises ``ExprError`` when it is too long, invalid or too large to match
    in bounded memory."""
    text = pattern_text(pattern)
    if len(text) > MAX_REGEX_CHARS:
        raise ExprError(
            f"regular expression is {len(text)} characters long; the limit is {MAX_REGEX_CHARS}"
        )
    options = re2.Options()
    options.log_errors = False
    options.max_mem = RE2_MAX_MEM
    try:
        return re2.compile(text, options)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else exc
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise ExprError(f"bad regular expression {text[:80]!r}: {detail}") from None


def pattern_text(value: Any) -> str:
    # As the evaluators compare: numbers without a needless ".0", booleans as Argo writes them.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
