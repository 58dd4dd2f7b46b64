"""Usage and cost: requests times wall time times the site's prices, bytes moved
times the link's price, in Decimal cents that reconcile: the units' costs sum to the run's
total and to the project's total for the period; ``/api/v1/usage/`` and its CSV."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from portal.choices import UnitPhase
from portal.models import PlacementDecision, UnitRun, WorkflowRun
from portal.quotas.admission import Amount
from portal.quotas.models import SitePrice
from portal.quotas.usage import Prices, cents, unit_cost
from sites.models import Project, Site, SiteLink
from tests.factories import UnitRunFactory, UserFactory, WorkflowRunFactory

GIB = 2**30


def test_a_units_cost_is_requests_times_hours_times_prices() -> None:
    prices = Prices(Decimal("0.05"), Decimal("0.01"), Decimal("2.50"))
    cost = unit_cost(Amount(2000, 4 * GIB, 1), Decimal(1800), prices)
    assert cost.cpu_seconds == Decimal(3600)
    assert cost.memory_gib_seconds == Decimal(7200)
    assert cost.gpu_seconds == Decimal(1800)
    # 2 CPU x 0.5 h x 0.05 + 4 GiB x 0.5 h x 0.01 + 1 GPU x 0.5 h x 2.50 = 0.05 + 0.02 + 1.25
    assert cost.compute == Decimal("1.32")
    assert unit_cost(
        Amount(), Decimal(0), prices, bytes_moved=3 * 10**9, cost_per_gb=Decimal("0.09")
    ).transfer == Decimal("0.27")


def test_actual_usage_counts_where_it_is_larger_than_the_request() -> None:
    prices = Prices(cpu_hour=Decimal(1))
    asked = unit_cost(Amount(1000), Decimal(3600), prices)
    used_more = unit_cost(Amount(1000), Decimal(3600), prices, actual=Amount(3000))
    used_less = unit_cost(Amount(1000), Decimal(3600), prices, actual=Amount(500))
    assert (asked.compute, used_more.compute, used_less.compute) == (
        Decimal("1.00"),
        Decimal("3.00"),
        Decimal("1.00"),
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 64000), st.integers(0, 2**36), st.integers(0, 8), st.integers(0, 10**6)
        ),
        min_size=1,
        max_size=30,
    ),
    st.decimals(min_value=0, max_value=10, places=6),
)
def test_costs_are_cents_and_their_sum_is_exact(
    units: list[tuple[int, int, int, int]], price: Decimal
) -> None:
    prices = Prices(price, price, price)
    costs = [unit_cost(Amount(c, m, g), Decimal(s), prices) for c, m, g, s in units]
    assert all(c.compute == cents(c.compute) for c in costs)
    total = sum((c.compute for c in costs), Decimal(0))
    assert total == cents(total)  # a sum of cents needs no rounding: it reconciles


@pytest.fixture
def priced(db: Any) -> tuple[Site, Site]:
    a = Site.objects.create(name="site-a")
    b = Site.objects.create(name="site-b")
    SitePrice.objects.create(site=b, cpu_hour=Decimal("0.04"), memory_gib_hour=Decimal("0.005"))
    SiteLink.objects.create(source=a, target=b, bandwidth_mbps=1000, cost_per_gb=Decimal("0.02"))
    return a, b


def ran(run: WorkflowRun, name: str, cpu: int, seconds: int, *, ended_days_ago: int = 0) -> UnitRun:
    end = timezone.now() - timedelta(days=ended_days_ago)
    unit: UnitRun = UnitRunFactory(
        run=run,
        name=name,
        planned_site="site-b",
        site="site-b",
        phase=UnitPhase.SUCCEEDED,
        spec={"resources": {"cpu_millicores": cpu, "memory_bytes": GIB, "gpus": 0}},
    )
    UnitRun.objects.filter(pk=unit.pk).update(
        started_at=end - timedelta(seconds=seconds), finished_at=end
    )
    return unit


def copied(run: WorkflowRun, name: str, nbytes: int | None, source: str = "site-a") -> UnitRun:
    """A transfer unit at site-b that copied ``nbytes`` from ``source``."""
    unit = ran(run, name, 0, 2)
    outputs = (
        {"parameters": [{"name": "bytes", "value": str(nbytes)}]} if nbytes is not None else {}
    )
    UnitRun.objects.filter(pk=unit.pk).update(
        kind="transfer",
        spec={
            "kind": "transfer",
            "resources": {},
            "transfer": {
                "producer": "write",
                "from": source,
                "to": "site-b",
                "for": "site-c",
                "estimate": {"bytes": 1, "seconds": 1.0, "cost": 0.0},
            },
        },
        outputs=outputs,
    )
    unit.refresh_from_db()
    return unit


def two_runs_of_eo_demo() -> tuple[WorkflowRun, WorkflowRun]:
    """Two runs of eo-demo: the first with three steps, a copy and a step whose bytes the
    planner counted; the second with a step this month and one 40 days ago."""
    eo = Project.objects.create(name="eo-demo")
    first: WorkflowRun = WorkflowRunFactory(project=eo)
    second: WorkflowRun = WorkflowRunFactory(project=eo)
    # 1 CPU, 1 GiB for 1 h at site-b: 0.04 + 0.005 = 0.045 -> 0.05 (half up) each
    for i in range(3):
        ran(first, f"a{i}", 1000, 3600)
    copied(first, "write-copy-site-b", 5 * 10**9)  # 5 GB over site-a -> site-b at 0.02
    # A step's bytes the planner counted are an estimate, not a transfer: not priced.
    step = ran(first, "reads-across", 0, 0)
    PlacementDecision.objects.create(
        run=first,
        unit=step,
        source="rule",
        site="site-b",
        candidates=[{"site": "site-b", "bytes_to_move": 7 * 10**9}],
    )
    ran(second, "b0", 2000, 1800)  # 2 x 0.5 x 0.04 + 0.5 x 0.005 = 0.0425 -> 0.04
    ran(second, "old", 1000, 3600, ended_days_ago=40)
    return first, second


def test_the_run_detail_has_its_cost_and_the_usage_endpoint_reconciles(
    priced: tuple[Site, Site], api_client_for: Any, staff: User
) -> None:
    first, second = two_runs_of_eo_demo()
    api = api_client_for(staff)
    detail = api.get(f"/api/v1/runs/{first.pk}/").json()
    assert detail["cost"] == {
        "compute": "0.15",
        "transfer": "0.10",
        "total": "0.25",
        "currency": "EUR",
    }
    # The transfer unit's own cost in REST is the run's transfer cost, to the cent.
    (shown,) = [u for u in detail["units"] if u["kind"] == "transfer"]
    assert shown["transfer"]["bytes"] == 5 * 10**9 and shown["transfer"]["cost"] == "0.10"
    other = api.get(f"/api/v1/runs/{second.pk}/").json()["cost"]
    assert other["total"] == "0.09"
    # The units' costs sum to the run's total, to the cent.
    from portal.quotas.usage import run_cost_panel

    for run, cost in ((first, detail["cost"]), (second, other)):
        units = run_cost_panel(run, shown=1000)["unit_costs"]
        assert sum(Decimal(u["total"]) for u in units) == Decimal(cost["total"])
        assert sum(Decimal(u["compute"]) for u in units) == Decimal(cost["compute"])

    since = (timezone.now() - timedelta(days=30)).date().isoformat()
    body = api.get(f"/api/v1/usage/?project=eo-demo&from={since}&group_by=run").json()
    assert body["total"] == "0.29"  # 0.25 + 0.04: the 40-day-old unit is outside the period
    assert {r["key"]: r["total"] for r in body["rows"]} == {first.name: "0.25", second.name: "0.04"}
    assert sum(Decimal(r["total"]) for r in body["rows"]) == Decimal(body["total"])
    by_site = api.get("/api/v1/usage/?project=eo-demo&group_by=site").json()
    assert by_site["total"] == "0.34" and by_site["rows"][0]["key"] == "site-b"
    assert by_site["rows"][0]["cpu_seconds"] == "18000.000"
    assert by_site["rows"][0]["bytes_by_link"] == {"site-a>site-b": 5 * 10**9}
    assert by_site["rows"][0]["transfer"] == "0.10"

    csv = api.get("/api/v1/usage/?project=eo-demo&group_by=day&export=csv")
    assert csv["Content-Type"].startswith("text/csv")
    lines = csv.content.decode().splitlines()
    assert lines[0] == (
        "day,units,cpu_seconds,memory_gib_seconds,gpu_seconds,bytes_moved,"
        "bytes site-a>site-b,compute,transfer,total,currency"
    )
    total = lines[-1].split(",")
    assert total[0] == "total" and total[1] == "7"
    assert total[5:] == [str(5 * 10**9), str(5 * 10**9), "0.24", "0.10", "0.34", "EUR"]


def test_a_transfer_is_priced_by_the_bytes_it_reported_over_its_own_link(
    priced: tuple[Site, Site], api_client_for: Any, staff: User
) -> None:
    """Each copy at its own link's price (a dearer link into the same site does not price
    it); a copy that reported no bytes yet costs nothing; REST, run and usage agree."""
    _, b = priced
    c = Site.objects.create(name="site-c")
    SiteLink.objects.create(source=c, target=b, bandwidth_mbps=10, cost_per_gb=Decimal("0.90"))
    eo = Project.objects.create(name="eo-demo")
    run: WorkflowRun = WorkflowRunFactory(project=eo)
    copied(run, "x-copy-site-b", 1_234_567_890)  # 1.23456789 GB x 0.02 = 0.0247 -> 0.02
    copied(run, "y-copy-site-b", 2 * 10**9, source="site-c")  # 2 GB x 0.90 = 1.80
    copied(run, "z-copy-site-b", None)  # has not reported: nothing moved
    api = api_client_for(staff)
    detail = api.get(f"/api/v1/runs/{run.pk}/").json()
    shown = {u["name"]: u["transfer"]["cost"] for u in detail["units"] if u["kind"] == "transfer"}
    assert shown["x-copy-site-b"] == "0.02" and shown["y-copy-site-b"] == "1.80"
    assert detail["cost"]["transfer"] == "1.82"
    body = api.get("/api/v1/usage/?project=eo-demo&group_by=run").json()
    (row,) = body["rows"]
    assert row["transfer"] == "1.82" and body["transfer"] == "1.82"
    assert row["bytes_by_link"] == {"site-a>site-b": 1_234_567_890, "site-c>site-b": 2 * 10**9}


@pytest.mark.parametrize(
    ("query", "path"),
    [("group_by=week", "group_by"), ("from=yesterday", "from"), ("to=2026-13-40", "to")],
)
def test_bad_usage_queries_are_400s_naming_the_field(
    db: Any, api_client_for: Any, staff: User, query: str, path: str
) -> None:
    answer = api_client_for(staff).get(f"/api/v1/usage/?{query}")
    assert answer.status_code == 400
    assert answer.json()["errors"][0]["path"] == path


def test_usage_shows_only_the_runs_a_user_may_see(
    priced: tuple[Site, Site], scientist_api: APIClient
) -> None:
    mine = WorkflowRunFactory(project=Project.objects.get(name="eo"))
    theirs = WorkflowRunFactory(project=Project.objects.create(name="secret"))
    ran(mine, "m", 1000, 3600)
    ran(theirs, "t", 1000, 3600)
    body = scientist_api.get("/api/v1/usage/?group_by=project").json()
    assert [r["key"] for r in body["rows"]] == ["eo"]


def test_the_run_page_shows_its_cost_and_its_queued_units(
    priced: tuple[Site, Site], client_for: Any, staff: User
) -> None:
    from portal.quotas.admit import admit
    from portal.quotas.models import Quota

    eo = Project.objects.create(name="eo-demo")
    run: WorkflowRun = WorkflowRunFactory(project=eo)
    ran(run, "done", 1000, 3600)
    Quota.objects.create(project=eo, site=priced[1], cpu_millicores=1000, borrow_cpu_millicores=0)
    waiting: UnitRun = UnitRunFactory(
        run=run,
        name="waits",
        planned_site="site-b",
        site="site-b",
        spec={"resources": {"cpu_millicores": 2000, "memory_bytes": 0, "gpus": 0}},
    )
    assert admit(run, [waiting]) == []
    page = client_for(staff).get(f"/runs/{run.pk}/").content.decode()
    assert 'id="run-cost"' in page and "0.05 EUR" in page
    assert 'id="run-queue"' in page
    # The units table, which the page polls, marks it Queued with its place in the queue.
    assert '<span class="phase phase-Queued">Queued</span>' in page
    assert "#1 in eo-demo's queue at site-b" in page
    assert (
        "it asks for 2 CPU, more than eo-demo&#x27;s quota at site-b ever allows "
        "(1 with borrowing); an operator must raise it"
    ) in page


def test_the_run_page_lists_the_costliest_units_of_a_big_run_not_every_unit(
    priced: tuple[Site, Site], client_for: Any, staff: User
) -> None:
    from portal.quotas.usage import run_cost_panel
    from portal.selectors.runs import COSTS_SHOWN

    run: WorkflowRun = WorkflowRunFactory(project=Project.objects.create(name="eo-demo"))
    for i in range(COSTS_SHOWN + 10):
        ran(run, f"tile-{i:03d}", 1000, 3600 * (i + 1))  # the later, the costlier
    panel = run_cost_panel(run, shown=COSTS_SHOWN)
    assert panel["unit_costs_total"] == COSTS_SHOWN + 10
    names = [u["name"] for u in panel["unit_costs"]]
    assert names == [f"tile-{i:03d}" for i in range(COSTS_SHOWN + 9, 9, -1)]
    # The run's total still counts every unit, not only those listed.
    every = run_cost_panel(run, shown=COSTS_SHOWN + 10)
    assert panel["cost"] == every["cost"]
    assert sum(Decimal(u["total"]) for u in every["unit_costs"]) == Decimal(panel["cost"]["total"])
    page = client_for(staff).get(f"/runs/{run.pk}/").content.decode()
    assert f"The {COSTS_SHOWN} costliest of {COSTS_SHOWN + 10} units" in page
    panel_html = page[page.index('id="run-cost"') :].split("</section>")[0]
    assert "<td>tile-009</td>" not in panel_html and "<td>tile-059</td>" in panel_html


def test_a_big_runs_page_asks_for_its_cost_panel_when_shown_and_the_panel_prices_every_unit(
    priced: tuple[Site, Site], client_for: Any, staff: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    from portal.quotas.usage import run_cost_panel

    monkeypatch.setattr("portal.views.runs.LARGE_RUN_UNITS", 5)
    run: WorkflowRun = WorkflowRunFactory(project=Project.objects.create(name="eo-demo"))
    for i in range(8):
        ran(run, f"tile-{i:03d}", 1000, 3600 * (i + 1))
    web = client_for(staff)
    page = web.get(f"/runs/{run.pk}/").content.decode()
    section = page[page.index('id="run-cost"') :].split("</section>")[0]
    # Not priced with the page: the section asks for the panel once it scrolls into view.
    assert f'hx-get="/runs/{run.pk}/cost/"' in section and 'hx-trigger="revealed"' in section
    assert "Pricing 8 units" in section and "EUR" not in section
    panel = web.get(f"/runs/{run.pk}/cost/")
    assert panel.status_code == 200
    html = panel.content.decode()
    expected = run_cost_panel(run, shown=50)["cost"]
    assert f"<strong>{expected['total']} {expected['currency']}</strong>" in html
    assert "hx-get" not in html and "<td>tile-007</td>" in html
    # Another user's run is not found, as its page is not.
    other = client_for(UserFactory(username="someone-else"))
    assert other.get(f"/runs/{run.pk}/cost/").status_code == 404


def test_metrics_carry_usage_cost_and_quota_per_project_and_site(
    priced: tuple[Site, Site], api_client: APIClient
) -> None:
    from portal.quotas import metrics
    from portal.quotas.models import Quota

    eo = Project.objects.create(name="eo-demo")
    run: WorkflowRun = WorkflowRunFactory(project=eo)
    ran(run, "done", 2000, 3600)
    copied(run, "write-copy-site-b", 3 * 10**9)  # 3 GB at 0.02 per GB
    Quota.objects.create(project=eo, site=priced[1], cpu_millicores=8000)
    metrics.refresh(force=True)
    text = api_client.get("/metrics").content.decode()
    assert 'portal_usage_cpu_seconds_total{project="eo-demo",site="site-b"} 7200.0' in text
    assert 'portal_cost_total{kind="compute",project="eo-demo",site="site-b"} 0.09' in text
    assert 'portal_cost_total{kind="transfer",project="eo-demo",site="site-b"} 0.06' in text
    assert (
        'portal_transfer_bytes_total{project="eo-demo",source="site-a",target="site-b"} 3e+09'
    ) in text
    assert 'portal_quota_cpu{project="eo-demo",site="site-b"} 8.0' in text


# Budgets


def spend(project: Project, site: str, template: str, cpu: int, seconds: int) -> None:
    run: WorkflowRun = WorkflowRunFactory(project=project)
    unit: UnitRun = UnitRunFactory(
        run=run,
        name=f"spent-{template}",
        template=template,
        planned_site=site,
        site=site,
        phase=UnitPhase.SUCCEEDED,
        spec={"resources": {"cpu_millicores": cpu, "memory_bytes": 0, "gpus": 0}},
    )
    end = timezone.now()
    UnitRun.objects.filter(pk=unit.pk).update(
        started_at=end - timedelta(seconds=seconds), finished_at=end
    )


@pytest.fixture
def demo_priced(db: Any) -> Project:
    from django.core.management import call_command

    call_command("load_demo", verbosity=0)
    for site in Site.objects.all():
        SitePrice.objects.create(site=site, cpu_hour=Decimal(1))
    return Project.objects.get(name="eo-demo")


DEMO = (Path(__file__).resolve().parents[2] / "examples" / "eo-pipeline.yaml").read_text()


def submit(project: str = "eo-demo") -> Any:
    client = APIClient()
    client.force_authenticate(User.objects.get(username="scientist"))
    return client.post(
        f"/api/v1/runs/?project={project}", data=DEMO, content_type="application/yaml"
    )


def test_past_80_percent_a_run_carries_a_budget_warning(demo_priced: Project) -> None:
    from portal.models import RunEvent
    from portal.quotas.models import Budget

    Budget.objects.create(project=demo_priced, monthly=Decimal("1.00"))
    assert not RunEvent.objects.filter(message__contains="budget").exists()
    spend(demo_priced, "site-b", "old", 1000, 3060)  # 0.85 of 1.00
    answer = submit()
    assert answer.status_code == 201, answer.content
    warning = RunEvent.objects.get(run_id=answer.json()["id"], message__contains="budget")
    assert warning.message.startswith(
        "project: budget: eo-demo has spent 0.85 of its 1.00 EUR budget this month"
    )


def test_a_hard_stop_refuses_a_run_past_the_budget_with_the_estimate(demo_priced: Project) -> None:
    from portal.quotas.models import Budget

    Budget.objects.create(project=demo_priced, monthly=Decimal("1.00"), hard_stop=True)
    spend(demo_priced, "site-b", "old", 1000, 3600)  # 1.00 of 1.00
    answer = submit()
    assert answer.status_code == 400
    error = answer.json()["errors"][0]
    assert error["path"] == "project"
    assert "over budget: eo-demo has spent 1.00 of its 1.00 EUR budget" in error["message"]
    assert (
        "this run's estimate is 0.00 EUR (3 steps without history not counted)" in error["message"]
    )
    assert not WorkflowRun.objects.filter(owner__username="scientist").exists()
    usage = APIClient()
    usage.force_authenticate(User.objects.get(username="scientist"))
    budget = usage.get("/api/v1/usage/?project=eo-demo").json()["budget"]
    assert budget["spent"] == "1.00" and budget["left"] == "0.00" and budget["warning"] is True


def test_the_estimate_is_requests_times_the_templates_past_wall_time(demo_priced: Project) -> None:
    from portal.quotas import budgets

    spend(demo_priced, "site-b", "work", 1000, 3600)
    guess = budgets.estimate(
        demo_priced,
        [
            ("work", Amount(2000), "site-b"),
            ("work", Amount(500), "site-c"),
            ("new", Amount(1), "site-b"),
        ],
    )
    assert guess.total == Decimal("2.50") and guess.unknown == 1


def test_the_preview_shows_the_runs_estimate(demo_priced: Project) -> None:
    spend(demo_priced, "site-a", "ingest", 1000, 3600)
    client = APIClient()
    client.force_authenticate(User.objects.get(username="scientist"))
    answer = client.post(
        "/api/v1/runs/preview/?project=eo-demo", data=DEMO, content_type="application/yaml"
    )
    assert answer.status_code == 200
    estimate = answer.json()["estimate"]
    assert estimate["currency"] == "EUR" and estimate["steps_without_history"] == 2
    assert Decimal(estimate["compute"]) > 0


def test_the_submit_pages_preview_shows_the_estimate(demo_priced: Project) -> None:
    from django.test import Client

    spend(demo_priced, "site-a", "ingest", 1000, 3600)
    browser = Client()
    browser.force_login(User.objects.get(username="scientist"))
    page = browser.post(
        "/submit/preview/", {"manifest": DEMO, "project": "eo-demo"}, HTTP_HX_REQUEST="true"
    ).content.decode()
    assert 'id="preview-estimate"' in page
    assert "(2 steps never ran in this project: not counted)" in page


def test_the_preview_estimate_includes_the_planned_transfers(demo_priced: Project) -> None:
    """A GPU read (site-c) of what a step at site-a wrote needs a copy at site-b: the
    estimate prices its bytes at the site-a -> site-b link, as the run's cost will."""
    from tests.integration.test_transfers import WRITE
    from tests.portal import helpers

    helpers.pin("write", "site-a", prefix="pin")
    SiteLink.objects.filter(source__name="site-a", target__name="site-b").update(
        cost_per_gb=Decimal("0.50")
    )
    client = APIClient()
    client.force_authenticate(User.objects.get(username="scientist"))
    answer = client.post(
        "/api/v1/runs/preview/?project=eo-demo",
        data=helpers.write_then_read(WRITE, helpers.READ_ON_GPU),
        content_type="application/yaml",
    )
    assert answer.status_code == 200, answer.content
    body = answer.json()
    (copy,) = body["transfers"]
    assert (copy["from"], copy["via"], copy["to"]) == ("site-a", "site-b", "site-c")
    expected = cents(Decimal(copy["bytes"]) / Decimal(10**9) * Decimal("0.50"))
    assert expected > 0
    estimate = body["estimate"]
    assert Decimal(estimate["transfer"]) == expected
    assert Decimal(estimate["total"]) == Decimal(estimate["compute"]) + expected
