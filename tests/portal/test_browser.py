"""The dashboard in a real browser: Playwright drives Debian's Chromium against a live server.

Log in, submit the demo workflow with a preview, watch the run page, open the decision log;
an outsider cannot see the run; a broken workflow shows its errors next to their lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from portal import services
from portal.choices import RunStatus
from portal.models import WorkflowRun
from sites.choices import SyncMode
from tests.factories import PASSWORD as FACTORY_PASSWORD
from tests.factories import SiteFactory, WorkflowRunFactory
from tests.fixtures_browser import login
from tests.fixtures_stack import Stack, wait_for
from tests.portal.helpers import EO_PIPELINE, chain_units, make_run
from tests.portal.karmada.test_logs import (  # noqa: F401 (fixtures, asked for by name)
    karmada_without_proxy,
    no_proxy_sandbox,
)

pytestmark = [pytest.mark.integration]

BROKEN = (
    "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata:\n  name: broken\nspec:\n"
    "  entrypoint: main\n  templates:\n    - name: main\n      dag:\n        tasks:\n"
    "          - name: a\n            template: nowhere\n"
)


@pytest.fixture
def execution(live: Stack) -> Stack:
    """The real execution stack (sandbox, worker, watcher): what a test submits runs. Named
    as a parameter, not asked for at run time: the stack's worker and watcher then stay up
    from one test of the module to the next instead of being stopped before each test (as
    for a test that uses no stack) and started again."""
    return live


@pytest.fixture
def demo(transactional_db: Any, execution: Any | None) -> None:
    call_command("load_demo", verbosity=0)


def test_a_scientist_previews_submits_and_follows_the_demo_run(
    browser: Any, live_server: Any, demo: None, execution: Any | None
) -> None:
    from playwright.sync_api import expect

    base = live_server.url
    page = login(browser, base, "scientist")
    page.click("nav >> text=Submit")
    page.fill("#id_manifest", EO_PIPELINE.read_text())
    # The parameter form follows the YAML: the enum becomes a select.
    expect(page.locator("select[name=param-model]")).to_be_visible()
    page.select_option("select[name=param-model]", "land-cover-v2")
    page.click("button:has-text('Preview placement')")

    preview = page.locator("#preview")
    expect(preview.locator("h2")).to_have_text("Placement preview")
    sites = preview.locator("svg.dag g.node").evaluate_all(
        "nodes => nodes.map(n => n.dataset.site)"
    )
    assert sorted(sites) == ["site-a", "site-b", "site-c"]
    fills = preview.locator("svg.dag g.node rect").evaluate_all(
        "rects => rects.map(r => r.getAttribute('fill'))"
    )
    assert len(set(fills)) == 3
    expect(preview.locator("table.plan > tbody > tr:not(.candidates-row)")).to_have_count(3)
    # Each unit's losing sites and why, one click away.
    why = preview.locator("details.candidates-of").last
    expect(why.locator("table.candidates")).to_be_hidden()
    why.locator("summary").click()
    expect(why.locator("table.candidates")).to_be_visible()
    expect(why.locator("tr.ineligible").first).to_be_visible()
    assert page.url == f"{base}/submit/"  # the preview did not leave the page

    page.click("button:has-text('Submit'):not(:has-text('Preview'))")
    page.wait_for_url(re.compile(r".*/runs/\d+/$"))
    run = WorkflowRun.objects.get()
    assert run.arguments.get("model") == "land-cover-v2"

    nodes = page.locator("#run-live svg.dag g.node")
    expect(nodes).to_have_count(3)
    if execution is not None:
        # The real pipeline runs it: the live partial reaches Succeeded without a reload.
        expect(page.locator("#run-status")).to_have_text("Succeeded", timeout=120_000)
        expect(page.locator("#run-live")).to_have_attribute("data-finished", "true")
        expect(page.locator("#run-live svg.dag g.node.phase-Succeeded")).to_have_count(3)
    fills = nodes.locator("rect").evaluate_all("rs => rs.map(r => r.getAttribute('fill'))")
    assert len(set(fills)) == 3, fills
    expect(page.locator(".legend li", has_text="site-a")).to_be_visible()

    first = page.locator("details.decision").first
    expect(first.locator("table.candidates")).to_be_hidden()
    first.locator("summary").click()
    expect(first.locator("table.candidates")).to_be_visible()
    expect(first.locator("tr.chosen")).to_have_count(1)
    page.close()


def test_an_outsider_cannot_see_the_run(
    browser: Any, live_server: Any, demo: None, outsider: User
) -> None:
    owner = User.objects.get(username="scientist")
    run = WorkflowRunFactory(name="private-run", owner=owner, status=RunStatus.PENDING)
    page = login(browser, live_server.url, outsider.username, FACTORY_PASSWORD)
    response = page.goto(f"{live_server.url}/runs/{run.pk}/")
    assert response is not None and response.status == 404
    page.goto(f"{live_server.url}/runs/")
    assert "private-run" not in page.content()
    page.close()


def test_a_broken_workflow_shows_errors_next_to_their_lines(
    browser: Any, live_server: Any, demo: None
) -> None:
    from playwright.sync_api import expect

    page = login(browser, live_server.url, "scientist")
    page.goto(f"{live_server.url}/submit/")
    page.fill("#id_manifest", BROKEN)
    page.click("button:has-text('Preview placement')")
    error = page.locator("#preview .yaml-error").first
    expect(error).to_be_visible(timeout=30_000)
    expect(error.locator(".line-no")).to_have_text("Line 12")
    expect(error.locator("pre.source")).to_contain_text("template: nowhere")
    # Submitting it stores nothing and keeps what was typed.
    page.click("button:has-text('Submit'):not(:has-text('Preview'))")
    expect(page.locator(".yaml-error").first).to_be_visible()
    expect(page.locator("#id_manifest")).to_have_value(BROKEN)
    assert WorkflowRun.objects.count() == 0
    page.close()


def test_a_run_of_2000_units_renders_and_stays_interactive(
    browser: Any, live_server: Any, demo: None
) -> None:
    from playwright.sync_api import expect

    run = make_run(User.objects.get(username="scientist"), units=chain_units(2000))
    page = login(browser, live_server.url, "scientist")
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    expect(page.locator("#run-live svg.dag g.node")).to_have_count(2000)
    expect(page.locator("#run-live svg.timeline rect.bar")).to_have_count(2000)
    # The page still answers: HTMX swaps in the next page of units and of decisions.
    page.locator("nav[aria-label='Pages of units'] a", has_text="Next").click()
    expect(page.locator("nav[aria-label='Pages of units']")).to_contain_text("Units 51")
    page.locator("nav[aria-label='Pages of decisions'] a", has_text="Next").click()
    expect(page.locator("nav[aria-label='Pages of decisions']")).to_contain_text("Decisions 26")
    page.close()


# --- the step panel, attempts, big fan-outs, narrow screens -------------------------------

LOG_LINES = b"loading model unet\ninference tile 1/4\ninference done: 4 tiles\n"


@pytest.fixture
def site_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Karmada answering for the sites (the live server runs in this process)."""
    from portal.karmada import logs, proxy

    def member_status(workflow: str) -> dict[str, Any]:
        node = {
            "id": f"{workflow}-1",
            "name": f"{workflow}.main",
            "displayName": "main",
            "type": "Pod",
            "templateName": "inference",
            "phase": "Succeeded",
        }
        return {"phase": "Succeeded", "nodes": {node["id"]: node}}

    monkeypatch.setattr(logs, "_member_status", member_status)
    monkeypatch.setattr(proxy, "pod_log", lambda *a, **k: iter([LOG_LINES]))


