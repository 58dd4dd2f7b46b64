"""What the run page offers and says, checked on the page a scientist gets."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from portal.choices import RunStatus, UnitPhase
from tests.portal.helpers import make_run

pytestmark = pytest.mark.django_db

UNITS = [
    ("ingest", "site-a", UnitPhase.SUCCEEDED, []),
    ("train", "site-b", UnitPhase.FAILED, ["ingest"]),
]


def buttons(html: str) -> set[str]:
    return {
        label
        for label in ("Retry failed", "Resubmit", "Stop")
        if f'<button type="submit">{label}</button>' in html
        or f'<button type="submit" class="danger">{label}</button>' in html
    }


def test_a_stopped_run_offers_resubmit_not_retry_failed(
    client_for: Any, scientist: User, project: Any
) -> None:
    run = make_run(scientist, project=project, status=RunStatus.STOPPED, units=UNITS)
    html = client_for(scientist).get(f"/runs/{run.pk}/").content.decode()
    assert buttons(html) == {"Resubmit"}


def test_a_failed_run_offers_retry_failed_and_resubmit(
    client_for: Any, scientist: User, project: Any
) -> None:
    run = make_run(scientist, project=project, status=RunStatus.FAILED, units=UNITS)
    html = client_for(scientist).get(f"/runs/{run.pk}/").content.decode()
    assert buttons(html) == {"Retry failed", "Resubmit"}


def failed_over(owner: User, project: Any) -> Any:
    """A run whose train unit was placed at submission at site-b, then failed over at runtime
    to site-a in a tie with site-c."""
    from portal.choices import DecisionSource, UnitTiming
    from tests.factories import PlacementDecisionFactory

    run = make_run(owner, project=project, status=RunStatus.RUNNING, units=UNITS)
    train = run.units.get(name="train")
    PlacementDecisionFactory(
        unit=train,
        site="site-a",
        attempt=2,
        source=DecisionSource.FAILOVER,
        timing=UnitTiming.SUBMIT,  # what the failover asked the planner for
        reason="failover from site-b: tie with site-c, broken by name",
    )
    return run


def decision_log(client: Any, run: Any) -> str:
    html = client.get(f"/runs/{run.pk}/").content.decode()
    return html[html.index('id="decisions"') :]


def test_a_failover_decision_says_it_was_taken_at_runtime_and_why(
    client_for: Any, scientist: User, project: Any
) -> None:
    run = failed_over(scientist, project)
    log = decision_log(client_for(scientist), run)
    end = log.index("failover from site-b")
    failover = log[log.rindex("<summary>", 0, end) : end]
    assert "at runtime, failover: its site was lost or closed" in failover
    assert "at submission" not in failover and "attempt 2" in failover
    assert "at submission, by the placement rules" in log  # the submission's decisions


def test_a_tie_break_is_shown_to_operators_not_to_scientists(
    client_for: Any, scientist: User, project: Any, staff: User, operator: User
) -> None:
    run = failed_over(scientist, project)
    seen = decision_log(client_for(scientist), run)
    assert "broken by name" not in seen
    assert "failover from site-b: other sites fit equally well" in seen
    for who in (staff, operator):
        assert "tie with site-c, broken by name" in decision_log(client_for(who), run)
