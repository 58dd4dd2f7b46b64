"""The planner's inputs come from one selector (``portal.planning``) for every decider, and two
deciders asking at the same moment see the same fleet: the worker's decisions (failover, a
runtime unit's fallback site) and the webhook's, whichever process decides and however old
the webhook's cached database part is."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from placement import planner
from portal import planning, services, state
from portal.admission import decide, placing
from portal.controller import failover
from portal.controller.step_workflow import step_workflow_for
from portal.controller.submit import fallback_site
from portal.models import UnitRun, WorkflowRun
from tests.portal.admission.helpers import answer, patched_labels, post, review
from tests.portal.helpers import FAN_OUT_CPU, fan_out

D = "portal.multisite.io"
SITE_LABEL = f"/metadata/labels/{D}~1site"
ROOT = Path(__file__).resolve().parents[2]


pytestmark = [pytest.mark.usefixtures("webhook_on_empty_redis")]


@pytest.fixture
def burst(db: Any) -> WorkflowRun:
    """The demo fleet and a run fanning out 8 items of 8 CPU left to the webhook."""
    call_command("load_demo", verbosity=0)
    user = get_user_model().objects.get(username="scientist")
    return services.run_submit(user=user, body=fan_out(8), project="eo-demo")


def _items(run: WorkflowRun) -> list[UnitRun]:
    return [u for u in run.units.order_by("position", "id") if u.spec.get("item_index") is not None]


def _free(fleet: planner.Fleet) -> dict[str, tuple[int, int, int]]:
    return {s.name: (s.cpu_free, s.memory_free, s.gpu_free) for s in fleet.sites}


class _Spy:
    """The fleet each decider hands the planner, by decider."""

    def __init__(self, monkeypatch: Any) -> None:
        self.seen: dict[str, dict[str, tuple[int, int, int]]] = {}
        self.who = ""
        real_decide, real_plan = planner.decide, planner.plan

        def spy_decide(unit: Any, fleet: planner.Fleet, *args: Any, **kw: Any) -> Any:
            self.seen.setdefault(self.who, _free(fleet))
            return real_decide(unit, fleet, *args, **kw)

        def spy_plan(units: Any, fleet: planner.Fleet, *args: Any, **kw: Any) -> Any:
            self.seen.setdefault(self.who, _free(fleet))
            return real_plan(units, fleet, *args, **kw)

        monkeypatch.setattr(planner, "decide", spy_decide)
        monkeypatch.setattr(planner, "plan", spy_plan)


def test_the_webhook_sees_what_the_worker_just_placed(
    client, burst, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    # The webhook's database part stays as read below for the whole test.
    monkeypatch.setattr(placing, "SNAPSHOT_TTL_S", 3600.0)
    # Another run holds a unit at site-c (placed there, not yet running).
    other = services.run_submit(user=burst.owner, body=fan_out(1), project="eo-demo")
    moved = _items(other)[0]
    state.unit_place(UnitRun.objects.filter(pk=moved.pk), "site-c", from_sites=[""], reason="t")
    moved.refresh_from_db()
    decide.snapshot_get()
    before = _free(planning.planner_snapshot().fleet)

    # The worker fails it over: it holds at its new site from now on, no longer at site-c.
    with django_capture_on_commit_callbacks(execute=True):
        assert failover.failover_unit(other, moved, list(other.units.all()), "site-c lost")
    moved.refresh_from_db()
    assert moved.site not in ("", "site-c")
    now = _free(planning.planner_snapshot().fleet)
    assert now[moved.site][0] == before[moved.site][0] - FAN_OUT_CPU
    assert now["site-c"][0] == before["site-c"][0] + FAN_OUT_CPU

    # At this moment the worker (a runtime unit's fallback site) and the webhook (a step
    # workflow of the same run, its snapshot read before the failover) see the same fleet.
    spy = _Spy(monkeypatch)
    units = list(burst.units.all())
    items = _items(burst)
    spy.who = "worker"
    fallback_site(burst, items[0], units)
    spy.who = "webhook"
    body = review(step_workflow_for(burst, items[1], units), uid="burst-1")
    _, patch = answer(post(client, body, flush=False))
    assert patch and patched_labels(patch)[SITE_LABEL]
    assert spy.seen["worker"] == now
    assert spy.seen["webhook"] == spy.seen["worker"]


def test_a_submission_placing_units_is_seen_by_the_webhook_at_once(
    client, burst, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    monkeypatch.setattr(placing, "SNAPSHOT_TTL_S", 3600.0)
    decide.snapshot_get()
    # Another run whose items the rules place at submission: they hold where they go.
    body = fan_out(2).replace("preprocess", "compose")
    with django_capture_on_commit_callbacks(execute=True):
        other = services.run_submit(user=burst.owner, body=body, project="eo-demo")
    assert all(u.site for u in _items(other))
    spy = _Spy(monkeypatch)
    units = list(burst.units.all())
    spy.who = "worker"
    fallback_site(burst, _items(burst)[0], units)
    spy.who = "webhook"
    review_body = review(step_workflow_for(burst, _items(burst)[1], units), uid="b-1")
    answer(post(client, review_body, flush=False))
    assert spy.seen["webhook"] == spy.seen["worker"]


# --------------------------------------------------------------------------------------------
# Structure: one way in


# What assembles the planner's inputs: the tables, the holds in the database and in Redis, and
# the planner's capacity arithmetic over them (bare names, or ``module.name`` when the name
# alone says nothing).
BUILDERS = {
    "planner_inputs",
    "fleet_state",
    "rule_inputs",
    "dataset_inputs",
    "held_reservations",
    "planner_base",
    "planner.hold",
    "planner.reserve",
    "reservations.held",
    "reservations.read",
}
# Where they may be called: the selector, the tables' reader, and the webhook's cached copy
# of the selector's database part.
SELECTOR_MODULES = {
    "portal/planning.py",
    "portal/admission/placing.py",
    "placement/selectors.py",
}
# Replay plans on the fleet a decision recorded, not on the live one: the same view type,
# rebuilt from the record.
RECORDED = {"placement/revisions/replay.py"}
# The planner's entry points: a module calling one is a decider.
DECIDERS = {"planner.decide", "planner.plan", "relays.relay_for", "runtime_decision"}


def _sources() -> list[tuple[str, ast.Module]]:
    out = []
    for top in ("portal", "placement", "sites"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if "/migrations/" in rel or rel.startswith("placement/planner/"):
                continue
            out.append((rel, ast.parse(path.read_text(), rel)))
    return out


def _called(tree: ast.Module) -> set[str]:
    """Every function a module calls, by each tail of its dotted name: ``a.b.name`` as
    ``name``, ``b.name`` and ``a.b.name``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            parts = []
            f = node.func
            while isinstance(f, ast.Attribute):
                parts.insert(0, f.attr)
                f = f.value
            if isinstance(f, ast.Name):
                parts.insert(0, f.id)
            names.update(".".join(parts[i:]) for i in range(len(parts)))
    return names


def test_no_decider_assembles_the_planners_inputs_itself() -> None:
    offending = {
        rel: sorted(_called(tree) & BUILDERS)
        for rel, tree in _sources()
        if rel not in SELECTOR_MODULES and _called(tree) & BUILDERS
    }
    assert offending == {}


def test_every_decider_reads_its_inputs_from_the_selector() -> None:
    deciders = {rel: tree for rel, tree in _sources() if _called(tree) & DECIDERS}
    assert len(deciders) >= 6, sorted(deciders)
    assert set(deciders) >= RECORDED
    blind = [
        rel
        for rel, tree in deciders.items()
        if rel not in SELECTOR_MODULES | RECORDED
        and not ({"planner_snapshot", "runtime_decision"} & _called(tree))
    ]
    assert blind == []
    for rel in RECORDED:
        assert "PlannerView.holding" in _called(deciders[rel]), rel