def _finished_demo_run(owner: User) -> WorkflowRun:
    from portal.models import UnitRun

    run = make_run(
        owner,
        status=RunStatus.SUCCEEDED,
        units=[
            ("ingest", "site-a", "Succeeded", []),
            ("preprocess", "site-b", "Succeeded", ["ingest"]),
            ("inference", "site-c", "Succeeded", ["preprocess"]),
        ],
    )
    UnitRun.objects.filter(run=run, name="inference").update(
        workflow_name=f"{run.name}-inference-1",
        outputs={
            "parameters": [{"name": "cloud-fraction", "value": "0.12"}],
            "artifacts": [{"name": "mask", "s3": {"bucket": "site-c-artifacts", "key": "m.tif"}}],
            "exitCode": "0",
        },
    )
    return run


def test_a_scientist_clicks_a_node_and_reads_its_logs_and_outputs(
    browser: Any, live_server: Any, live_executing: Stack
) -> None:
    """A finished demo run on a sandbox that really ran its steps: the inference step ran at
    site-c, a pull-mode site whose karmada-agent reported its impersonator secret (upstream's
    default), so its log comes through Karmada's cluster proxy like a push-mode site's."""
    from playwright.sync_api import expect

    scientist = User.objects.get(username="scientist")
    run = services.run_submit(user=scientist, body=EO_PIPELINE.read_text(), project="eo-demo")
    done = wait_for(
        lambda: WorkflowRun.objects.filter(pk=run.pk, finished_at__isnull=False).first(),
        180,
        "the demo run to finish",
    )
    assert done is not None and done.status == RunStatus.SUCCEEDED, done and done.message
    inference = done.units.get(name="inference")
    assert inference.site == "site-c"
    printed = inference.outputs["result"]  # the one line inference printed: its summary
    assert '"patches": 9' in printed

    page = login(browser, live_server.url, "scientist")
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    page.locator("#run-live svg.dag g.node[data-unit=inference]").click()
    panel = page.locator("#unit-panel")
    expect(panel).to_be_visible(timeout=30_000)
    expect(panel).to_contain_text("site-c", timeout=30_000)
    expect(panel).to_contain_text("masks", timeout=30_000)
    # Argo records the final output key-only (the site's default repository): its key shows.
    expect(panel).to_contain_text(f"{inference.workflow_name}/masks.tgz", timeout=30_000)
    log = panel.locator("pre.log-text")
    expect(log).to_contain_text(printed, timeout=30_000)
    expect(panel.locator(".logs-unavailable")).to_have_count(0)
    page.wait_for_url(re.compile(rf".*/runs/{run.pk}/units/inference/$"))
    # site-b is a push-mode site: its step's log comes the same way.
    page.locator("#run-live svg.dag g.node[data-unit=preprocess]").click()
    expect(log).to_contain_text("NDVI of 36 pixels from 4 band tiles", timeout=30_000)
    # The panel has its own address: a reload opens it again.
    page.wait_for_url(re.compile(rf".*/runs/{run.pk}/units/preprocess/$"))
    page.reload()
    expect(log).to_contain_text("NDVI of 36 pixels", timeout=30_000)
    page.close()


