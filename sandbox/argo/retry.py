"""retryStrategy as Argo's controller reads it (workflow/controller/operator.go
`processNodeRetries`)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sandbox.argo import expressions
from sandbox.argo.expr import FAILED, parse_duration

# util/errors/errors.go isTransientNetworkErr and friends: the messages a retry with
# `retryPolicy: OnTransientError` retries (a step's own exit code never is one).
TRANSIENT = (
    "exceeded quota",
    "Operation cannot be fulfilled on resourcequota",
    "resource quota evaluation timed out",
    "etcdserver: leader changed",
    "etcdserver: request timed out",
    "etcdserver: too many requests",
    "unexpected error when reading response body",
    "stream error when reading response body",
    "Connection closed by foreign host",
    "net/http: TLS handshake timeout",
    "i/o timeout",
    "connection timed out",
    "connection reset by peer",
    "http2: client connection lost",
    "http2: server sent GOAWAY and closed the connection",
    "request did not complete within requested timeout",
    "connect: connection refused",
    "invalid connection",
)


def retry_policy(strategy: dict[str, Any]) -> str:
    """`RetryStrategy.RetryPolicyActual` (pkg/apis/workflow/v1alpha1/workflow_types.go): the
    policy given, else `Always` with an expression and `OnFailure` without."""
    given = str(strategy.get("retryPolicy") or "")
    if given:
        return given
    return "Always" if strategy.get("expression") else "OnFailure"


def retry_decision(
    strategy: dict[str, Any], attempt: int, node: dict[str, Any]
) -> tuple[str | None, float | None]:
    """After attempt number `attempt` (from 0) ended as `node`: `(message, None)` when the
    retry node ends with that message, else `(None, wait)`: retry, after `wait` simulated
    seconds of backoff (None: at once). Follows `processNodeRetries` in
    workflow/controller/operator.go: a nil `limit` retries without end, the policy decides
    which phases are retried, then the limit (`No more retries left`), then the expression
    (`retryStrategy.expression evaluated to false`)."""
    phase = node["phase"]
    if phase not in FAILED:
        return "", None
    policy = retry_policy(strategy)
    transient = any(t in str(node.get("message") or "") for t in TRANSIENT)
    on_failed, on_error = {
        "Always": (True, True),
        "OnError": (False, True),
        "OnFailure": (True, False),
        "OnTransientError": (transient, transient),
    }.get(policy, (False, False))
    if (phase == "Failed" and not on_failed) or (phase == "Error" and not on_error):
        return str(node.get("message") or ""), None
    raw = strategy.get("limit")
    limit: int | None = None
    if raw is not None and str(raw).strip() != "":
        try:
            limit = int(str(raw).strip())
        except ValueError as exc:
            raise expressions.ExprError(f"invalid retryStrategy.limit {raw!r}") from exc
    if limit is not None and attempt + 1 > limit:
        return "No more retries left", None
    if strategy.get("expression") and not retry_expression(
        str(strategy["expression"]), attempt, node
    ):
        return "retryStrategy.expression evaluated to false", None
    backoff = strategy.get("backoff") or {}
    # operator.go waits out a backoff only when a limit is set (`retryStrategy.Limit != nil`).
    if not backoff.get("duration") or limit is None:
        return None, None
    wait = parse_duration(backoff.get("duration"), 0.0)
    try:
        factor = int(str(backoff.get("factor") or 0))
    except ValueError:
        factor = 0
    if factor > 0:
        wait *= float(factor) ** attempt
    cap = parse_duration(backoff.get("cap"), 0.0)
    if cap and wait > cap:
        wait = cap
    return None, wait


def retry_expression(expr: str, attempt: int, node: dict[str, Any]) -> bool:
    """A retryStrategy `expression` in Argo's expression language over the scope Argo gives it
    (workflow/controller/operator.go `buildRetryStrategyLocalScope`: `retries`, `lastRetry.*`,
    every value a string); one that cannot be evaluated to a boolean errors the node."""
    started, finished = node.get("startedAt") or "", node.get("finishedAt") or ""
    scope = {
        "retries": str(attempt),
        "lastRetry.exitCode": str((node.get("outputs") or {}).get("exitCode", "-1")),
        "lastRetry.status": str(node.get("phase", "")),
        "lastRetry.message": str(node.get("message", "")),
        "lastRetry.duration": str(_seconds_between(started, finished)),
    }
    return expressions.evaluate_bool(expr, scope)


def _seconds_between(a: str, b: str) -> int:
    try:
        fmt = "%Y-%m-%dT%H:%M:%SZ"
        return int((dt.datetime.strptime(b, fmt) - dt.datetime.strptime(a, fmt)).total_seconds())
    except ValueError:
        return 0
