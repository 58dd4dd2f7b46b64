"""What a person sees in a real browser (Debian's Chromium driven by Playwright): the preview
of a big fan-out fits the page, a blocked failover is a banner, a stopped run offers Resubmit."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from portal.choices import RunStatus, UnitPhase
from portal.models import RunEvent
from sites.models import Project, Site
from tests.fixtures_browser import login
from tests.portal.helpers import make_run
from tests.portal.test_browser import demo, execution  # noqa: F401 (fixtures)
from tests.portal.test_preview_fan_out import fan_out

pytestmark = [pytest.mark.integration]


def test_the_preview_of_a_200_item_fan_out_fits_on_the_page(
    browser: Any,
    live_server: Any,
    demo: None,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    page = login(browser, live_server.url, "scientist")
    page.goto(f"{live_server.url}/submit/")
    page.fill("#id_manifest", fan_out(200))
    page.click("button:has-text('Preview placement')")
    dag = page.locator("#preview svg.dag")
    # Planning 200 units on a loaded machine takes a while: Playwright waits, it does not judge.
    expect(dag).to_be_visible(timeout=60_000)
    box = dag.bounding_box()
    assert box is not None and box["height"] < 1000, box  # one node for the loop, not 200
    expect(page.locator('#preview svg.dag [data-items="200"]')).to_have_count(1)
    page.close()


def test_a_blocked_failover_is_a_banner_on_the_run_page_and_a_stopped_run_offers_resubmit(
    browser: Any,
    live_server: Any,
    demo: None,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    scientist = User.objects.get(username="scientist")
    project = Project.objects.get(name="eo-demo")
    run = make_run(scientist, project=project, units=[("main", "site-c", UnitPhase.PENDING, [])])
    run.units.update(site="site-c")
    Site.objects.filter(name="site-c").update(cordoned=True)
    message = "main: site site-c is cordoned; no other site: unplaceable"
    RunEvent.objects.create(run=run, unit=run.units.get(), kind="failover-blocked", message=message)
    page = login(browser, live_server.url, "scientist")
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    banner = page.locator(".failover-blocked")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("Failover blocked")
    expect(banner).to_contain_text(message)

    Site.objects.filter(name="site-c").update(cordoned=False)
    page.reload()
    expect(page.locator(".failover-blocked")).to_have_count(0)

    stopped = make_run(scientist, project=project, status=RunStatus.STOPPED)
    page.goto(f"{live_server.url}/runs/{stopped.pk}/")
    expect(page.locator("button:has-text('Resubmit')")).to_be_visible()
    expect(page.locator("button:has-text('Retry failed')")).to_have_count(0)
    page.close()