def test_the_panel_says_why_a_site_without_a_proxy_path_has_no_logs(
    browser: Any,
    live_server: Any,
    demo: None,
    request: pytest.FixtureRequest,
) -> None:
    """site-p's karmada-agent ran with `--report-secrets=None`: Karmada's proxy has no path."""
    from playwright.sync_api import expect

    ran_at: Callable[[WorkflowRun, str], None] = request.getfixturevalue("karmada_without_proxy")
    SiteFactory(name="site-p", sync_mode=SyncMode.PULL)
    run = _finished_demo_run(User.objects.get(username="scientist"))
    ran_at(run, "site-p")
    page = login(browser, live_server.url, "scientist")
    page.goto(f"{live_server.url}/runs/{run.pk}/units/inference/")
    why = page.locator("#unit-panel .logs-unavailable")
    expect(why).to_contain_text("site-p is a pull-mode site", timeout=30_000)
    expect(why).to_contain_text(f"kubectl logs -n portal {run.name}-inference-1 -c main")
    expect(page.locator("#unit-panel pre.log-text")).to_have_count(0)
    page.close()


def test_a_failed_over_unit_shows_both_attempts(browser: Any, live_server: Any, demo: None) -> None:
    from playwright.sync_api import expect

    from portal.models import RunEvent, UnitRun

    run = _finished_demo_run(User.objects.get(username="scientist"))
    unit = run.units.get(name="preprocess")
    RunEvent.objects.create(
        run=run,
        unit=unit,
        kind="failover",
        message="preprocess: site site-b not ready; attempt 2 at site-a",
        data={
            "ended_attempt": unit.attempt_record(ended="failed over", why="site site-b not ready")
        },
    )
    UnitRun.objects.filter(pk=unit.pk).update(attempt=2, site="site-a")
    page = login(browser, live_server.url, "scientist")
    page.goto(f"{live_server.url}/runs/{run.pk}/units/preprocess/")
    attempts = page.locator("#unit-panel ol.attempts li")
    expect(attempts).to_have_count(2, timeout=30_000)
    expect(attempts.first).to_contain_text("failed over: site site-b not ready")
    expect(attempts.first).to_have_class(re.compile("ended"))
    expect(page.locator("#run-live svg.dag g.node.retried rect.ghost")).to_have_count(1)
    expect(page.locator("#run-events")).to_contain_text("attempt 2 at site-a")
    page.close()


