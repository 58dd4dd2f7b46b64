"""One planner-input selector for every decider (``portal.planning.planner_snapshot``), and
the capacity runtime decisions hold from the moment they are made: on PostgreSQL and Redis,
the webhook called as karmada-apiserver calls it."""

from __future__ import annotations

import base64
import json
import re
import threading
from collections import Counter
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from placement import planner
from placement.parser import Resources
from portal import planning, services, state
from portal.admission import decide, placing, reservations
from portal.admission import queue as decision_queue
from portal.choices import DecisionSource, UnitPhase
from portal.controller import failover, sync
from portal.controller.step_workflow import step_workflow_for
from portal.controller.submit import fallback_site
from portal.models import PlacementDecision, UnitRun, WorkflowRun
from sites.models import Site
from tests.portal.admission.helpers import answer, patched_labels, post, review
from tests.portal.helpers import FAN_OUT_CPU, cluster_of, fan_out

D = "portal.multisite.io"
ITEM = Resources(cpu_millicores=FAN_OUT_CPU, memory_bytes=2**30)
SITE_LABEL = f"/metadata/labels/{D}~1site"


pytestmark = [pytest.mark.usefixtures("webhook_on_empty_redis")]


@pytest.fixture
def burst(db: Any) -> WorkflowRun:
    """The demo fleet (free CPU: site-a 4, site-b 60, site-c 30) and a run fanning out 24
    items of 8 CPU that the demo's runtime rule leaves to the webhook."""
    call_command("load_demo", verbosity=0)
    user = get_user_model().objects.get(username="scientist")
    return services.run_submit(user=user, body=fan_out(24), project="eo-demo")


def _bodies(run: WorkflowRun) -> list[dict[str, Any]]:
    units = list(run.units.order_by("position", "id"))
    return [
        review(step_workflow_for(run, u, units), uid=f"burst-{u.slug}")
        for u in units
        if u.spec.get("item_index") is not None
    ]


def _free_cpu(candidate: dict[str, Any]) -> float:
    """The free CPU a candidate row gives: "free 60 CPU, ..." when it fits, "busy: needs 8
    CPU, 4 free" when it does not."""
    found = re.search(r"free (\d+(?:\.\d+)?) CPU|, (\d+(?:\.\d+)?) free", candidate["why"])
    assert found, candidate["why"]
    return float(found.group(1) or found.group(2))


def _free_at_start() -> dict[str, int]:
    return {s.name: s.cpu_allocatable - s.cpu_allocated for s in Site.objects.all()}


