"""Quotas over a group of sites and quota admission of units placed at run time:
a quota naming a group by its sites' labels limits what the project holds across the group;
a runtime unit is admitted for the eligible sites where its quotas have room (the webhook and
its fallback site choose among those only) or waits Queued; its end and its placement wake
the units queued at the sites it freed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from rest_framework.test import APIClient

from placement.context import context_read
from portal import services as portal_services
from portal.choices import UnitPhase, UnitTiming
from portal.controller.step_workflow import step_workflow_for
from portal.controller.submit import fallback_site
from portal.models import UnitRun, WorkflowRun
from portal.quotas import selectors
from portal.quotas.admit import admit
from portal.quotas.holdings import used_at, used_over
from portal.quotas.models import Quota, Workload
from portal.quotas.overview import queue_of, quota_rows
from portal.quotas.runtime import eligible_sites
from portal.quotas.waking import wake
from sites.models import Project, Site
from tests.portal.helpers import fan_out as burst
from tests.portal.quota_runs import CPU, pending, start, tiles

HPC = {"tier": "hpc"}


@pytest.fixture
def hpc(db: Any) -> list[Site]:
    return [
        Site.objects.create(name="site-b", labels={"tier": "hpc"}),
        Site.objects.create(name="site-c", labels={"tier": "hpc", "gpu": "a100"}),
        Site.objects.create(name="site-d", labels={"tier": "archive"}),
    ]


@pytest.fixture
def eo(db: Any) -> Project:
    return Project.objects.create(name="eo-demo")


def test_a_group_quota_limits_what_the_project_holds_across_its_sites(
    hpc: list[Site], eo: Project
) -> None:
    Quota.objects.create(
        project=eo, site_selector=HPC, cpu_millicores=3 * CPU, borrow_cpu_millicores=0
    )
    at_b, at_c, at_d = tiles(eo, "site-b", 2), tiles(eo, "site-c", 2), tiles(eo, "site-d", 4)
    start(admit(at_b, pending(at_b)))
    admitted_c = admit(at_c, pending(at_c))
    assert [u.name for u in admitted_c] == ["tile-0"]  # 2 at site-b + 1 here = 3
    start(admitted_c)
    queued = queue_of(pending(at_c))
    assert [e.reason for e in queued.values()] == [
        "eo-demo uses 3 of 3 CPU at sites tier=hpc; waiting for quota"
    ]
    # site-d is not in the group, and eo-demo has no other quota: not limited there.
    assert len(admit(at_d, pending(at_d))) == 4
    assert used_over(["site-b", "site-c"])["eo-demo"].cpu == 3 * CPU
    # A unit ending at site-b frees the group's quota: the run queued at site-c is woken.
    UnitRun.objects.filter(pk=at_b.units.get(name="tile-0").pk).update(phase=UnitPhase.SUCCEEDED)
    assert wake(at_b) == [at_c.pk]
    assert [u.name for u in admit(at_c, pending(at_c))] == ["tile-1"]


def test_a_unit_must_fit_its_sites_quota_and_its_groups(hpc: list[Site], eo: Project) -> None:
    Quota.objects.create(project=eo, site_selector=HPC, cpu_millicores=10 * CPU)
    Quota.objects.create(project=eo, site=hpc[0], cpu_millicores=1 * CPU, borrow_cpu_millicores=0)
    run = tiles(eo, "site-b", 3)
    assert [u.name for u in admit(run, pending(run))] == ["tile-0"]
    assert set(e.reason for e in queue_of(pending(run)).values()) == {
        "eo-demo uses 1 of 1 CPU at site-b; waiting for quota"
    }


def test_a_site_labelled_later_joins_its_groups_quota(hpc: list[Site], eo: Project) -> None:
    Quota.objects.create(
        project=eo, site_selector=HPC, cpu_millicores=1 * CPU, borrow_cpu_millicores=0
    )
    at_d = tiles(eo, "site-d", 2)
    assert len(admit(at_d, pending(at_d))) == 2  # not in the group yet
    Workload.objects.all().delete()
    Site.objects.filter(name="site-d").update(labels={"tier": "hpc"})
    assert len(admit(at_d, pending(at_d))) == 1


# REST and admin


@pytest.fixture
def staff_api(api_client_for: Any, staff: User) -> APIClient:
    return api_client_for(staff)


GROUP = {
    "project": "eo-demo",
    "site_selector": HPC,
    "cpu": "8",
    "memory": "32Gi",
    "gpu": 0,
    "borrowing": {"cpu": "0", "memory": "0", "gpu": 0},
}


def test_fleet_staff_post_a_quota_over_a_group_of_sites(
    staff_api: APIClient, hpc: list[Site], eo: Project
) -> None:
    answer = staff_api.post("/api/v1/quotas/", GROUP, format="json")
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert body["site"] is None and body["site_selector"] == HPC
    assert body["sites"] == ["site-b", "site-c"]
    run = tiles(eo, "site-c", 2)
    start(admit(run, pending(run)))
    listed = staff_api.get("/api/v1/quotas/?site=site-b").json()
    assert [(q["site_selector"], q["used"]["cpu"]) for q in listed] == [(HPC, "2")]
    again = staff_api.post("/api/v1/quotas/", GROUP, format="json")
    assert again.status_code == 400
    assert again.json()["errors"][0]["path"] == "site_selector"
    moved = staff_api.patch(f"/api/v1/quotas/{body['id']}/", {"site": "site-d"}, format="json")
    assert moved.status_code == 200, moved.content
    assert (moved.json()["site"], moved.json()["site_selector"]) == ("site-d", None)


def test_raising_a_group_quota_advances_the_runs_queued_at_any_of_its_sites(
    staff_api: APIClient,
    hpc: list[Site],
    eo: Project,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    quota = Quota.objects.create(
        project=eo, site_selector=HPC, cpu_millicores=1 * CPU, borrow_cpu_millicores=0
    )
    at_b, at_c = tiles(eo, "site-b", 1), tiles(eo, "site-c", 2)
    start(admit(at_b, pending(at_b)))
    assert admit(at_c, pending(at_c)) == []
    asked: list[int] = []
    monkeypatch.setattr("portal.controller.workqueue.add", asked.append)
    with django_capture_on_commit_callbacks(execute=True):
        answer = staff_api.patch(f"/api/v1/quotas/{quota.pk}/", {"cpu": "3"}, format="json")
    assert answer.status_code == 200, answer.content
    assert asked == [at_c.pk]
    assert [u.name for u in admit(at_c, pending(at_c))] == ["tile-0", "tile-1"]


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"site": "site-b"}, "site_selector"),  # both
        ({"site_selector": None}, "site"),  # neither
        ({"site_selector": {}}, "site"),
        ({"site_selector": ["tier", "hpc"]}, "site_selector"),
        ({"site_selector": {"tier": "h pc"}}, "site_selector"),
        ({"site_selector": {"bad key!": "x"}}, "site_selector"),
        ({"site_selector": {"tier": 3}}, "site_selector"),
        ({"site_selector": "tier=hpc"}, "site_selector"),
    ],
)
def test_a_bad_group_is_a_400_naming_the_field(
    staff_api: APIClient, hpc: list[Site], eo: Project, change: dict[str, Any], path: str
) -> None:
    answer = staff_api.post("/api/v1/quotas/", {**GROUP, **change}, format="json")
    assert answer.status_code == 400, answer.content
    assert [e["path"] for e in answer.json()["errors"]] == [path]
    assert not Quota.objects.exists()


def test_fleet_staff_set_a_group_quota_in_the_admin(
    client_for: Any, superuser: User, hpc: list[Site], eo: Project
) -> None:
    admin = client_for(superuser)
    form = {"project": eo.pk, "cpu_millicores": 8000, "memory_bytes": 0, "gpus": 0}
    bad = admin.post("/admin/portal/quota/add/", {**form, "site_selector": '{"tier": "h pc"}'})
    assert bad.status_code == 200 and "is not a label value" in bad.content.decode()
    neither = admin.post("/admin/portal/quota/add/", {**form, "site_selector": "{}"})
    assert neither.status_code == 200 and "name a site, or a group" in neither.content.decode()
    good = admin.post("/admin/portal/quota/add/", {**form, "site_selector": json.dumps(HPC)})
    assert good.status_code == 302, good.content[:2000]
    assert Quota.objects.get().site_selector == HPC
    assert "sites tier=hpc" in client_for(superuser).get("/fleet/").content.decode()


# Units placed at run time (the demo's rule leaves ``preprocess`` items to the webhook)


@pytest.fixture
def demo(db: Any) -> User:
    call_command("load_demo", verbosity=0)
    return User.objects.get(username="scientist")


def submitted_burst(user: User, n: int) -> tuple[WorkflowRun, list[UnitRun], list[UnitRun]]:
    """A fan-out of ``n`` run-time items submitted by ``user`` to eo-demo: the run, its units,
    and its items."""
    run = portal_services.run_submit(user=user, body=burst(n), project="eo-demo")
    units = list(run.units.all())
    items = [
        u for u in units if u.timing == UnitTiming.RUNTIME and u.spec.get("item_index") is not None
    ]
    return run, units, items


def test_a_runtime_unit_is_admitted_only_where_its_quota_has_room(demo: User) -> None:
    eo = Project.objects.get(name="eo-demo")
    # 8 CPU items; eo-demo may hold one at site-b, none at site-c; site-a has no quota.
    Quota.objects.create(
        project=eo,
        site=Site.objects.get(name="site-b"),
        cpu_millicores=8000,
        memory_bytes=2**34,
        borrow_cpu_millicores=0,
    )
    Quota.objects.create(
        project=eo, site=Site.objects.get(name="site-c"), cpu_millicores=0, borrow_cpu_millicores=0
    )
    run, units, items = submitted_burst(demo, 3)
    assert len(items) == 3
    eligible, free_now = eligible_sites(run, items[0], units)
    assert set(eligible) == {"site-a", "site-b", "site-c"}, eligible
    assert free_now == {"site-b", "site-c"}  # site-a has 4 CPU free
    admitted = admit(run, items, units)
    assert len(admitted) == 3  # site-a is not limited: each may go there
    # Where it can start now and its quota has room: site-b (the webhook places only there).
    assert selectors.admitted_sites(items[0]) == ["site-b"]
    # The next: site-b's quota is held by the first until placed, site-c has none; site-a
    # is not limited (it waits in site-a's queue, as it would without quotas).
    assert selectors.admitted_sites(items[1]) == ["site-a"]
    # The same read for a chunk of units at once (the worker's, one query).
    assert selectors.admitted_sites_of(items) == {u.pk: selectors.admitted_sites(u) for u in items}
    # The webhook reads the sites from the step workflow's placement context.
    body = step_workflow_for(run, items[1], units)
    ctx = context_read(
        body["metadata"]["annotations"]["portal.multisite.io/placement-context"], items[1].slug
    )
    assert ctx is not None and ctx.sites == ("site-a",)
    assert fallback_site(run, items[1], units) == "site-a"


def test_a_runtime_unit_over_quota_everywhere_waits_and_is_woken_when_one_ends(
    demo: User,
) -> None:
    eo = Project.objects.get(name="eo-demo")
    Quota.objects.create(
        project=eo,
        site_selector={"topology.kubernetes.io/region": "eu-west"},
        cpu_millicores=8000,
        memory_bytes=2**34,
        borrow_cpu_millicores=0,
    )
    Quota.objects.create(
        project=eo, site=Site.objects.get(name="site-c"), cpu_millicores=0, borrow_cpu_millicores=0
    )
    run, units, items = submitted_burst(demo, 2)
    admitted = admit(run, items, units)
    assert [u.pk for u in admitted] == [items[0].pk]
    entry = queue_of([items[1]])[items[1].pk]
    assert entry.position == 1
    assert entry.reason == (
        "eo-demo uses 8 of 8 CPU at sites topology.kubernetes.io/region=eu-west; waiting for quota"
    )
    assert UnitRun.objects.get(pk=items[1].pk).message.startswith("queued: eo-demo uses 8 of 8")
    # The run page's units table: Queued, placed in the project's queue for a run-time site.
    from django.test import Client

    browser = Client()
    browser.force_login(demo)
    page = browser.get(f"/runs/{run.pk}/").content.decode()
    assert "#1 in eo-demo's queue for a run-time site" in page
    # It waits for site-a and site-b: one unit queued for the group's quota, not two.
    group = next(r for r in quota_rows() if r["quota"].site_id is None)
    assert (group["sites"], group["queued"], group["used"].cpu) == (["site-a", "site-b"], 1, 8000)
    # Placed by the webhook at site-b: it holds there only; then it ends.
    UnitRun.objects.filter(pk=items[0].pk).update(
        site="site-b", workflow_name="w-0", phase=UnitPhase.RUNNING
    )
    assert used_at("site-b")["eo-demo"].cpu == 8000
    assert wake(run) == []  # narrowed to site-b (its own run advances itself)
    assert Workload.objects.get(unit_id=items[0].pk).sites == ["site-b"]
    other, other_units, other_items = submitted_burst(demo, 1)
    assert admit(other, other_items, other_units) == []
    UnitRun.objects.filter(pk=items[0].pk).update(phase=UnitPhase.SUCCEEDED)
    assert wake(run) == [other.pk]
    assert len(admit(other, other_items, other_units)) == 1
    assert selectors.admitted_sites(other_items[0]) is not None


def test_an_admitted_runtime_unit_whose_sites_went_away_is_decided_again(demo: User) -> None:
    eo = Project.objects.get(name="eo-demo")
    Quota.objects.create(
        project=eo,
        site=Site.objects.get(name="site-b"),
        cpu_millicores=8000,
        memory_bytes=2**34,
        borrow_cpu_millicores=0,
    )
    run = portal_services.run_submit(user=demo, body=burst(1), project="eo-demo")
    units = list(run.units.all())
    item = next(u for u in units if u.spec.get("item_index") is not None)
    assert len(admit(run, [item], units)) == 1
    assert selectors.admitted_sites(item) == ["site-b", "site-c"]  # where it can start now
    assert used_at("site-b")["eo-demo"].cpu == 8000
    # Not created yet (the turn ran out), and both sites are cordoned meanwhile: it no
    # longer holds site-b's quota for a site it cannot go to, and goes where it may.
    Site.objects.filter(name__in=["site-b", "site-c"]).update(cordoned=True)
    assert len(admit(run, [item], units)) == 1
    assert selectors.admitted_sites(item) == ["site-a"]
    assert "eo-demo" not in used_at("site-b")
