"""Big submissions: units streamed with COPY, candidate tables stored once per
distinct table while every unit keeps its own decision row."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from rest_framework.test import APIClient

from placement import codec, planner
from placement.revisions.models import PlanningRecord
from portal import bulk
from portal.models import BULK_ROWS, CandidateTable, PlacementDecision, UnitRun, WorkflowRun


@pytest.fixture
def sci(db: Any) -> APIClient:
    call_command("load_demo", verbosity=0)
    client = APIClient()
    client.force_authenticate(User.objects.get(username="scientist"))
    return client


def wide(n: int) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "wide-"},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {
                    "name": "main",
                    "dag": {"tasks": [{"name": f"t{i}", "template": "c"} for i in range(n)]},
                },
                {"name": "c", "container": {"image": "x/c"}},
            ],
        },
    }


def fan_out(items: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "tiles-"},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {
                    "name": "main",
                    "dag": {
                        "tasks": [
                            {
                                "name": "tile",
                                "template": "work",
                                "arguments": {"parameters": [{"name": "uri", "value": "{{item}}"}]},
                                "withItems": items,
                            },
                            {"name": "alone", "template": "gpu"},
                        ]
                    },
                },
                {
                    "name": "work",
                    "inputs": {"parameters": [{"name": "uri"}]},
                    "container": {"image": "x/work"},
                },
                {
                    "name": "gpu",
                    "container": {
                        "image": "x/gpu",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    },
                },
            ],
        },
    }


def stored(run_id: int) -> list[Any]:
    return list(
        UnitRun.objects.filter(run_id=run_id)
        .order_by("position")
        .values(
            "name", "slug", "template", "position", "depends", "upstream", "when", "timing",
            "site", "planned_site", "phase", "attempt", "reason", "message", "spec", "outputs",
            "workflow_name", "workflow_deleted_at", "submitted_at", "started_at", "finished_at",
        )
    )  # fmt: skip


def test_a_large_submission_is_streamed_and_stores_what_bulk_create_stored(
    sci: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 2 * BULK_ROWS + 1
    with CaptureQueriesContext(connection) as queries:
        copied = sci.post("/api/v1/runs/?project=eo-demo", data=wide(n), format="json")
    assert copied.status_code == 201, copied.content
    sqls = [q["sql"] for q in queries]
    # No INSERT of 1,001 rows: one query for their ids, then COPY (not a Django query).
    assert not [s for s in sqls if s.startswith('INSERT INTO "portal_unitrun"')]
    assert len([s for s in sqls if "nextval" in s and "portal_unitrun" in s]) == 1
    body = copied.json()
    assert len(body["units"]) == n
    assert [u["name"] for u in body["units"]] == [u["name"] for u in stored(body["id"])]
    assert UnitRun.objects.filter(run_id=body["id"], updated_at__isnull=True).count() == 0
    # The same workflow through bulk_create stores the same rows.
    monkeypatch.setattr(bulk, "COPY_MIN_ROWS", 10**9)
    inserted = sci.post("/api/v1/runs/?project=eo-demo", data=wide(n), format="json")
    assert inserted.status_code == 201
    assert stored(body["id"]) == stored(inserted.json()["id"])
    # Decisions too: each unit its own, pointing at its own unit.
    for run_id in (body["id"], inserted.json()["id"]):
        rows = PlacementDecision.objects.filter(run_id=run_id)
        assert rows.count() == n
        assert {d.unit_id for d in rows} == set(
            UnitRun.objects.filter(run_id=run_id).values_list("id", flat=True)
        )


def test_the_units_a_copy_returns_are_the_rows_it_stored(sci: APIClient) -> None:
    """``create_rows`` builds the stored objects without ``Model.__init__``: each must be what
    the database gives back, field for field, and act as a model object that was loaded."""
    items = [f"s3://tiles/t{i}.tif" for i in range(bulk.COPY_MIN_ROWS + 5)]
    response = sci.post("/api/v1/runs/?project=eo-demo", data=fan_out(items), format="json")
    assert response.status_code == 201, response.content
    assert response.json() == sci.get(f"/api/v1/runs/{response.json()['id']}/").json()
    run = WorkflowRun.objects.get(pk=response.json()["id"])
    again = WorkflowRun.objects.create(name=f"{run.name}-b", owner=run.owner, manifest={})
    rows = [
        UnitRun.plan_row(again.pk, codec.unit_from_dict(u.spec), _decision(u), position=u.position)
        for u in run.units.order_by("position")
    ]
    built = bulk.create_rows(UnitRun, UnitRun.PLAN_COLUMNS, rows, batch_size=BULK_ROWS)
    names = [f.attname for f in UnitRun._meta.concrete_fields]
    for obj in built:
        loaded = UnitRun.objects.get(pk=obj.pk)
        assert {n: getattr(obj, n) for n in names} == {n: getattr(loaded, n) for n in names}
        assert not obj._state.adding and obj._state.db == "default"
    first = built[0]
    assert first.run == again  # a relation resolves as on a loaded object
    first.phase = "Running"
    first.save(update_fields=["phase"])  # an update, not a second insert
    assert UnitRun.objects.get(pk=first.pk).phase == "Running"
    assert built[1].outputs == {} and built[1].outputs is not built[2].outputs


def test_a_fan_outs_planning_record_holds_every_unit_as_stored_and_replays(
    sci: APIClient,
) -> None:
    """The submission's planning record is streamed in (``bulk.insert_big``): it holds each
    unit as the run's rows do, and replay reads it back into the units that were planned."""
    items = [f"s3://tiles/t{i}.tif" for i in range(bulk.COPY_MIN_ROWS + 5)]
    response = sci.post("/api/v1/runs/?project=eo-demo", data=fan_out(items), format="json")
    assert response.status_code == 201, response.content
    run = WorkflowRun.objects.get(pk=response.json()["id"])
    record = PlanningRecord.objects.get(run_id=run.pk, admission_uid__isnull=True)
    specs = list(run.units.order_by("position").values_list("spec", flat=True))
    assert record.units == specs and record.n_units == len(specs) == len(items) + 1
    assert record.project == "eo-demo" and record.snapshot.body["sites"]
    replayed = [codec.unit_from_dict(doc) for doc in record.units]
    assert [u.name for u in replayed] == list(
        run.units.order_by("position").values_list("name", flat=True)
    )
    first = next(u for u in replayed if u.item == "s3://tiles/t0.tif")
    assert first.data_refs == ("s3://tiles/t0.tif",)


