"""The run page of a shared fleet in a real browser: Chromium (Playwright) reads
the Cost panel (compute, transfer, total, and per unit, a transfer unit among them) and the
units Queued for quota, with why and their position, as a scientist sees them."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.utils import timezone

from portal.choices import UnitPhase, UnitTiming
from portal.models import UnitRun, WorkflowRun
from portal.quotas.admit import admit
from portal.quotas.models import Quota, SitePrice
from sites.models import Project, Site, SiteLink
from tests.factories import UnitRunFactory, WorkflowRunFactory
from tests.fixtures_browser import login

pytestmark = [pytest.mark.integration]

CPU = 1000


@pytest.fixture
def shared_run(transactional_db: Any) -> WorkflowRun:
    """A fan-out of 5 one-CPU tiles at site-b under a 2-CPU quota (2 run, 3 wait), after a
    step that ran an hour and a copy of 2 GB from site-a, at known prices."""
    call_command("load_demo", verbosity=0)
    eo = Project.objects.get(name="eo-demo")
    b = Site.objects.get(name="site-b")
    SitePrice.objects.update_or_create(site=b, defaults={"cpu_hour": Decimal("0.50")})
    SiteLink.objects.filter(source__name="site-a", target__name="site-b").update(
        cost_per_gb=Decimal("0.25")
    )
    Quota.objects.create(project=eo, site=b, cpu_millicores=2 * CPU, borrow_cpu_millicores=0)
    run: WorkflowRun = WorkflowRunFactory(
        project=eo, owner=User.objects.get(username="scientist"), name="tiles-demo"
    )
    end = timezone.now()
    done = UnitRunFactory(
        run=run,
        name="prepare",
        position=0,
        planned_site="site-b",
        site="site-b",
        phase=UnitPhase.SUCCEEDED,
        spec={"resources": {"cpu_millicores": 2 * CPU, "memory_bytes": 0, "gpus": 0}},
    )
    copy = UnitRunFactory(
        run=run,
        name="scene-copy-site-b",
        position=1,
        planned_site="site-b",
        site="site-b",
        phase=UnitPhase.SUCCEEDED,
        kind="transfer",
        spec={"kind": "transfer", "resources": {}, "transfer": {"from": "site-a", "to": "site-b"}},
        outputs={"parameters": [{"name": "bytes", "value": str(2 * 10**9)}]},
    )
    UnitRun.objects.filter(pk=done.pk).update(started_at=end - timedelta(hours=1), finished_at=end)
    UnitRun.objects.filter(pk=copy.pk).update(
        started_at=end - timedelta(seconds=20), finished_at=end
    )
    UnitRun.objects.bulk_create(
        [
            UnitRunFactory.build(
                run=run,
                name=f"tile({i})",
                position=2 + i,
                planned_site="site-b",
                site="site-b",
                timing=UnitTiming.SUBMIT,
                spec={"resources": {"cpu_millicores": CPU, "memory_bytes": 0, "gpus": 0}},
            )
            for i in range(5)
        ]
    )
    tiles = list(run.units.filter(phase=UnitPhase.PENDING).order_by("position"))
    admitted = admit(run, tiles)
    assert len(admitted) == 2
    UnitRun.objects.filter(pk__in=[u.pk for u in admitted]).update(
        phase=UnitPhase.RUNNING, workflow_name="x", started_at=end
    )
    return run


def test_the_run_page_reads_its_cost_and_its_queued_units(
    browser: Any, live_server: Any, shared_run: WorkflowRun
) -> None:
    from playwright.sync_api import expect

    page = login(browser, live_server.url, "scientist")
    page.goto(f"{live_server.url}/runs/{shared_run.pk}/")
    expect(page.locator(".progress-label")).to_contain_text("2 running · 3 queued for quota")
    # The units table marks each waiting tile Queued, with its place in the queue and why.
    tile = page.locator("table.units tbody tr", has_text="tile(3)")
    expect(tile.locator(".phase")).to_have_text("Queued")
    assert "#2 in eo-demo's queue at site-b" in tile.inner_text()
    assert "eo-demo uses 2 of 2 CPU at site-b; waiting for quota" in tile.inner_text()
    running = page.locator("table.units tbody tr", has_text="tile(0)")
    expect(running.locator(".phase")).to_have_text("Running")
    cost = page.locator("#run-cost")
    expect(cost).to_be_visible()
    text = cost.inner_text()
    # 2 CPU x 1 h x 0.50 = 1.00 compute; 2 GB x 0.25 = 0.50 transfer; the tiles just started.
    assert "1.00" in text and "0.50" in text and "1.50" in text, text
    queue = page.locator("#run-queue")
    expect(queue).to_be_visible()
    rows = queue.locator("tbody tr")
    expect(rows).to_have_count(3)
    first = rows.nth(0).inner_text()
    assert "tile(2)" in first and "1" in first
    assert "eo-demo uses 2 of 2 CPU at site-b; waiting for quota" in first
    assert "tile(4)" in rows.nth(2).inner_text()
    # Per unit, the copy shows what it moved over which link.
    cost.locator("summary").click()
    copy = cost.locator("table.unit-costs tbody tr", has_text="scene-copy-site-b")
    expect(copy).to_contain_text("site-a → site-b")
    assert copy.locator("td").nth(7).inner_text() == "0.50"
    page.close()


def test_a_big_runs_page_shows_its_queue_at_once_and_prices_its_units_when_the_panel_is_shown(
    browser: Any,
    live_server: Any,
    shared_run: WorkflowRun,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    monkeypatch.setattr("portal.views.runs.LARGE_RUN_UNITS", 3)  # this run's 7 units: big
    page = login(browser, live_server.url, "scientist")
    page.goto(f"{live_server.url}/runs/{shared_run.pk}/")
    expect(page.locator("#run-queue tbody tr")).to_have_count(3)
    cost = page.locator("#run-cost")
    cost.scroll_into_view_if_needed()
    # The placeholder is replaced by the panel once it is in view.
    expect(cost.locator("dl.facts")).to_contain_text("1.50")
    text = cost.inner_text()
    assert "1.00" in text and "0.50" in text and "Pricing" not in text, text
    page.screenshot(path=str(tmp_path / "run-cost-deferred.png"), full_page=True)
    page.close()


def test_the_fleet_page_shows_each_sites_quota_use_per_project_as_bars(
    browser: Any, live_server: Any, shared_run: WorkflowRun
) -> None:
    from playwright.sync_api import expect

    page = login(browser, live_server.url, "scientist")
    page.goto(f"{live_server.url}/fleet/")
    row = page.locator("#fleet-quotas tbody tr", has_text="eo-demo")
    expect(row).to_have_count(1)
    assert "site-b" in row.inner_text()
    # eo-demo holds 2 of its 2 CPU at site-b (two tiles run), three tiles wait.
    bar = row.locator("td").nth(2)
    expect(bar.locator('[role="progressbar"], .progress, .bar').first).to_be_visible()
    assert "2" in bar.inner_text()
    assert row.locator("td").nth(5).inner_text().strip() == "3"
    # No memory quota and none held: "none", as for GPUs, not a bar of 0 of 0.
    assert row.locator("td").nth(3).inner_text().strip() == "none"
    page.close()
