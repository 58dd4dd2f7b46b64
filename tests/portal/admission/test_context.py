"""The hot path's queries and the placement context a step workflow carries."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from portal.admission import decide
from portal.admission import queue as decision_queue
from portal.choices import DecisionSource
from portal.models import PlacementDecision, UnitRun
from sites.models import Dataset, SiteLink
from tests.factories import SiteFactory
from tests.portal.admission.helpers import (
    GB,
    D,
    answer,
    context_of,
    patched_labels,
    post,
    real_step_workflow,
    review,
    step_workflow,
)


def test_without_a_context_it_reads_in_a_fixed_small_number_of_queries(
    client, demo_run, django_assert_max_num_queries
):
    decide.snapshot_get()  # warm, as under load
    body = review(step_workflow(demo_run))
    # savepoint, statement timeout, unit, upstream units, release; the decision is queued
    with django_assert_max_num_queries(5):
        _, patch = answer(post(client, body, flush=False))
    assert patch is not None


def test_its_query_count_does_not_grow_with_the_fleet(client, demo_run):
    body = review(step_workflow(demo_run))

    def count() -> int:
        decide.snapshot_clear()
        with CaptureQueriesContext(connection) as ctx:
            answer(post(client, body, flush=False))
        return len(ctx.captured_queries)

    small = count()
    SiteFactory.create_batch(30)
    assert count() == small


def test_a_runtime_step_workflow_carries_its_placement_context(demo_run):
    obj = real_step_workflow(demo_run)

    context = context_of(obj)
    # Submitted without a project, the run went to the scientist's only project.
    assert context["project"] == "eo-demo"
    assert context["unit"]["name"] == "preprocess"
    assert context["unit"]["resources"]["cpu_millicores"] == 8000
    assert context["upstream"] == {"ingest": ["site-a", 20 * GB]}
    # A unit placed at submission has a site and no context: nothing to decide at admission.
    placed = real_step_workflow(demo_run, "ingest")
    assert f"{D}/placement-context" not in placed["metadata"]["annotations"]


def test_with_its_context_an_admission_reads_and_writes_no_database(client, demo_run):
    decide.snapshot_get()  # warm, as under load
    body = review(real_step_workflow(demo_run), uid="ctx-1")

    with CaptureQueriesContext(connection) as ctx:
        _, patch = answer(post(client, body, flush=False))

    assert ctx.captured_queries == []
    assert patch is not None
    assert patched_labels(patch)[f"/metadata/labels/{D}~1site"] == "site-b"
    # Queued, not yet written; the drain writes it with its candidates and places the unit.
    assert not PlacementDecision.objects.filter(source=DecisionSource.WEBHOOK).exists()
    assert decision_queue.decisions_flush() == 1
    decision = PlacementDecision.objects.get(source=DecisionSource.WEBHOOK)
    assert decision.admission_uid == "ctx-1"
    assert decision.unit == demo_run.units.get(name="preprocess")
    assert {c["site"] for c in decision.candidates} == {"site-a", "site-b", "site-c"}
    assert demo_run.units.get(name="preprocess").site == "site-b"


def test_the_context_decides_like_the_database_would(client, demo_run):
    obj = real_step_workflow(demo_run)
    bare = json.loads(json.dumps(obj))
    del bare["metadata"]["annotations"][f"{D}/placement-context"]
    with_context = answer(post(client, review(obj, uid="a")))[1]
    from_database = answer(post(client, review(bare, uid="b")))[1]

    assert with_context == from_database
    a, b = PlacementDecision.objects.filter(source=DecisionSource.WEBHOOK).order_by("id")
    assert a.candidates == b.candidates


def test_both_ways_the_webhook_binds_a_step_by_what_its_ancestors_read(client, demo_run):
    """ingest read sentinel2-l1c, which may now only be read in eu-central: preprocess reads
    only ingest's outputs (pulled to site-a by their 20 GB), and both the placement context
    and the database path bind it to site-c, saying why."""
    # Here site-c reads site-a's repository (in the demo fleet it does not).
    SiteLink.objects.filter(source__name="site-a", target__name="site-c").update(
        artifacts_reachable=True
    )
    Dataset.objects.filter(name="sentinel2-l1c").update(residency=["eu-central"])
    obj = real_step_workflow(demo_run)
    (ingest,) = context_of(obj)["ancestors"]
    assert (ingest["name"], ingest["datasets"]) == ("ingest", ["sentinel2-l1c"])
    bare = json.loads(json.dumps(obj))
    del bare["metadata"]["annotations"][f"{D}/placement-context"]
    for uid, body in (("ctx", obj), ("db", bare)):
        _, patch = answer(post(client, review(body, uid=uid)))
        assert patched_labels(patch or [])[f"/metadata/labels/{D}~1site"] == "site-c", uid
        decision = PlacementDecision.objects.get(admission_uid=uid)
        assert "bound to eu-central by sentinel2-l1c read upstream" in decision.reason, uid


def test_a_declared_output_size_travels_in_the_context_and_says_so(client, demo_run):
    """ingest's member reported no sizes: the size its template declares is what counts,
    and the candidate rows say it was declared."""
    UnitRun.objects.filter(run=demo_run, name="ingest").update(
        outputs={
            "parameters": [{"name": "tile-count", "value": "12"}],
            "artifacts": [{"name": "tiles", "s3": {"key": "runs/ingest/tiles.tgz"}}],
        },
        spec={**demo_run.units.get(name="ingest").spec, "output_bytes": 3 * GB},
    )
    obj = real_step_workflow(demo_run)
    assert context_of(obj)["upstream"] == {"ingest": ["site-a", 3 * GB, "declared"]}
    answer(post(client, review(obj, uid="sized")))
    decision = PlacementDecision.objects.get(admission_uid="sized")
    why = {c["site"]: c["why"] for c in decision.candidates}
    assert "upstream output 2.8 GiB (declared) from site-a" in why["site-b"], why


@pytest.mark.parametrize(
    "mangle",
    [
        lambda c: "not json",
        lambda c: json.dumps({**c, "v": 99}),
        lambda c: json.dumps({**c, "unit": {"oops": 1}}),
        lambda c: json.dumps({**c, "upstream": {"ingest": "site-a"}}),
        lambda c: json.dumps({**c, "upstream": {"ingest": ["site-a", "many"]}}),
        lambda c: json.dumps({**c, "project": 7}),
        lambda c: json.dumps([c]),
        lambda c: json.dumps({**c, "unit": {**c["unit"], "slug": "ingest"}}),
        lambda c: json.dumps({**c, "unit": {**c["unit"], "labels": {"tier": 1}}}),
        lambda c: json.dumps({**c, "unit": {**c["unit"], "resources": {"gpus": -1}}}),
        lambda c: json.dumps({**c, "unit": {**c["unit"], "kind": "pod"}}),
        lambda c: json.dumps({**c, "unit": {**c["unit"], "images": "busybox"}}),
        lambda c: json.dumps({k: v for k, v in c.items() if k != "ancestors"}),
        lambda c: json.dumps({**c, "ancestors": [{"name": "ingest", "datasets": "s2"}]}),
        lambda c: json.dumps({**c, "upstream": {"ingest": ["site-a", None, "declared"]}}),
        lambda c: json.dumps({**c, "v": 1}),
    ],
)
def test_a_malformed_context_falls_back_to_the_database(client, demo_run, mangle):
    obj = real_step_workflow(demo_run)
    key = f"{D}/placement-context"
    obj["metadata"]["annotations"][key] = mangle(context_of(obj))
    decide.snapshot_get()

    with CaptureQueriesContext(connection) as ctx:
        _, patch = answer(post(client, review(obj), flush=False))

    assert any("portal_unitrun" in q["sql"] for q in ctx.captured_queries)
    assert patched_labels(patch or [])[f"/metadata/labels/{D}~1site"] == "site-b"
