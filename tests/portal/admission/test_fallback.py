"""The webhook is never in the way: on errors and past its budget it allows without a patch."""

from __future__ import annotations

from typing import Any

from placement import planner
from portal.admission import budget, decide
from portal.choices import DecisionSource
from portal.models import PlacementDecision, UnitRun
from tests.portal.admission.helpers import (
    D,
    answer,
    post,
    review,
    step_workflow,
)


def test_it_allows_without_patch_when_the_planner_fails(client, demo_run, monkeypatch):
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("planner exploded")

    monkeypatch.setattr(planner, "decide", broken)
    _, patch = answer(post(client, review(step_workflow(demo_run))))
    assert patch is None
    assert demo_run.units.get(name="preprocess").site == ""


def test_it_allows_without_patch_when_the_unit_spec_is_corrupt(client, demo_run):
    UnitRun.objects.filter(run=demo_run, name="preprocess").update(spec={"oops": 1})
    _, patch = answer(post(client, review(step_workflow(demo_run))))
    assert patch is None


def test_it_allows_without_patch_for_an_unknown_run(client, demo_run):
    obj = step_workflow(demo_run, **{f"{D}/run": "999999"})
    _, patch = answer(post(client, review(obj)))
    assert patch is None


def test_it_allows_without_patch_when_the_budget_is_spent_before_it_starts(
    client, demo_run, settings
):
    settings.PORTAL_WEBHOOK_BUDGET_MS = 0
    _, patch = answer(post(client, review(step_workflow(demo_run))))
    assert patch is None
    assert demo_run.units.get(name="preprocess").site == ""


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_it_rolls_back_and_allows_without_patch_when_deciding_runs_past_the_budget(
    client, demo_run, monkeypatch
):
    clock = _Clock()
    monkeypatch.setattr(decide, "time", clock)
    monkeypatch.setattr(budget, "time", clock)
    monkeypatch.setattr("portal.webhook.time", clock)
    real_decide = planner.decide

    def slow(*args: Any, **kwargs: Any) -> Any:
        clock.now += 0.501  # the decision "took" just over the 500 ms budget
        return real_decide(*args, **kwargs)

    monkeypatch.setattr(planner, "decide", slow)
    _, patch = answer(post(client, review(step_workflow(demo_run))))

    assert patch is None
    assert demo_run.units.get(name="preprocess").site == ""
    assert not PlacementDecision.objects.filter(source=DecisionSource.WEBHOOK).exists()
