"""Which retry policy gives a vanished step workflow's unit a new attempt: Argo's, for a pod
deleted under a node (an error, not a failure). PostgreSQL, no Karmada: the policy alone."""

from __future__ import annotations

from typing import Any

import pytest

from portal.choices import RunStatus, UnitPhase
from portal.controller.vanished import retry_verdict
from tests.factories import UnitRunFactory, WorkflowRunFactory


def verdict(
    template: dict[str, Any] | None = None,
    spec: dict[str, Any] | None = None,
    before: int = 0,
    status: str = RunStatus.RUNNING,
) -> str | None:
    compiled = {"templates": {"work": {"name": "work", **(template or {})}}, "spec": spec or {}}
    run = WorkflowRunFactory(compiled=compiled, status=status)
    unit = UnitRunFactory(run=run, template="work", phase=UnitPhase.RUNNING)
    return retry_verdict(run, unit, before)


@pytest.mark.parametrize("policy", ["Always", "OnError", "OnTransientError"])
def test_policies_that_retry_errors_run_it_again(db: Any, policy: str) -> None:
    assert verdict({"retryStrategy": {"limit": 2, "retryPolicy": policy}}) is None


def test_the_default_policy_retries_failures_only(db: Any) -> None:
    why = verdict({"retryStrategy": {"limit": 3}})
    assert why == "its retryPolicy OnFailure does not retry errors"
    assert "OnFailure" in str(verdict({"retryStrategy": {"retryPolicy": "OnFailure"}}))


def test_the_limit_counts_earlier_vanished_attempts(db: Any) -> None:
    strategy = {"retryStrategy": {"limit": "1", "retryPolicy": "Always"}}
    assert verdict(strategy, before=0) is None
    assert verdict(strategy, before=1) == "its retryStrategy limit (1) is reached"
    assert verdict({"retryStrategy": {"retryPolicy": "Always"}}, before=50) is None  # no limit


def test_the_templates_own_strategy_wins_over_the_workflows(db: Any) -> None:
    workflow_wide = {"retryStrategy": {"limit": 1, "retryPolicy": "Always"}}
    assert verdict(spec=workflow_wide) is None
    assert verdict(spec={"templateDefaults": workflow_wide}) is None
    assert "OnFailure" in str(verdict({"retryStrategy": {"limit": 1}}, spec=workflow_wide))


def test_no_strategy_or_a_run_no_longer_active_ends_the_unit(db: Any) -> None:
    assert verdict() == "it has no retryStrategy"
    stopped = verdict({"retryStrategy": {"retryPolicy": "Always"}}, status=RunStatus.STOPPED)
    assert stopped == "the run is stopped"