def _decision(unit: UnitRun) -> Any:
    return planner.Decision(
        unit=unit.name,
        template=unit.template,
        depends=unit.depends,
        timing="runtime" if unit.timing == "runtime" else "submit",
        site=unit.site or None,
        reason=unit.reason,
        table=None,  # type: ignore[arg-type]
    )


def test_items_with_one_table_share_it_and_keep_their_own_decisions(sci: APIClient) -> None:
    items = [f"s3://tiles/t{i}.tif" for i in range(4)]
    response = sci.post("/api/v1/runs/?project=eo-demo", data=fan_out(items), format="json")
    assert response.status_code == 201, response.content
    run = WorkflowRun.objects.get(pk=response.json()["id"])
    decisions = list(PlacementDecision.objects.filter(run=run).select_related("unit"))
    assert len(decisions) == 5  # four items and the GPU step, each its own row
    names = {d.pk: d.unit.name if d.unit else "" for d in decisions}
    tiles = [d for d in decisions if names[d.pk].startswith("tile")]
    alone = next(d for d in decisions if d.unit and d.unit.name == "alone")
    # The four items share one stored table; the GPU step's differs and stays inline.
    assert CandidateTable.objects.filter(run=run).count() == 1
    assert {d.shared_table_id for d in tiles} == {CandidateTable.objects.get(run=run).pk}
    assert all(d.candidates == [] for d in tiles)
    assert alone.shared_table_id is None and len(alone.candidates) == 3
    # The API answers every decision with its full table, as before.
    answered = sci.get(f"/api/v1/runs/{run.pk}/decisions/").json()
    tables = {d["unit"]: d["candidates"] for d in answered}
    assert all(len(t) == 3 for t in tables.values())
    assert len({str(tables[names[d.pk]]) for d in tiles}) == 1
    assert tables["alone"] != tables[names[tiles[0].pk]]
    assert {c["site"] for c in tables[names[tiles[0].pk]]} == {"site-a", "site-b", "site-c"}
    # ...and so does the run page's decision log, in a bounded number of queries.
    page = Client()
    page.force_login(User.objects.get(username="scientist"))
    with CaptureQueriesContext(connection) as queries:
        html = page.get(reverse("ui-run-decisions", args=[run.pk]), secure=True)
    assert html.status_code == 200
    text = html.content.decode()
    assert text.count("No candidate table was recorded") == 0
    assert text.count('<td><span class="swatch"') == 5 * 3
    assert not [q for q in queries if q["sql"].count('FROM "portal_candidatetable"')]
    # Deleting the run deletes its tables.
    run.delete()
    assert not CandidateTable.objects.exists()
