"""A submission's decisions as rows: one per unit decided at submission (each
item of a fan-out keeps its own), with candidate tables stored once where units share
them (``CandidateTable``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.utils import timezone

from placement import planner
from portal import bulk
from portal.choices import DecisionSource, UnitTiming
from portal.models import BULK_ROWS, CandidateTable, PlacementDecision, UnitRun, WorkflowRun

COLUMNS = (
    "run_id",
    "unit_id",
    "source",
    "timing",
    "site",
    "reason",
    "candidates",
    "shared_table_id",
    "created_at",
)


def store_submitted(run: WorkflowRun, by_name: dict[str, UnitRun], plan: planner.Plan) -> None:
    """The planner gives units with the same rules, data, requests and upstream sites one
    table (a fan-out's items mostly differ only by where their data is: 50 distinct tables
    for 10,000 tiles over 50 sites); such a table is built and stored once, and its units'
    decisions point to it. A table of one unit stays on its decision, as before.

    Rows, not model objects: nobody reads these decisions back in the request, and 10,000
    ``PlacementDecision`` objects cost more than writing them."""
    submitted = [d for d in plan.decisions if d.timing == "submit"]
    uses = Counter(id(d.table) for d in submitted)
    shared: dict[int, CandidateTable] = {}
    for d in submitted:
        key = id(d.table)  # the plan holds every table, so ids stay unique meanwhile
        if uses[key] > 1 and key not in shared:
            shared[key] = CandidateTable(run=run, rows=[c.as_dict() for c in d.candidates])
    CandidateTable.objects.bulk_create(list(shared.values()), batch_size=BULK_ROWS)
    now = timezone.now()
    empty: list[Any] = []  # one object: encoded once
    rows = []
    for d in submitted:
        table = shared.get(id(d.table))
        rows.append(
            (
                run.pk,
                by_name[d.unit].pk,
                DecisionSource.RULE,
                UnitTiming.SUBMIT,
                d.site or "",
                d.reason,
                empty if table is not None else [c.as_dict() for c in d.candidates],
                table.pk if table is not None else None,
                now,
            )
        )
    bulk.insert_rows(PlacementDecision, COLUMNS, rows, batch_size=BULK_ROWS)
