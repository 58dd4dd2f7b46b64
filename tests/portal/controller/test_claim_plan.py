"""The claim of a chunk's created step workflows finds its units by primary key, whatever the
table's statistics say: a fan-out's units are inserted after the last ANALYZE, and a claim
driven by the ``workflow_name`` or ``(site, phase)`` index walked every unclaimed unit for each
chunk of fifty."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from portal.choices import UnitPhase
from portal.controller import submit
from portal.models import UnitRun, WorkflowRun
from tests.factories import UserFactory
from tests.portal.helpers import make_run

pytestmark = [pytest.mark.django_db]


def _units(phase: str, n: int) -> WorkflowRun:
    return make_run(
        UserFactory(),
        units=[(f"tile-{i}", f"site-{i % 50:03d}", phase, []) for i in range(n)],
        decisions=False,
    )


def _stale_statistics_then_a_fan_out() -> list[UnitRun]:
    """Statistics taken over claimed units only, then 3,000 Pending ones with none."""
    done = _units(UnitPhase.SUCCEEDED, 60)
    for unit in done.units.all():
        UnitRun.objects.filter(pk=unit.pk).update(workflow_name=f"wf-{unit.pk}")
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {UnitRun._meta.db_table}")
    fan_out = _units(UnitPhase.PENDING, 3000)
    UnitRun.objects.filter(run=fan_out).update(workflow_name="")
    return list(fan_out.units.order_by("id"))


def _scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of the plan that reads the units table."""
    found = [plan] if plan.get("Relation Name") == UnitRun._meta.db_table else []
    for child in plan.get("Plans", []):
        found += _scans(child)
    return found


def test_the_claim_reads_its_units_by_primary_key_under_stale_statistics() -> None:
    pending = _stale_statistics_then_a_fan_out()
    chunk = [(u, f"step-{u.pk}") for u in pending[1500:1550]]
    sql, params = submit.claim_statement(chunk, timezone.now())
    with connection.cursor() as cursor:
        # On a table this small a sequential scan is the cheapest read, and either form of
        # the claim may take it; on a fleet's table (tens of thousands of wide rows) it is the
        # costliest. Without it, the index the claim is driven by shows.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        (plan,) = cursor.fetchone()[0]
    scans = _scans(plan["Plan"])
    reads = [s for s in scans if s["Node Type"] != "ModifyTable"]
    assert reads, plan
    assert all(s.get("Index Name") == f"{UnitRun._meta.db_table}_pkey" for s in reads), reads
    # One row read per unit of the chunk, not every unclaimed unit of the fan-out.
    assert sum(s["Actual Rows"] * s["Actual Loops"] for s in reads) == len(chunk)


def test_the_claim_skips_units_that_moved_on() -> None:
    pending = _units(UnitPhase.PENDING, 4).units.order_by("id")
    fresh, retried, ended, claimed = list(pending)
    UnitRun.objects.filter(pk=retried.pk).update(attempt=2)
    UnitRun.objects.filter(pk=ended.pk).update(phase=UnitPhase.OMITTED)
    UnitRun.objects.filter(pk=claimed.pk).update(workflow_name="someone-elses")
    UnitRun.objects.filter(pk=fresh.pk).update(workflow_name="")
    chunk = [(u, f"step-{u.pk}") for u in (fresh, retried, ended, claimed)]
    with connection.cursor() as cursor:
        cursor.execute(*submit.claim_statement(chunk, timezone.now()))
        ids = {row[0] for row in cursor.fetchall()}
    assert ids == {fresh.pk}
    assert UnitRun.objects.get(pk=fresh.pk).workflow_name == f"step-{fresh.pk}"
    assert UnitRun.objects.get(pk=claimed.pk).workflow_name == "someone-elses"
