"""A turn's budget: spent after ``max_creations`` or ``seconds``, then cut, unless nobody waits
for it to end (``go_on``) and another budget keeps it inside
``PORTAL_ADVANCE_TURN_MAX_SECONDS``. An advance of a fan-out with nobody waiting creates past
its budget; with another project's run waiting it yields after one. Sandbox over HTTP, Redis
and PostgreSQL, no worker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from portal import services
from portal.controller import advance, submit
from portal.controller.advance import Turn
from portal.controller.step_workflow import run_wide_of
from portal.controller.workqueue import fairness
from portal.models import UnitRun
from tests.fixtures_sandbox import SandboxServer
from tests.integration.test_fanout import fan_out_workflow


def test_a_turn_nobody_waits_for_goes_on_within_its_cap(settings: Any) -> None:
    settings.PORTAL_ADVANCE_TURN_MAX_SECONDS = 30.0
    asked: list[bool] = []

    def go_on() -> bool:
        asked.append(True)
        return True

    turn = Turn(max_creations=50, seconds=3.0, go_on=go_on)
    turn.creations = 50
    assert not turn.spent()  # another budget
    assert (turn.creations, turn.cut, len(asked)) == (0, False, 1)
    turn.creations = 50
    turn.began -= 28.0  # another 3 s budget would end past the 30 s cap
    assert turn.spent() and turn.cut
    assert len(asked) == 1  # past the cap nobody is asked


def test_a_turn_someone_waits_for_is_cut() -> None:
    turn = Turn(max_creations=50, seconds=3.0, go_on=lambda: False)
    turn.creations = 50
    assert turn.spent() and turn.cut
    alone = Turn(max_creations=50, seconds=3.0)  # no go_on: as before, cut
    alone.creations = 50
    assert alone.spent() and alone.cut


ITEMS = 120
OTHER_PROJECT, OTHER_RUN = 990011, 880011


@pytest.fixture
def quiet(fairness_quiet: Any) -> Iterator[Any]:
    """Nobody waits (``fairness_quiet``); the other project's turn this test adds goes after."""
    yield fairness_quiet
    fairness_quiet.delete(fairness.WAITING % OTHER_PROJECT, fairness.HOLDER % OTHER_PROJECT)
    fairness_quiet.srem(fairness.PROJECTS, OTHER_PROJECT)


def _fan_out(settings: Any, quiet: Any) -> int:
    settings.PORTAL_ADVANCE_BATCH = 50
    user = get_user_model().objects.get(username="scientist")
    run = services.run_submit(user=user, body=fan_out_workflow(ITEMS, 3600))
    # The submission asked for its first advance (a prompt slot): that advance is this test's.
    quiet.delete(fairness.PROMPT_PROJECTS)
    return run.pk


def _created(run_id: int) -> int:
    return UnitRun.objects.filter(run_id=run_id).exclude(workflow_name="").count()


@pytest.mark.integration
def test_an_advance_nobody_waits_for_creates_past_its_budget(
    demo_fleet: SandboxServer, settings: Any, quiet: Any
) -> None:
    run_id = _fan_out(settings, quiet)
    assert advance.run_advance(run_id, Turn()) is False  # nothing left for another turn
    assert _created(run_id) == ITEMS


@pytest.mark.integration
def test_an_advance_yields_after_its_budget_when_another_project_waits(
    demo_fleet: SandboxServer, settings: Any, quiet: Any
) -> None:
    run_id = _fan_out(settings, quiet)
    assert fairness.wait_turn(OTHER_PROJECT, OTHER_RUN) == [(OTHER_PROJECT, OTHER_RUN)]
    assert advance.run_advance(run_id, Turn()) is True  # cut: work left for its next turn
    assert _created(run_id) == 50


@pytest.mark.integration
def test_a_pass_reads_the_run_wide_values_once_for_all_its_chunks(
    demo_fleet: SandboxServer, settings: Any, quiet: Any, monkeypatch: Any
) -> None:
    """``{{workflow.*}}`` and the global outputs walk every unit of the run: once per pass
    (``submit.pass_shared``), not once per chunk of fifty as before."""
    run_id = _fan_out(settings, quiet)
    walks: list[int] = []

    def counted(run: Any, units: Any) -> Any:
        walks.append(len(list(units)))
        return run_wide_of(run, units)

    monkeypatch.setattr(submit, "run_wide_of", counted)
    assert advance.run_advance(run_id, Turn()) is False
    assert _created(run_id) == ITEMS  # three chunks
    assert len(walks) == 1
