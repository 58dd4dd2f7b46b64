"""Quotas against the database (``portal.quotas.admit`` and the modules it drives) and over
REST: units over their project's quota are queued with why and their position, admitted as
quota frees, higher priority first; ``/api/v1/quotas/`` for fleet staff."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from rest_framework.test import APIClient

from portal.choices import UnitPhase, UnitTiming
from portal.models import UnitRun, WorkflowRun
from portal.quotas.admit import admit
from portal.quotas.holdings import used_at
from portal.quotas.models import PriorityClass, ProjectDefaults, Quota, Workload
from portal.quotas.overview import queue_of
from portal.quotas.priorities import run_priority
from portal.quotas.waking import wake
from sites.models import Project, Site
from tests.factories import UnitRunFactory, WorkflowRunFactory
from tests.portal import quota_runs
from tests.portal.quota_runs import CPU, pending, start


@pytest.fixture
def site_b(db: Any) -> Site:
    return Site.objects.create(name="site-b")


@pytest.fixture
def eo(db: Any) -> Project:
    return Project.objects.create(name="eo-demo")


def fan_out(project: Project, n: int, *, cpu: int = CPU, priority: int = 0) -> WorkflowRun:
    return quota_runs.tiles(project, "site-b", n, cpu=cpu, priority=priority)


def finish(unit: UnitRun) -> None:
    UnitRun.objects.filter(pk=unit.pk).update(phase=UnitPhase.SUCCEEDED)


def test_a_fan_out_over_its_quota_is_queued_with_why_and_position(
    site_b: Site, eo: Project
) -> None:
    Quota.objects.create(project=eo, site=site_b, cpu_millicores=8 * CPU, borrow_cpu_millicores=0)
    run = fan_out(eo, 12)
    admitted = admit(run, pending(run))
    assert [u.name for u in admitted] == [f"tile-{i}" for i in range(8)]
    queued = queue_of(pending(run))
    assert len(queued) == 4
    first = queued[run.units.get(name="tile-8").pk]
    assert first.position == 1
    assert first.reason == "eo-demo uses 8 of 8 CPU at site-b; waiting for quota"
    assert queued[run.units.get(name="tile-11").pk].position == 4
    # Every queued unit's message says why (the run page's table shows it).
    assert run.units.get(name="tile-9").message == f"queued: {first.reason}"
    # Asked again before anything ended: nothing more is admitted, nothing admitted twice.
    start(admitted)
    assert admit(run, pending(run)) == []
    assert Workload.objects.filter(run=run, admitted_at__isnull=False).count() == 8


def test_the_queue_of_a_big_run_is_read_with_its_units_as_one_parameter(
    site_b: Site, eo: Project
) -> None:
    """A 10,000-unit run's answer asks for its queued units by id: one array (``__any``),
    not a placeholder per id that the client splices into the statement."""
    Quota.objects.create(project=eo, site=site_b, cpu_millicores=2 * CPU, borrow_cpu_millicores=0)
    run = fan_out(eo, 6)
    admit(run, pending(run))
    with CaptureQueriesContext(connection) as read:
        queued = queue_of(pending(run))
    assert sorted(e.position for e in queued.values()) == [1, 2, 3, 4]
    mine = next(q["sql"] for q in read.captured_queries if "portal_workload" in q["sql"])
    assert "= ANY(" in mine and " IN (" not in mine
    assert Workload.objects.filter(unit_id__any=[]).count() == 0


def test_nothing_is_read_of_the_queue_where_no_quota_exists(site_b: Site, eo: Project) -> None:
    run = fan_out(eo, 3)
    with CaptureQueriesContext(connection) as read:
        assert queue_of(pending(run)) == {}
    assert not [q for q in read.captured_queries if "portal_workload" in q["sql"]]


def test_a_unit_ending_admits_the_next_and_wakes_other_runs(site_b: Site, eo: Project) -> None:
    Quota.objects.create(project=eo, site=site_b, cpu_millicores=2 * CPU, borrow_cpu_millicores=0)
    first = fan_out(eo, 2)
    start(admit(first, pending(first)))
    second = fan_out(eo, 3)
    assert admit(second, pending(second)) == []
    finish(first.units.get(name="tile-0"))
    assert wake(first) == [second.pk]
    assert wake(first) == []  # once per end
    admitted = admit(second, pending(second))
    assert [u.name for u in admitted] == ["tile-0"]
    assert queue_of(pending(second))[second.units.get(name="tile-1").pk].position == 1


def test_higher_priority_goes_first_then_submission_order(site_b: Site, eo: Project) -> None:
    Quota.objects.create(project=eo, site=site_b, cpu_millicores=1 * CPU, borrow_cpu_millicores=0)
    running = fan_out(eo, 1)
    start(admit(running, pending(running)))
    bulk = fan_out(eo, 3)
    admit(bulk, pending(bulk))
    urgent = fan_out(eo, 1, priority=100)
    admit(urgent, pending(urgent))
    entry = queue_of(pending(urgent))[urgent.units.get().pk]
    assert entry.position == 1  # ahead of the bulk run's three, queued before it
    finish(running.units.get())
    # The bulk run's advance comes first: its tile stays behind the urgent unit.
    assert admit(bulk, pending(bulk)) == []
    assert [u.name for u in admit(urgent, pending(urgent))] == ["tile-0"]


def test_a_project_within_nominal_is_not_blocked_by_anothers_borrowing(site_b: Site) -> None:
    a, b = Project.objects.create(name="a"), Project.objects.create(name="b")
    Quota.objects.create(project=a, site=site_b, cpu_millicores=4 * CPU)
    Quota.objects.create(project=b, site=site_b, cpu_millicores=4 * CPU)
    greedy = fan_out(a, 10)
    start(admit(greedy, pending(greedy)))
    assert greedy.units.filter(phase=UnitPhase.RUNNING).count() == 8  # 4 + 4 borrowed
    small = fan_out(b, 1)
    assert len(admit(small, pending(small))) == 1


def test_units_without_a_quota_pass(site_b: Site, eo: Project) -> None:
    run = fan_out(eo, 20)
    assert len(admit(run, pending(run))) == 20  # no quota anywhere
    other = Project.objects.create(name="other")
    Quota.objects.create(project=other, site=site_b, cpu_millicores=0)
    assert len(admit(run, pending(run))) == 20  # none for eo-demo
    assert not Workload.objects.exists()


# REST


@pytest.fixture
def staff_api(api_client_for: Any, staff: User) -> APIClient:
    return api_client_for(staff)


BODY = {
    "project": "eo-demo",
    "site": "site-b",
    "cpu": "8",
    "memory": "32Gi",
    "gpu": 0,
    "borrowing": {"cpu": "0", "memory": "0", "gpu": 0},
}


def test_fleet_staff_post_a_quota_as_the_issue_spells_it(
    staff_api: APIClient, site_b: Site, eo: Project
) -> None:
    answer = staff_api.post("/api/v1/quotas/", BODY, format="json")
    assert answer.status_code == 201, answer.content
    assert {k: answer.json()[k] for k in BODY} == BODY
    q = Quota.objects.get()
    assert (q.cpu_millicores, q.memory_bytes, q.borrow_cpu_millicores) == (8000, 32 * 2**30, 0)
    again = staff_api.post("/api/v1/quotas/", BODY, format="json")
    assert again.status_code == 400
    assert again.json()["errors"][0]["path"] == "site"


@pytest.mark.parametrize(
    ("field", "value", "path"),
    [
        ("cpu", "lots", "cpu"),
        ("memory", "-1Gi", "memory"),
        ("gpu", "1.5", "gpu"),
        ("borrowing", {"cpu": "x"}, "borrowing.cpu"),
        ("project", "nobody", "project"),
        ("site", "site-z", "site"),
    ],
)
def test_bad_quota_input_is_a_400_naming_the_field(
    staff_api: APIClient, site_b: Site, eo: Project, field: str, value: Any, path: str
) -> None:
    answer = staff_api.post("/api/v1/quotas/", {**BODY, field: value}, format="json")
    assert answer.status_code == 400
    assert [e["path"] for e in answer.json()["errors"]] == [path]
    assert not Quota.objects.exists()


def test_scientists_read_quotas_with_current_use_but_cannot_write(
    scientist_api: APIClient, site_b: Site, eo: Project
) -> None:
    assert scientist_api.post("/api/v1/quotas/", BODY, format="json").status_code == 403
    Quota.objects.create(project=eo, site=site_b, cpu_millicores=2 * CPU, borrow_cpu_millicores=0)
    run = fan_out(eo, 3, cpu=1500)
    start(admit(run, pending(run)))
    rows = scientist_api.get("/api/v1/quotas/").json()
    assert rows[0]["used"] == {"cpu": "1500m", "memory": "0", "gpu": 0, "queued_units": 2}
    assert rows[0]["borrowing"] == {"cpu": "0", "memory": None, "gpu": None}


def test_the_run_shows_queued_units_and_its_priority_class(
    api_client_for: Any, staff: User, site_b: Site, eo: Project
) -> None:
    Quota.objects.create(project=eo, site=site_b, cpu_millicores=1 * CPU, borrow_cpu_millicores=0)
    PriorityClass.objects.create(name="urgent", value=100)
    run = fan_out(eo, 2, priority=100)
    WorkflowRun.objects.filter(pk=run.pk).update(
        compiled={"priority_class": {"name": "urgent", "value": 100}}
    )
    admit(run, pending(run))
    api = api_client_for(staff)
    body = api.get(f"/api/v1/runs/{run.pk}/").json()
    assert body["priority_class"] == "urgent"
    phases = {u["name"]: (u["phase"], u.get("queue")) for u in body["units"]}
    assert phases["tile-0"] == ("Pending", None)
    assert phases["tile-1"] == (
        "Queued",
        {"position": 1, "reason": "eo-demo uses 1 of 1 CPU at site-b; waiting for quota"},
    )
    unit = api.get(f"/api/v1/runs/{run.pk}/units/tile-1/").json()
    assert unit["phase"] == "Queued" and unit["queue"]["position"] == 1


# Priority at submission


DEMO = (Path(__file__).resolve().parents[2] / "examples" / "eo-pipeline.yaml").read_text()


@pytest.fixture
def demo_sci(db: Any) -> APIClient:
    call_command("load_demo", verbosity=0)
    client = APIClient()
    client.force_authenticate(User.objects.get(username="scientist"))
    return client


def test_a_run_submitted_over_rest_carries_its_priority_class(demo_sci: APIClient) -> None:
    PriorityClass.objects.create(name="urgent", value=100)
    body = {"manifest": yaml.safe_load(DEMO), "project": "eo-demo", "priority_class": "urgent"}
    answer = demo_sci.post("/api/v1/runs/", data=json.dumps(body), content_type="application/json")
    assert answer.status_code == 201, answer.content
    assert answer.json()["priority_class"] == "urgent"
    run = WorkflowRun.objects.get(pk=answer.json()["id"])
    assert run_priority(run) == ("urgent", 100)
    # Resubmitted, it keeps its class.
    again = demo_sci.post(f"/api/v1/runs/{run.pk}/resubmit/")
    assert again.status_code == 201 and again.json()["priority_class"] == "urgent"


def test_without_a_class_the_projects_default_applies(demo_sci: APIClient) -> None:
    bulk = PriorityClass.objects.create(name="bulk", value=-10)
    ProjectDefaults.objects.create(project=Project.objects.get(name="eo-demo"), priority_class=bulk)
    answer = demo_sci.post(
        "/api/v1/runs/?project=eo-demo", data=DEMO, content_type="application/yaml"
    )
    assert answer.status_code == 201
    assert answer.json()["priority_class"] == "bulk"


def test_an_unknown_priority_class_is_a_400_naming_the_field(demo_sci: APIClient) -> None:
    body = {"manifest": yaml.safe_load(DEMO), "project": "eo-demo", "priority_class": "vip"}
    answer = demo_sci.post("/api/v1/runs/", data=json.dumps(body), content_type="application/json")
    assert answer.status_code == 400
    assert answer.json()["errors"][0]["path"] == "priority_class"
    assert not WorkflowRun.objects.exists()


def test_the_submit_form_offers_and_applies_a_priority_class(demo_sci: APIClient) -> None:
    PriorityClass.objects.create(name="urgent", value=100)
    browser = Client()
    browser.force_login(User.objects.get(username="scientist"))
    assert 'name="priority_class"' in browser.get(reverse("ui-submit")).content.decode()
    answer = browser.post(
        reverse("ui-submit"),
        {"manifest": DEMO, "project": "eo-demo", "priority_class": "urgent", "action": "submit"},
    )
    assert answer.status_code == 302, answer.content[:500]
    assert run_priority(WorkflowRun.objects.get()) == ("urgent", 100)


def test_fleet_staff_set_quotas_and_classes_in_the_admin(client_for: Any, superuser: User) -> None:
    Site.objects.create(name="site-b")
    eo = Project.objects.create(name="eo-demo")
    admin = client_for(superuser)
    answer = admin.post(
        "/admin/portal/quota/add/",
        {
            "project": eo.pk,
            "site": Site.objects.get().pk,
            "cpu_millicores": 8000,
            "memory_bytes": 0,
            "gpus": 0,
            "borrow_cpu_millicores": 0,
        },
    )
    assert answer.status_code == 302, answer.content[:2000]
    assert Quota.objects.get().borrow_memory_bytes is None
    assert (
        admin.post("/admin/portal/priorityclass/add/", {"name": "urgent", "value": 100}).status_code
        == 302
    )
    assert admin.get("/admin/portal/quota/").status_code == 200


def test_the_fleet_page_shows_each_sites_quota_use_per_project(
    client_for: Any, scientist: User, site_b: Site, eo: Project
) -> None:
    Quota.objects.create(project=eo, site=site_b, cpu_millicores=4 * CPU, borrow_cpu_millicores=0)
    run = fan_out(eo, 5)
    start(admit(run, pending(run)))
    page = client_for(scientist).get("/fleet/").content.decode()
    assert 'id="fleet-quotas"' in page
    assert 'title="CPU quota of eo-demo at site-b: 4 of 4 cores allocated"' in page
    assert 'aria-valuenow="100"' in page


def test_raising_a_quota_advances_the_runs_queued_at_its_site_at_once(
    staff_api: APIClient,
    site_b: Site,
    eo: Project,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    quota = Quota.objects.create(
        project=eo, site=site_b, cpu_millicores=1 * CPU, borrow_cpu_millicores=0
    )
    run = fan_out(eo, 3)
    start(admit(run, pending(run)))
    asked: list[int] = []
    monkeypatch.setattr("portal.controller.workqueue.add", asked.append)
    with django_capture_on_commit_callbacks(execute=True):
        answer = staff_api.patch(f"/api/v1/quotas/{quota.pk}/", {"cpu": "3"}, format="json")
    assert answer.status_code == 200, answer.content
    assert asked == [run.pk]
    assert [u.name for u in admit(run, pending(run))] == ["tile-1", "tile-2"]


def test_a_smaller_unit_passes_one_that_does_not_fit_but_never_a_higher_priority(
    site_b: Site, eo: Project
) -> None:
    """Kueue's BestEffortFIFO within a priority: a big unit waiting does not hold back a small
    one of the same priority that fits within the nominal quota; a higher priority does."""
    Quota.objects.create(project=eo, site=site_b, cpu_millicores=4 * CPU, borrow_cpu_millicores=0)
    running = fan_out(eo, 3)
    start(admit(running, pending(running)))  # 3 of 4 CPU held
    big = fan_out(eo, 1, cpu=2 * CPU)
    assert admit(big, pending(big)) == []
    small = fan_out(eo, 2)
    assert [u.name for u in admit(small, pending(small))] == ["tile-0"]
    start(list(small.units.filter(name="tile-0")))  # 4 of 4 held
    finish(running.units.get(name="tile-0"))  # 3 of 4: the big one still does not fit
    urgent_big = fan_out(eo, 1, cpu=2 * CPU, priority=10)
    assert admit(urgent_big, pending(urgent_big)) == []
    # The small run's next tile would fit, but a higher priority waits before it.
    assert admit(small, pending(small)) == []
    reason = queue_of(pending(small))[small.units.get(name="tile-1").pk].reason
    assert reason == "eo-demo: higher-priority units wait for quota at site-b before this one"


def test_within_a_run_small_units_pass_a_big_one_that_does_not_fit(
    site_b: Site, eo: Project
) -> None:
    Quota.objects.create(project=eo, site=site_b, cpu_millicores=2 * CPU, borrow_cpu_millicores=0)
    run: WorkflowRun = WorkflowRunFactory(project=eo)
    UnitRun.objects.bulk_create(
        [
            UnitRunFactory.build(
                run=run,
                name=name,
                position=i,
                planned_site="site-b",
                site="site-b",
                spec={"resources": {"cpu_millicores": cpu, "memory_bytes": 0, "gpus": 0}},
            )
            for i, (name, cpu) in enumerate([("a", 1000), ("huge", 8000), ("b", 1000)])
        ]
    )
    assert [u.name for u in admit(run, pending(run))] == ["a", "b"]
    huge = queue_of(pending(run))[run.units.get(name="huge").pk]
    assert huge.reason == (
        "it asks for 8 CPU, more than eo-demo's quota at site-b ever allows (2 with borrowing); "
        "an operator must raise it"
    )


def test_units_placed_at_run_time_count_against_the_quota_once_placed(
    site_b: Site, eo: Project
) -> None:
    Quota.objects.create(project=eo, site=site_b, cpu_millicores=2 * CPU, borrow_cpu_millicores=0)
    run: WorkflowRun = WorkflowRunFactory(project=eo)
    UnitRunFactory(
        run=run,
        name="placed-by-webhook",
        timing=UnitTiming.RUNTIME,
        phase=UnitPhase.RUNNING,
        planned_site="site-b",
        site="site-b",
        workflow_name="w-1",
        spec={"resources": {"cpu_millicores": 1500, "memory_bytes": 0, "gpus": 0}},
    )
    tiles = fan_out(eo, 2)
    assert [u.name for u in admit(tiles, pending(tiles))] == []
    assert used_at("site-b")["eo-demo"].cpu == 1500


@pytest.mark.parametrize(("weight_a", "expected"), [("3", (3, 1)), ("1", (2, 2))])
def test_what_two_projects_borrow_follows_their_weights(
    site_b: Site, weight_a: str, expected: tuple[int, int]
) -> None:
    """Both wait to borrow the 4 CPU a third project leaves unused; each turn goes to the one
    borrowing the smaller weighted dominant share: weights 3 and 1 share the 4 CPU 3:1,
    equal weights 2:2 (``ProjectDefaults.weight``, the admin's Project defaults)."""
    from decimal import Decimal

    a, b, c = (Project.objects.create(name=n) for n in ("a", "b", "c"))
    ProjectDefaults.objects.create(project=a, weight=Decimal(weight_a))
    ProjectDefaults.objects.create(project=b, weight=Decimal(1))
    for p in (a, b):
        Quota.objects.create(project=p, site=site_b, cpu_millicores=2 * CPU)
    runs = {a.name: fan_out(a, 8), b.name: fan_out(b, 8)}
    for run in runs.values():  # each within its nominal quota; the rest waits
        start(admit(run, pending(run)))
    # The third project's quota (unused) is what the cohort can lend now.
    Quota.objects.create(project=c, site=site_b, cpu_millicores=4 * CPU)
    for _ in range(6):  # the runs' advances, woken in turn as quota frees
        for run in runs.values():
            start(admit(run, pending(run)))
    running = tuple(runs[n].units.filter(phase=UnitPhase.RUNNING).count() - 2 for n in ("a", "b"))
    assert running == expected
