"""The runtime placement webhook places steps of the demo run and workflows created directly."""

from __future__ import annotations

from placement import parser
from portal.admission import decide
from portal.choices import DecisionSource, UnitTiming
from portal.models import PlacementDecision, UnitRun
from sites.models import Site, SiteLink
from tests.portal.admission.helpers import (
    EO_PIPELINE,
    GB,
    D,
    answer,
    direct_workflow,
    patched_labels,
    post,
    review,
    step_workflow,
)


def test_it_places_preprocess_at_site_b_when_site_a_has_no_free_cpu(client, demo_run):
    resp, patch = answer(post(client, review(step_workflow(demo_run))))

    assert resp["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    assert patch is not None
    ops = patched_labels(patch)
    assert ops[f"/metadata/labels/{D.replace('/', '~1')}~1site"] == "site-b"
    reason = ops["/metadata/annotations"][f"{D}/reason"]
    unit = demo_run.units.get(name="preprocess")
    assert unit.site == "site-b"
    assert unit.reason == reason
    decision = PlacementDecision.objects.get(unit=unit, source=DecisionSource.WEBHOOK)
    assert decision.site == "site-b"
    assert decision.timing == UnitTiming.RUNTIME
    assert decision.attempt == 1
    assert decision.workflow_name == f"{demo_run.name}-{unit.slug}-1"
    table = {c["site"]: c for c in decision.candidates}
    assert table["site-a"]["eligible"] is False
    assert "CPU" in table["site-a"]["why"]
    # GPU site-c cannot read site-a's repository, and a built step is not given a copy.
    assert table["site-c"]["eligible"] is False
    assert table["site-c"]["why"].startswith("cannot reach the artifact repository of site-a")
    assert table["site-b"]["bytes_to_move"] == 20 * GB


def test_it_says_busy_when_site_a_could_run_it_but_has_no_cpu_free_now(client, demo_run):
    Site.objects.filter(name="site-a").update(
        cpu_allocatable=64_000, cpu_allocated=62_000, memory_allocatable=256 * 2**30
    )
    _, patch = answer(post(client, review(step_workflow(demo_run))))

    assert patch is not None
    decision = PlacementDecision.objects.get(source=DecisionSource.WEBHOOK)
    assert decision.site == "site-b"
    site_a = next(c for c in decision.candidates if c["site"] == "site-a")
    assert site_a["why"].startswith("busy: needs 8 CPU")


def test_it_places_preprocess_at_site_a_when_site_a_has_room(client, demo_run):
    Site.objects.filter(name="site-a").update(
        cpu_allocatable=64_000, cpu_allocated=0, memory_allocatable=256 * 2**30, memory_allocated=0
    )
    _, patch = answer(post(client, review(step_workflow(demo_run))))

    assert patch is not None
    assert patched_labels(patch)[f"/metadata/labels/{D}~1site"] == "site-a"
    assert demo_run.units.get(name="preprocess").site == "site-a"
    decision = PlacementDecision.objects.get(source=DecisionSource.WEBHOOK)
    table = {c["site"]: c for c in decision.candidates}
    assert table["site-a"]["eligible"] and table["site-b"]["eligible"]
    assert table["site-a"]["score"] > table["site-b"]["score"] > 0
    assert table["site-a"]["bytes_to_move"] == 0
    assert "data locality" in decision.reason


def test_it_sees_a_cordon_within_the_snapshot_lifetime_only_after_refresh(client, demo_run):
    # Here site-c reads site-a's repository (in the demo fleet it does not).
    SiteLink.objects.filter(source__name="site-a", target__name="site-c").update(
        artifacts_reachable=True
    )
    # A cordoned site-b is not a candidate once the snapshot is refreshed.
    Site.objects.filter(name="site-b").update(cordoned=True)
    decide.snapshot_clear()
    answer(post(client, review(step_workflow(demo_run))))
    decision = PlacementDecision.objects.get(source=DecisionSource.WEBHOOK)
    assert decision.site == "site-c"
    assert {c["site"]: c["why"] for c in decision.candidates}["site-b"] == "cordoned"


def test_it_does_not_touch_the_unit_for_a_superseded_attempt(client, demo_run):
    body = review(step_workflow(demo_run))
    UnitRun.objects.filter(run=demo_run, name="preprocess").update(attempt=2)

    _, patch = answer(post(client, body))

    assert patch is None
    assert demo_run.units.get(name="preprocess").site == ""
    assert not PlacementDecision.objects.filter(source=DecisionSource.WEBHOOK).exists()


def test_it_records_nothing_on_dry_run(client, demo_run):
    _, patch = answer(post(client, review(step_workflow(demo_run), dry_run=True)))

    assert patch is not None
    assert demo_run.units.get(name="preprocess").site == ""
    assert not PlacementDecision.objects.filter(source=DecisionSource.WEBHOOK).exists()


def test_it_ignores_runtime_labels_outside_the_portal_namespace(client, demo_run):
    _, patch = answer(post(client, review(step_workflow(demo_run), namespace="someone-else")))

    assert patch is None
    assert demo_run.units.get(name="preprocess").site == ""


def test_it_places_a_workflow_created_directly_by_the_rules(client, demo_run):
    from tests.factories import PlacementRuleFactory

    PlacementRuleFactory(
        name="hello-on-b",
        selector={"template": "main"},
        effect="pin",
        parameters={"sites": ["site-b"]},
    )
    obj = direct_workflow()  # no labels at all, as `argo submit` sends it
    _, patch = answer(post(client, review(obj, namespace="argo")))

    assert patch == [
        {"op": "add", "path": "/metadata/labels", "value": {f"{D}/site": "site-b"}},
        {
            "op": "add",
            "path": "/metadata/annotations",
            "value": {f"{D}/reason": patch[1]["value"][f"{D}/reason"]},
        },
    ]
    assert "hello-on-b" in patch[1]["value"][f"{D}/reason"]
    decision = PlacementDecision.objects.get(workflow_name="hello-x7k2p")
    assert decision.run is None and decision.unit is None
    assert decision.source == DecisionSource.WEBHOOK
    assert decision.site == "site-b"


def test_it_places_the_whole_demo_pipeline_created_directly_where_its_gpu_step_fits(
    client, demo_run
):
    obj = parser.decode_document(EO_PIPELINE.read_text())
    obj["metadata"]["name"] = "eo-pipeline-abcde"
    _, patch = answer(post(client, review(obj, namespace="argo")))

    assert patch is not None
    # Labels exist (app: eo-pipeline): the site key is added into them, escaped.
    assert patch[0] == {"op": "add", "path": f"/metadata/labels/{D}~1site", "value": "site-c"}
    assert PlacementDecision.objects.get(workflow_name="eo-pipeline-abcde").site == "site-c"


def test_it_leaves_a_workflow_that_already_has_a_site_unchanged(client, demo_run):
    obj = step_workflow(demo_run, **{f"{D}/site": "site-c"})
    _, patch = answer(post(client, review(obj)))
    assert patch is None
    _, patch = answer(post(client, review(direct_workflow(labels={f"{D}/site": "site-a"}))))
    assert patch is None
    assert not PlacementDecision.objects.filter(source=DecisionSource.WEBHOOK).exists()


def test_it_leaves_a_managed_workflow_without_runtime_label_unchanged(client, demo_run):
    obj = step_workflow(demo_run)
    del obj["metadata"]["labels"][f"{D}/placement"]
    _, patch = answer(post(client, review(obj)))
    assert patch is None


def test_it_allows_a_direct_workflow_that_does_not_parse_without_patch(client, db):
    obj = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": "x"}}
    _, patch = answer(post(client, review(obj)))
    assert patch is None


def test_without_a_context_it_places_only_where_the_quota_admitted_the_unit(client, demo_run):
    # The worker admitted the unit for site-b only (its quota is full at site-a,
    # where data locality would send it now that site-a has room); the database path reads
    # that, in the unit's own query, as the context would say it.
    from django.utils import timezone

    from portal.quotas.models import Workload
    from sites.models import Project

    Site.objects.filter(name="site-a").update(
        cpu_allocatable=64_000, cpu_allocated=0, memory_allocatable=256 * 2**30, memory_allocated=0
    )
    unit = demo_run.units.get(name="preprocess")
    Workload.objects.create(
        unit=unit,
        run=demo_run,
        project=Project.objects.get(name="eo-demo"),
        site="",
        sites=["site-b"],
        admitted_at=timezone.now(),
    )
    _, patch = answer(post(client, review(step_workflow(demo_run))))
    assert patch is not None
    placed = [
        op["value"] if op["path"].endswith("~1site") else op["value"].get(f"{D}/site")
        for op in patch
        if op["path"].startswith("/metadata/labels")
    ]
    assert placed == ["site-b"], patch