def test_a_500_item_fan_out_draws_fewer_than_50_nodes_and_stays_interactive(
    browser: Any, live_server: Any, demo: None
) -> None:
    from playwright.sync_api import expect

    from portal.models import UnitRun
    from tests.factories import UnitRunFactory

    run = make_run(
        User.objects.get(username="scientist"), units=[("prepare", "site-a", "Succeeded", [])]
    )
    UnitRun.objects.bulk_create(
        [
            UnitRunFactory.build(
                run=run,
                name=f"tile({i}:{i})",
                slug=f"tile-{i}",
                position=i + 1,
                upstream=["prepare"],
                planned_site="site-b" if i % 2 else "site-c",
                phase="Succeeded",
                spec={"task": "tile", "item_index": i},
            )
            for i in range(500)
        ]
    )
    page = login(browser, live_server.url, "scientist")
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    nodes = page.locator("#run-live svg.dag g.node")
    assert 0 < nodes.count() < 50
    expect(page.locator("#run-live svg.dag g.node.group")).to_have_attribute("data-items", "500")
    expect(page.locator("table.groups")).to_contain_text("site-b 250")
    # Interactive: the units table filters by site, and a row opens the step panel.
    page.select_option("#unit-site", "site-c")
    expect(page.locator("#units-h")).to_contain_text("250 of 501", timeout=30_000)
    page.locator("table.units a.unit-name").first.click()
    expect(page.locator("#unit-panel")).to_contain_text("site-c", timeout=30_000)
    page.locator("table.groups a.expand-group").click()
    expect(page.locator("#run-live svg.dag g.node")).to_have_count(501, timeout=30_000)
    page.close()


def test_the_pages_have_no_horizontal_scroll_at_390_px(
    browser: Any, live_server: Any, demo: None, site_logs: None
) -> None:
    run = _finished_demo_run(User.objects.get(username="scientist"))
    page = login(browser, live_server.url, "scientist")
    page.set_viewport_size({"width": 390, "height": 844})
    for path in (
        "/runs/",
        f"/runs/{run.pk}/",
        f"/runs/{run.pk}/units/inference/",
        "/submit/",
        "/fleet/",
    ):
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("networkidle")
        wide = page.evaluate("document.documentElement.scrollWidth")
        culprits = page.evaluate(
            "[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect()"
            ".right > 392).slice(0, 5).map(e => e.tagName + '.' + e.className)"
        )
        assert wide <= 390, f"{path} is {wide} px wide: {culprits}"
    page.close()
