"""The resync's pass over every ResourceBinding: what a dropped watch missed is folded in, and
the units are read once for the whole list, however many bindings there are."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from portal.choices import UnitPhase
from portal.controller import resync
from portal.controller.bindings import binding_observe, bindings_observe
from portal.controller.workqueue import claims
from portal.models import UnitRun
from tests.portal.helpers import make_run


def binding(name: str, site: str, phase: str | None, kind: str = "Workflow") -> dict[str, Any]:
    member = {"phase": phase, "startedAt": "2026-12-03T07:00:00Z"} if phase else None
    if phase == "Succeeded":
        member = {**(member or {}), "finishedAt": "2026-12-03T07:05:00Z"}
    return {
        "spec": {"resource": {"kind": kind, "name": name}, "clusters": [{"name": site}]},
        "status": {"aggregatedStatus": [{"clusterName": site, "status": member}]},
    }


def test_missed_changes_are_folded_in_and_the_ended_runs_returned(scientist) -> None:
    run = make_run(scientist)
    other = make_run(scientist)
    for r in (run, other):
        for unit in r.units.all():
            UnitRun.objects.filter(pk=unit.pk).update(workflow_name=f"r{r.pk}-{unit.name}")
    items = [
        binding(f"r{run.pk}-preprocess", "site-b", "Succeeded"),  # ended while unwatched
        binding(f"r{other.pk}-preprocess", "site-b", "Running"),  # no change
        binding(f"r{other.pk}-inference", "site-c", None),  # scheduled, no status yet
        binding("not-ours", "site-a", "Succeeded"),
        binding(f"r{run.pk}-ingest", "site-a", "Succeeded", kind="ConfigMap"),
    ]

    ended = bindings_observe(items)

    assert ended == {run.pk}
    assert run.units.get(name="preprocess").phase == UnitPhase.SUCCEEDED
    assert other.units.get(name="preprocess").phase == UnitPhase.RUNNING
    assert other.units.get(name="inference").site == "site-c"


def test_the_units_are_read_in_one_query_whatever_the_number_of_bindings(scientist) -> None:
    runs = [make_run(scientist) for _ in range(6)]
    items = []
    for r in runs:
        for unit in r.units.all():
            UnitRun.objects.filter(pk=unit.pk).update(workflow_name=f"r{r.pk}-{unit.name}")
            # No status yet: nothing to record beyond a pending unit's site.
            items.append(binding(f"r{r.pk}-{unit.name}", unit.site or "site-c", None))

    with CaptureQueriesContext(connection) as queries:
        assert bindings_observe(items) == set()

    unit_reads = [q for q in queries if 'FROM "portal_unitrun"' in q["sql"]]
    assert len(unit_reads) == 1, [q["sql"] for q in queries]


def test_a_binding_not_scheduled_yet_is_not_looked_up(scientist, django_assert_num_queries) -> None:
    run = make_run(scientist)
    unit = run.units.get(name="ingest")
    UnitRun.objects.filter(pk=unit.pk).update(workflow_name=f"r{run.pk}-ingest")
    created = {"spec": {"resource": {"kind": "Workflow", "name": f"r{run.pk}-ingest"}}}
    # Karmada creates every binding before it schedules it: the watcher sees that first.
    with django_assert_num_queries(0):
        assert binding_observe(created) is None
    with django_assert_num_queries(1):
        assert binding_observe(binding(f"r{run.pk}-ingest", "site-a", None)) is None


def test_the_last_unit_ending_settles_its_run_without_waiting_for_a_worker(scientist) -> None:
    """A one-step run behind a fan-out's turns waited seconds for a worker process only to be
    marked Succeeded: the watcher settles a run whose last unit ended, from the database."""
    run = make_run(
        scientist,
        units=[
            ("ingest", "site-a", UnitPhase.SUCCEEDED, []),
            ("preprocess", "site-b", UnitPhase.RUNNING, ["ingest"]),
            ("inference", "site-c", UnitPhase.RUNNING, ["preprocess"]),
        ],
    )
    for unit in run.units.all():
        UnitRun.objects.filter(pk=unit.pk).update(workflow_name=f"r{run.pk}-{unit.name}")

    assert binding_observe(binding(f"r{run.pk}-preprocess", "site-b", "Succeeded"))
    run.refresh_from_db()
    assert run.status == "Running"  # inference still runs
    assert binding_observe(binding(f"r{run.pk}-inference", "site-c", "Succeeded"))
    run.refresh_from_db()
    assert run.status == "Succeeded"
    assert run.events.filter(kind="run-finished").count() == 1


def test_a_unit_that_starts_does_not_read_its_runs_manifest(scientist) -> None:
    """The watcher sees every unit start: reading the whole run row each time decoded a big
    fan-out's manifest and compiled form (megabytes of JSON) per unit."""
    run = make_run(scientist)
    unit = run.units.get(name="inference")
    UnitRun.objects.filter(pk=unit.pk).update(workflow_name=f"r{run.pk}-inference")
    with CaptureQueriesContext(connection) as queries:
        binding_observe(binding(f"r{run.pk}-inference", "site-c", "Running"))
    assert run.units.get(name="inference").phase == UnitPhase.RUNNING
    run_reads = [q["sql"] for q in queries if 'FROM "portal_workflowrun"' in q["sql"]]
    assert run_reads and not [q for q in run_reads if '"manifest"' in q or '"compiled"' in q]


HOUSEKEEPING = (resync.SITES_SYNC, resync.BINDINGS_RESYNC, resync.STEP_WORKFLOWS_CLEANUP)


@pytest.fixture
def marks() -> Iterator[Any]:
    client = claims.redis_client()
    assert client is not None, "this test needs REDIS_URL"
    keys = [
        k % n
        for k in (resync.HOUSEKEEPING_QUEUED, resync.HOUSEKEEPING_RESTING)
        for n in HOUSEKEEPING
    ]
    client.delete(*keys)
    yield client
    client.delete(*keys)


def test_a_housekeeping_task_that_took_long_rests_before_the_resync_queues_it_again(
    marks: Any, transactional_db: Any, settings: Any
) -> None:
    # Configured for Karmada, the resync queues its housekeeping (nothing here lists).
    settings.KARMADA_KUBECONFIG = "kubeconfig-of-no-fleet"
    assert resync.housekeeping_rest(resync.BINDINGS_RESYNC, 0.5) == 0  # quick: no rest
    assert not marks.exists(resync.HOUSEKEEPING_RESTING % resync.BINDINGS_RESYNC)
    # 5 % of a worker process: a list that took 2 s rests 38 s.
    assert resync.housekeeping_rest(resync.BINDINGS_RESYNC, 2.0) == pytest.approx(38.0)
    assert 30 < marks.ttl(resync.HOUSEKEEPING_RESTING % resync.BINDINGS_RESYNC) <= 38
    resync.resync()
    queued = {n for n in HOUSEKEEPING if marks.exists(resync.HOUSEKEEPING_QUEUED % n)}
    assert queued == {resync.SITES_SYNC, resync.STEP_WORKFLOWS_CLEANUP}
    # Rested, it is queued by the next resync.
    marks.delete(resync.HOUSEKEEPING_RESTING % resync.BINDINGS_RESYNC)
    resync.resync()
    assert marks.exists(resync.HOUSEKEEPING_QUEUED % resync.BINDINGS_RESYNC)