def _fits(free: dict[str, int]) -> dict[str, int]:
    return {site: f // FAN_OUT_CPU for site, f in free.items() if f >= FAN_OUT_CPU}


def test_a_burst_of_runtime_items_spreads_by_capacity_in_order(client, burst) -> None:
    start = _free_at_start()
    sites = []
    for body in _bodies(burst):
        _, patch = answer(post(client, body, flush=False))
        sites.append(patched_labels(patch)[SITE_LABEL] if patch else None)

    # As many as fit where they fit, none over; the rest left to their fallback site.
    assert Counter(s for s in sites if s) == _fits(start), sites
    # Each decision saw every one before it: the free CPU its candidate rows give is what
    # the members report less 8 CPU per decision placed there before.
    decision_queue.decisions_flush()
    expected = {site: max(free, 0) / 1000 for site, free in start.items()}
    decisions = PlacementDecision.objects.filter(source=DecisionSource.WEBHOOK).order_by("id")
    assert len(decisions) == 24
    for d in decisions:
        assert {c["site"]: _free_cpu(c) for c in d.candidates} == expected, d.reason
        if d.site:
            expected[d.site] -= FAN_OUT_CPU / 1000
    assert all(free < FAN_OUT_CPU / 1000 for free in expected.values()), expected


def test_concurrent_admissions_never_both_take_the_last_room(burst, monkeypatch) -> None:
    monkeypatch.setattr(placing, "SNAPSHOT_TTL_S", 3600.0)
    start = _free_at_start()
    decide.snapshot_get()  # warm: the threads below touch Redis only
    bodies = [json.dumps(b).encode() for b in _bodies(burst)]
    answers: list[dict[str, Any]] = []
    barrier = threading.Barrier(len(bodies))

    def admit(body: bytes) -> None:
        barrier.wait()
        answers.append(decide.admission_review(body=body))

    threads = [threading.Thread(target=admit, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    placed = Counter(
        patched_labels(json.loads(base64.b64decode(a["response"]["patch"])))[SITE_LABEL]
        for a in answers
        if "patch" in a["response"]
    )
    assert placed == _fits(start)


def test_a_held_decision_counts_the_same_before_and_after_the_drain(client, burst) -> None:
    body = _bodies(burst)[0]
    before = planning.planner_snapshot().fleet.site_by_name["site-b"].cpu_free
    _, patch = answer(post(client, body, flush=False))
    assert patched_labels(patch)[SITE_LABEL] == "site-b"

    queued = planning.planner_snapshot()
    assert queued.pending == {"site-b": ITEM}
    assert queued.fleet.site_by_name["site-b"].cpu_free == before - FAN_OUT_CPU
    # The webhook's own base, read before the drain, with the drain done meanwhile: the
    # reservation is counted once, not twice, and not lost.
    base = planning.planner_base()
    decision_queue.decisions_flush()
    for view in (planning.planner_snapshot(base), planning.planner_snapshot()):
        assert view.fleet.site_by_name["site-b"].cpu_free == before - FAN_OUT_CPU
    assert planning.planner_snapshot().pending == {}


def test_a_decision_releases_its_hold_when_the_unit_runs_moves_or_its_run_stops(
    client, burst
) -> None:
    def free() -> dict[str, int]:
        return {s.name: s.cpu_free for s in planning.planner_snapshot().fleet.sites}

    before = free()
    for body in _bodies(burst)[:2]:
        post(client, body)
    first, second = UnitRun.objects.filter(run=burst).exclude(site="").order_by("id")[:2]
    taken = Counter({first.site: FAN_OUT_CPU}) + Counter({second.site: FAN_OUT_CPU})
    assert free() == {site: f - taken[site] for site, f in before.items()}

    # Running: held until the member's summary counts its pods (in ``cpu_allocated``).
    state.unit_move(first, UnitPhase.RUNNING)
    assert free() == {site: f - taken[site] for site, f in before.items()}
    site = Site.objects.get(name=first.site)
    sync.cluster_note(cluster_of(site, allocated=site.cpu_allocated + FAN_OUT_CPU))
    assert planning.planner_snapshot().base.held.get(first.site) is None
    assert free() == {site: f - taken[site] for site, f in before.items()}
    in_summary = Counter({first.site: FAN_OUT_CPU})
    taken[first.site] -= FAN_OUT_CPU
    # Moved elsewhere by failover: held at the new site, no longer at the lost one.
    lost = second.site
    assert failover.failover_unit(burst, second, list(burst.units.all()), f"{lost} lost")
    second.refresh_from_db()
    assert second.site not in ("", lost)
    taken[lost] -= FAN_OUT_CPU
    taken[second.site] += FAN_OUT_CPU
    taken += in_summary
    assert free() == {site: max(f - taken[site], 0) for site, f in before.items()}
    # The run stopped: nothing of it is held anywhere (its pod is the member's to report).
    services.run_stop(user=burst.owner, run=burst)
    assert planning.planner_snapshot().base.held == {}
    assert free() == {site: f - in_summary[site] for site, f in before.items()}


def test_every_decider_sees_the_same_fleet_at_one_moment(client, burst, monkeypatch) -> None:
    # Held in the database: a unit of another run placed and not yet running.
    other = services.run_submit(user=burst.owner, body=fan_out(1), project="eo-demo")
    item = other.units.get(spec__item_index=0)
    state.unit_place(UnitRun.objects.filter(pk=item.pk), "site-c", from_sites=[""], reason="t")
    # Held in Redis: a webhook decision the drain has not written yet.
    _, patch = answer(post(client, _bodies(burst)[0], flush=False))
    assert patched_labels(patch)[SITE_LABEL] == "site-b"
    # Held in the database by this run: the unit failover will move.
    units = list(burst.units.all())
    pending = [u for u in units if u.spec.get("item_index") is not None and not u.site]
    target = pending[-1]
    state.unit_place(UnitRun.objects.filter(pk=target.pk), "site-a", from_sites=[""], reason="t")
    target.refresh_from_db()

    seen: dict[str, tuple[Any, ...]] = {}
    real_decide, real_plan = planner.decide, planner.plan

    def remember(name: str, fleet: planner.Fleet) -> None:
        seen.setdefault(name, (fleet.sites, fleet.links, fleet.free_notes))

    def spy_decide(unit: Any, fleet: planner.Fleet, *args: Any, **kw: Any) -> Any:
        remember(decider[0], fleet)
        return real_decide(unit, fleet, *args, **kw)

    def spy_plan(units: Any, fleet: planner.Fleet, *args: Any, **kw: Any) -> Any:
        remember(decider[0], fleet)
        return real_plan(units, fleet, *args, **kw)

    monkeypatch.setattr(planner, "decide", spy_decide)
    monkeypatch.setattr(planner, "plan", spy_plan)
    decider = ["preview"]
    services.workflow_preview(user=burst.owner, body=fan_out(2), project="eo-demo")
    decider[0] = "submission"
    services.run_submit(user=burst.owner, body=fan_out(2), project="eo-demo")
    decider[0] = "webhook"
    decide.snapshot_clear()
    answer(post(client, review(_bodies(burst)[1]["request"]["object"], dry_run=True)))
    decider[0] = "worker (fallback site)"
    fallback_site(burst, pending[-2], units)
    decider[0] = "failover"
    failover.failover_unit(burst, target, units, "site-a lost")

    assert set(seen) == {"preview", "submission", "webhook", "worker (fallback site)", "failover"}
    reference = seen["preview"]
    for name, fleet in seen.items():
        assert fleet == reference, f"{name} sees another fleet than the preview"
    free = dict(zip((s.name for s in reference[0]), reference[2], strict=True))
    start = {s: f // 1000 for s, f in _free_at_start().items()}
    assert free["site-a"].startswith("free 0 CPU"), free
    assert free["site-b"].startswith(f"free {start['site-b'] - 8} CPU"), free
    assert free["site-c"].startswith(f"free {start['site-c'] - 8} CPU"), free


def test_a_reservation_is_taken_only_where_room_is_left_and_once_per_unit(burst) -> None:
    client = decision_queue.queue_client()
    assert client is not None
    held = reservations.Reservation("1/x", "uid-x", "site-b", ITEM)
    taken, after = reservations.take(client, held, room=ITEM, since=0, entry="{}")
    assert taken and after.totals(since=0) == {"site-b": ITEM}
    assert reservations.held(client, since=0) == {"site-b": ITEM}
    # A second unit does not fit in the same room; the same unit decided again replaces its own.
    other = reservations.Reservation("1/y", "uid-y", "site-b", ITEM)
    taken, after = reservations.take(client, other, room=ITEM, since=0, entry="{}")
    assert not taken and after.totals(since=0) == {"site-b": ITEM}
    assert reservations.take(client, held, room=ITEM, since=0, entry="{}")[0]
    assert reservations.held(client, since=0) == {"site-b": ITEM}
    # Taken only if what others hold there is still what the decision saw.
    room = Resources(cpu_millicores=3 * FAN_OUT_CPU, memory_bytes=2**32)
    assert not reservations.take(client, other, room=room, since=0, entry="{}", seen=Resources())[0]
    assert reservations.take(client, other, room=room, since=0, entry="{}", seen=ITEM)[0]
    assert reservations.held(client, since=0, excluding="1/y") == {"site-b": ITEM}
    assert reservations.held(client, since=0, excluding="1/x") == {"site-b": ITEM}
    # Written by the drain: a fleet read after that counts it from the database instead.
    reservations.written(client, [{"uid": "uid-x", "run": 1, "unit": "x"}])
    after_x = reservations.stamp(client)
    reservations.written(client, [{"uid": "uid-y", "run": 1, "unit": "y"}])
    both = Resources(cpu_millicores=2 * FAN_OUT_CPU, memory_bytes=2**31)
    assert reservations.held(client, since=after_x - 1) == {"site-b": both}
    assert reservations.held(client, since=after_x) == {"site-b": ITEM}
    assert reservations.held(client, since=reservations.stamp(client)) == {}
