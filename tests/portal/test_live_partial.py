"""The run page's live partial: work in proportion to what changed, not to the run.

A poll that holds the current version is answered 304; a unit that moves makes the next poll a
200 that shows it; ``?since=`` carries only newer events; the counts the page is drawn from are
the units' own (also while two threads move units at once); the units table pages; and a
big run costs a poll the same queries as a small one.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection, connections
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from portal import live, state
from portal.choices import UnitPhase
from portal.models import RunEvent, UnitRun, WorkflowRun
from portal.selectors.runs import runs_listed_light
from sites.models import Site
from tests.factories import SiteFactory
from tests.portal.helpers import FAN_SITES, fan_out_run

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def sites(db: Any) -> list[Site]:
    return [SiteFactory(name=n) for n in FAN_SITES]


@pytest.fixture
def sci(client_for: Any, scientist: User) -> Client:
    return client_for(scientist)


@pytest.fixture
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    # The version also moves with the clock (durations of what runs); not within a test.
    monkeypatch.setattr(live, "CLOCK_STEP_S", 10**9)


def live_url(run: WorkflowRun, **query: str) -> str:
    url = reverse("ui-run-live", args=[run.pk])
    return url + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


def pending_item(run: WorkflowRun) -> UnitRun:
    return run.units.filter(phase=UnitPhase.PENDING, loop_task="fan").order_by("position")[0]


def test_a_poll_is_304_until_a_unit_moves_then_200_with_the_change(
    sci: Client, scientist: User, sites: list[Site], frozen_clock: None
) -> None:
    run = fan_out_run(scientist, 60)
    url = live_url(run)
    first = sci.get(url, **HX)
    assert first.status_code == 200 and first["Cache-Control"] == "private, no-cache"
    etag = first["ETag"]
    done = run.units.filter(phase=UnitPhase.SUCCEEDED).count()
    assert f"{done} of 60 units done" in first.content.decode()
    again = sci.get(url, HTTP_IF_NONE_MATCH=etag, **HX)
    assert again.status_code == 304 and again.content == b"" and again["ETag"] == etag
    unit = pending_item(run)
    assert state.unit_move(unit, UnitPhase.SUCCEEDED)
    moved = sci.get(url, HTTP_IF_NONE_MATCH=etag, **HX)
    assert moved.status_code == 200 and moved["ETag"] != etag
    assert f"{done + 1} of 60 units done" in moved.content.decode()
    assert sci.get(url, HTTP_IF_NONE_MATCH=moved["ETag"], **HX).status_code == 304


def test_a_moved_site_and_a_new_event_change_the_version(
    sci: Client, scientist: User, sites: list[Site], frozen_clock: None
) -> None:
    run = fan_out_run(scientist, 30)
    url = live_url(run, since="0")
    etag = sci.get(url, **HX)["ETag"]
    unit = pending_item(run)
    elsewhere = "site-a" if unit.site != "site-a" else "site-b"
    assert state.unit_place(UnitRun.objects.filter(pk=unit.pk), elsewhere, from_sites=[unit.site])
    placed = sci.get(url, HTTP_IF_NONE_MATCH=etag, **HX)
    assert placed.status_code == 200
    RunEvent.objects.create(run=run, kind="note", message="something to say")
    noted = sci.get(url, HTTP_IF_NONE_MATCH=placed["ETag"], **HX)
    assert noted.status_code == 200 and "something to say" in noted.content.decode()


def test_since_carries_only_the_newer_events(
    sci: Client, scientist: User, sites: list[Site]
) -> None:
    run = fan_out_run(scientist, 10)
    old = RunEvent.objects.create(run=run, kind="note", message="old news")
    page = sci.get(reverse("ui-run-detail", args=[run.pk])).content.decode()
    assert "old news" in page
    assert f'name="since" value="{old.pk}"' in page  # the page's poll starts from its newest
    new = RunEvent.objects.create(run=run, kind="note", message="fresh news")
    body = sci.get(live_url(run, since=str(old.pk)), **HX).content.decode()
    oob = body.split('hx-swap-oob="afterbegin:#run-event-list"', 1)[1].split("</ul>", 1)[0]
    assert "fresh news" in oob and "old news" not in oob
    # The next poll asks from the newest event it now shows.
    assert f"since={new.pk}" in body.split(">", 1)[0]
    nothing = sci.get(live_url(run, since=str(new.pk)), **HX).content.decode()
    oob = nothing.split('hx-swap-oob="afterbegin:#run-event-list"', 1)[1].split("</ul>", 1)[0]
    assert "news" not in oob


def test_since_that_is_not_an_event_id_is_a_400_naming_it(
    sci: Client, scientist: User, sites: list[Site]
) -> None:
    run = fan_out_run(scientist, 10)
    response = sci.get(live_url(run, since="yesterday"), **HX)
    assert response.status_code == 400 and b"since" in response.content


def _fresh_counts(run: WorkflowRun) -> Counter[tuple[str, str, str]]:
    rows = UnitRun.objects.filter(run=run).values_list("loop_task", "phase", "site")
    return Counter((t, p, s) for t, p, s in rows)


def _counted(run: WorkflowRun) -> Counter[tuple[str, str, str]]:
    out: Counter[tuple[str, str, str]] = Counter()
    for r in live.unit_counts(run.pk).rows:
        out[(r.node if r.item else "", r.phase, r.site)] += r.n
    return out


@pytest.mark.django_db(transaction=True)
def test_the_counts_stay_right_under_concurrent_transitions(
    scientist: User, sites: list[Site]
) -> None:
    run = fan_out_run(scientist, 302)
    pending = list(run.units.filter(phase=UnitPhase.PENDING, loop_task="fan").order_by("id"))
    assert len(pending) >= 80
    errors: list[Exception] = []
    start = threading.Barrier(2)

    def burst(units: list[UnitRun], site: str) -> None:
        try:
            start.wait()
            for u in units:
                state.unit_place(UnitRun.objects.filter(pk=u.pk), site, from_sites=[u.site])
                assert state.unit_move(u, UnitPhase.RUNNING)
                assert state.unit_move(u, UnitPhase.SUCCEEDED if u.pk % 2 else UnitPhase.FAILED)
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=burst, args=(pending[0::2], "site-a")),
        threading.Thread(target=burst, args=(pending[1::2], "site-c")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert _counted(run) == _fresh_counts(run)
    counts = live.unit_counts(run.pk)
    assert counts.total == 302 == run.units.count()
    assert counts.by_phase[UnitPhase.PENDING] == 1  # the join; every item moved twice


def test_the_units_table_pages_and_keeps_its_filters(
    sci: Client, scientist: User, sites: list[Site]
) -> None:
    run = fan_out_run(scientist, 302)
    first = sci.get(reverse("ui-run-detail", args=[run.pk])).content.decode()
    assert first.count('class="unit-name"') == 50
    assert "Units 1\u201350 of 302" in first
    running = sci.get(live_url(run, phase="Running", page="2"), **HX).content.decode()
    assert "Units 51\u2013100 of 100" in running
    names = re.findall(r'class="unit-name"[^>]*>([^<]+)<', running)
    assert len(names) == 50 and all(n.startswith("fan(") for n in names)
    assert UnitRun.objects.filter(run=run, name__in=names).exclude(phase="Running").count() == 0
    assert "phase=Running&amp;page=1" in running  # the pager keeps the filter
    assert "phase=Running" in running.split(">", 1)[0]  # and so does the poll


def test_a_big_loop_is_one_group_node_from_the_counts(
    sci: Client, scientist: User, sites: list[Site]
) -> None:
    run = fan_out_run(scientist, 2002)
    body = sci.get(live_url(run), **HX).content.decode()
    assert 'data-items="2000"' in body  # the loop's 2,000 items are one node
    assert body.count('class="bar ') < 20  # and a few bars of the timeline
    assert "fan(17:17)" not in body.split('id="units-h"')[0]


def test_a_poll_of_a_big_run_costs_the_queries_of_a_small_one(
    sci: Client, scientist: User, sites: list[Site], frozen_clock: None
) -> None:
    small, big = fan_out_run(scientist, 20), fan_out_run(scientist, 2000)
    cost = {}
    for run in (small, big):
        sci.get(live_url(run, since="0"), **HX)  # the graph's skeleton is read once
        etag = sci.get(live_url(run, since="0"), **HX)["ETag"]
        with CaptureQueriesContext(connection) as changed:
            assert sci.get(live_url(run, since="0"), **HX).status_code == 200
        with CaptureQueriesContext(connection) as same:
            response = sci.get(live_url(run, since="0"), HTTP_IF_NONE_MATCH=etag, **HX)
            assert response.status_code == 304
        cost[run.pk] = (len(changed), len(same))
    assert cost[small.pk] == cost[big.pk]


def test_a_small_loop_is_drawn_item_by_item_with_each_items_phase(
    sci: Client, scientist: User, sites: list[Site]
) -> None:
    run = fan_out_run(scientist, 12)  # ten items: not grouped
    body = sci.get(live_url(run), **HX).content.decode()
    svg = body.split('<svg class="dag', 1)[1].split("</svg>", 1)[0]
    for unit in run.units.all():
        name = re.escape(unit.name)
        node = re.search(rf'<g class="node phase-(\w+)[^"]*" data-unit="{name}"', svg)
        assert node is not None and node.group(1) == unit.phase, unit.name
    assert 'data-items="' not in svg


def test_the_run_page_and_a_poll_read_what_they_need_of_the_workflow_not_the_workflow(
    sci: Client, scientist: User, sites: list[Site]
) -> None:
    """A fan-out's items are in its manifest and twice in its compiled workflow (5.7 MB for
    50,000): the page and its polls read neither column, only what they show of them (the
    run held by ``spec.suspend``, a step waiting on approval, its priority class), and still
    show those."""
    run = fan_out_run(scientist, 30)
    templates = {
        "work": {"name": "work", "container": {"image": "alpine"}},
        "approve": {"name": "approve", "suspend": {}},
        "g": {"name": "g", "outputs": {"parameters": [{"name": "p", "globalName": "gp"}]}},
    }
    compiled = {
        "templates": templates,
        "spec": {"suspend": True, "templates": list(templates.values())},
        "priority_class": {"name": "urgent", "value": 9},
    }
    WorkflowRun.objects.filter(pk=run.pk).update(compiled=compiled, manifest={"items": [1] * 999})
    for url in (reverse("ui-run-detail", args=[run.pk]), live_url(run)):
        with CaptureQueriesContext(connection) as read:
            body = sci.get(url, **HX).content.decode()
        columns = " ".join(q["sql"] for q in read.captured_queries)
        assert '"portal_workflowrun"."manifest"' not in columns, url
        assert '"portal_workflowrun"."compiled"' not in columns, url
        assert "<strong>Suspended:</strong>" in body, url
    got = runs_listed_light(scientist).get(pk=run.pk)
    full = WorkflowRun.objects.get(pk=run.pk)
    for fact in ("suspended", "suspend_templates", "priority_class"):
        assert getattr(got, fact) == getattr(full, fact), fact
    assert got.suspend_templates == {"approve"}
    assert got.priority_class == {"name": "urgent", "value": 9}


def test_final_outputs_are_counted_up_to_a_thousand(
    sci: Client, scientist: User, sites: list[Site]
) -> None:
    """A final loop of 1,005 items with outputs: the first ones are shown and the rest is
    counted up to 1,000 ("1000+"), not over every finished item at each poll."""
    run = WorkflowRun.objects.create(name="final-fan", owner=scientist, manifest={})
    UnitRun.objects.bulk_create(
        [
            UnitRun(
                run=run,
                name=f"fan({i}:{i})",
                position=i,
                template="work",
                phase=UnitPhase.SUCCEEDED,
                outputs={"result": f"r{i}"},
                spec={"task": "fan", "item_index": i, "template": "work"},
            )
            for i in range(live.FINAL_COUNTED + 5)
        ]
    )
    body = sci.get(live_url(run), **HX).content.decode()
    assert "20 of 1000+ final steps shown" in body
    UnitRun.objects.filter(run=run, position__gte=25).update(outputs={})
    assert "20 of 25 final steps shown" in sci.get(live_url(run), **HX).content.decode()
