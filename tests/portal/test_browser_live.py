"""The run page of a 10,000-unit run in a real browser (Debian's Chromium through Playwright):
the loop is one group node, the units table pages, and the poll is a conditional GET the
server answers 304 while nothing moves and 200 once a unit does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from portal import live, state
from portal.choices import UnitPhase
from portal.views import runs
from sites.models import Site
from tests.factories import PASSWORD, SiteFactory, UserFactory
from tests.fixtures_browser import login
from tests.portal.helpers import FAN_SITES, fan_out_run

pytestmark = [pytest.mark.integration]

UNITS = 10_000


@pytest.fixture
def polls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The If-None-Match header of every poll the live server answered."""
    seen: list[str] = []
    original = runs._etags

    def recording(header: str) -> set[str]:
        seen.append(header)
        return original(header)

    monkeypatch.setattr(runs, "_etags", recording)
    monkeypatch.setattr(runs, "RUN_POLL_LARGE", "1s")  # the poll of a big run, sooner
    monkeypatch.setattr(live, "CLOCK_STEP_S", 10**9)
    return seen


def test_a_10000_unit_run_page_pages_groups_and_polls_conditionally(
    browser: Any, live_server: Any, transactional_db: Any, polls: list[str], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    for name in FAN_SITES:
        # A stack's worker stopped just before this test may have synced its Clusters in.
        if not Site.objects.filter(name=name).exists():
            SiteFactory(name=name)
    user: User = UserFactory(username="watcher")
    run = fan_out_run(user, UNITS)
    page = login(browser, live_server.url, "watcher", PASSWORD)
    statuses: list[int] = []
    page.on("response", lambda r: statuses.append(r.status) if "/live/" in r.url else None)
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    # The loop's 9,998 items are one node; the page lists 50 units and pages the rest.
    group = page.locator("#run-live svg.dag g.node.group")
    expect(group).to_have_count(1)
    expect(group).to_have_attribute("data-items", str(UNITS - 2))
    expect(page.locator("#run-live svg.dag g.node")).to_have_count(3)
    expect(page.locator("table.units tbody tr")).to_have_count(50)
    expect(page.locator("nav[aria-label='Pages of units']")).to_contain_text(
        f"Units 1\u201350 of {UNITS}"
    )
    page.screenshot(path=str(tmp_path / "run-10000.png"), full_page=True)
    # The browser revalidates what it holds: the polls after the first carry its ETag (and,
    # nothing having moved, are answered 304 with no body).
    for _ in range(3):
        with page.expect_response(lambda r: "/live/" in r.url):
            pass
    conditional = [p for p in polls if p]
    assert conditional, polls
    # A unit moves: the next poll shows it without a reload.
    unit = run.units.filter(phase=UnitPhase.PENDING, loop_task="fan").order_by("position")[0]
    done = run.units.filter(phase=UnitPhase.SUCCEEDED).count()
    assert state.unit_move(unit, UnitPhase.SUCCEEDED)
    expect(page.locator(".progress-label")).to_contain_text(f"{done + 1} of {UNITS} units done")
    # and its event joins the top of the list, the older ones kept below it.
    newest = page.locator("#run-event-list li.event").first
    expect(newest).to_contain_text(f"{unit.name}: Pending \u2192 Succeeded")
    expect(page.locator("#run-event-list li.event")).to_have_count(31)
    # The page after the next: HTMX swaps the units table in place.
    page.locator("nav[aria-label='Pages of units'] a", has_text="Next").click()
    expect(page.locator("nav[aria-label='Pages of units']")).to_contain_text("Units 51")
    page.close()
