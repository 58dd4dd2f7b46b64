"""The runtime placement webhook: AdmissionReviews as karmada-apiserver sends them."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from placement import context, parser, planner
from portal import services
from portal.admission import budget, decide
from portal.admission import queue as decision_queue
from portal.choices import DecisionSource, UnitPhase, UnitTiming
from portal.controller.bindings import binding_observe
from portal.controller.step_workflow import step_workflow_for
from portal.controller.sync import webhook_configuration, webhook_register
from portal.models import PlacementDecision, UnitRun, WorkflowRun
from sites.models import Dataset, Site, SiteLink
from tests.factories import SiteFactory

EO_PIPELINE = Path(__file__).resolve().parents[2] / "examples" / "eo-pipeline.yaml"
TOKEN = "webhook-test-token"
URL = "/webhooks/placement/"
D = "portal.multisite.io"
GB = 10**9


@pytest.fixture(autouse=True)
def _webhook_settings(settings):
    settings.PORTAL_WEBHOOK_TOKEN = TOKEN
    settings.PORTAL_LABEL_DOMAIN = D
    settings.KARMADA_NAMESPACE = "portal"
    settings.PORTAL_WEBHOOK_BUDGET_MS = 500
    decide.snapshot_clear()
    assert decision_queue._queue() is not None, "these tests run with the queue (REDIS_URL)"
    yield
    decide.snapshot_clear()


def review(
    obj: dict[str, Any],
    *,
    uid: str = "705ab4f5-6393-11e8-b7cc-42010a800002",
    namespace: str = "portal",
    operation: str = "CREATE",
    dry_run: bool = False,
) -> dict[str, Any]:
    """An AdmissionReview the way karmada-apiserver (kube-apiserver) sends one on CREATE."""
    gvk = {"group": "argoproj.io", "version": "v1alpha1", "kind": "Workflow"}
    gvr = {"group": "argoproj.io", "version": "v1alpha1", "resource": "workflows"}
    return {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": uid,
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": obj.get("metadata", {}).get("name", ""),
            "namespace": namespace,
            "operation": operation,
            "userInfo": {
                "username": "system:admin",
                "groups": ["system:masters", "system:authenticated"],
            },
            "object": obj,
            "oldObject": None,
            "dryRun": dry_run,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


def post(
    client: Client, body: Any, *, path: str | None = None, auth: bool = True, flush: bool = True
):
    """POST to the webhook; ``flush``: then write the queued decisions as the watcher would."""
    headers = {"Authorization": f"Bearer {TOKEN}"} if auth else {}
    data = body if isinstance(body, bytes | str) else json.dumps(body)
    response = client.post(path or URL, data=data, content_type="application/json", headers=headers)
    if flush:
        decision_queue.decisions_flush()
    return response


def answer(response) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["kind"] == "AdmissionReview"
    assert body["apiVersion"] == "admission.k8s.io/v1"
    resp = body["response"]
    assert resp["allowed"] is True
    if "patch" not in resp:
        assert "patchType" not in resp
        return resp, None
    assert resp["patchType"] == "JSONPatch"
    return resp, json.loads(base64.b64decode(resp["patch"]))


def patched_labels(patch: list[dict[str, Any]]) -> dict[str, Any]:
    return {op["path"]: op["value"] for op in patch}


# --------------------------------------------------------------------------------------------
# The demo scenario


@pytest.fixture
def demo_run(db, settings) -> WorkflowRun:
    # The demo loader sets passwords; the default hasher's cost is not what is tested here.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    call_command("load_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    user = get_user_model().objects.get(username="scientist")
    run = services.run_submit(user=user, body=EO_PIPELINE.read_text())
    UnitRun.objects.filter(run=run, name="ingest").update(
        phase=UnitPhase.SUCCEEDED,
        site="site-a",
        outputs={
            "parameters": [{"name": "tile-count", "value": "12"}],
            "artifacts": [
                {"name": "tiles", "s3": {"key": "runs/ingest/tiles.tgz"}, "size": 20 * GB}
            ],
        },
    )
    return run


def step_workflow(run: WorkflowRun, unit: str = "preprocess", **extra_labels: str):
    u = run.units.get(name=unit)
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {
            "name": f"{run.name}-{u.slug}-{u.attempt}",
            "namespace": "portal",
            "labels": {
                f"{D}/managed": "true",
                f"{D}/run": str(run.pk),
                f"{D}/unit": u.slug,
                f"{D}/attempt": str(u.attempt),
                f"{D}/placement": "runtime",
                **extra_labels,
            },
        },
        "spec": {"entrypoint": u.template, "templates": [{"name": u.template}]},
    }


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


# --------------------------------------------------------------------------------------------
# Workflows created directly on Karmada, and ones that already have a site


def direct_workflow(**metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "hello-x7k2p", "generateName": "hello-", **metadata},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {
                    "name": "main",
                    "steps": [[{"name": "say", "template": "say"}]],
                },
                {
                    "name": "say",
                    "container": {
                        "image": "busybox",
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                    },
                },
            ],
        },
    }


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


# --------------------------------------------------------------------------------------------
# Never in the way: errors and the budget


def test_it_allows_without_patch_when_the_planner_fails(client, demo_run, monkeypatch):
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("planner exploded")

    monkeypatch.setattr(planner, "decide", broken)
    _, patch = answer(post(client, review(step_workflow(demo_run))))
    assert patch is None
    assert demo_run.units.get(name="preprocess").site == ""


def test_it_allows_without_patch_when_the_unit_spec_is_corrupt(client, demo_run):
    UnitRun.objects.filter(run=demo_run, name="preprocess").update(spec={"oops": 1})
    _, patch = answer(post(client, review(step_workflow(demo_run))))
    assert patch is None


def test_it_allows_without_patch_for_an_unknown_run(client, demo_run):
    obj = step_workflow(demo_run, **{f"{D}/run": "999999"})
    _, patch = answer(post(client, review(obj)))
    assert patch is None


def test_it_allows_without_patch_when_the_budget_is_spent_before_it_starts(
    client, demo_run, settings
):
    settings.PORTAL_WEBHOOK_BUDGET_MS = 0
    _, patch = answer(post(client, review(step_workflow(demo_run))))
    assert patch is None
    assert demo_run.units.get(name="preprocess").site == ""


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_it_rolls_back_and_allows_without_patch_when_deciding_runs_past_the_budget(
    client, demo_run, monkeypatch
):
    clock = _Clock()
    monkeypatch.setattr(decide, "time", clock)
    monkeypatch.setattr(budget, "time", clock)
    monkeypatch.setattr("portal.webhook.time", clock)
    real_decide = planner.decide

    def slow(*args: Any, **kwargs: Any) -> Any:
        clock.now += 0.501  # the decision "took" just over the 500 ms budget
        return real_decide(*args, **kwargs)

    monkeypatch.setattr(planner, "decide", slow)
    _, patch = answer(post(client, review(step_workflow(demo_run))))

    assert patch is None
    assert demo_run.units.get(name="preprocess").site == ""
    assert not PlacementDecision.objects.filter(source=DecisionSource.WEBHOOK).exists()


# --------------------------------------------------------------------------------------------
# Authentication and bad input


def test_it_refuses_a_caller_without_token(client, demo_run):
    response = post(client, review(step_workflow(demo_run)), auth=False)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert demo_run.units.get(name="preprocess").site == ""


def test_it_refuses_a_wrong_token_in_header_or_path(client, demo_run):
    body = review(step_workflow(demo_run))
    bad_header = client.post(
        URL,
        json.dumps(body),
        content_type="application/json",
        headers={"Authorization": "Bearer x"},
    )
    assert bad_header.status_code == 403
    bad_path = post(client, body, path=f"{URL}wrong-token/", auth=False)
    assert bad_path.status_code == 403
    assert demo_run.units.get(name="preprocess").site == ""


def test_it_accepts_the_token_in_the_path_as_karmada_sends_it(client, demo_run):
    _, patch = answer(
        post(client, review(step_workflow(demo_run)), path=f"{URL}{TOKEN}/", auth=False)
    )
    assert patch is not None


def test_without_a_configured_token_it_is_open_only_in_debug(client, demo_run, settings):
    settings.PORTAL_WEBHOOK_TOKEN = ""
    settings.DEBUG = False
    assert post(client, review(direct_workflow()), auth=False).status_code == 403
    settings.DEBUG = True
    assert post(client, review(direct_workflow()), auth=False).status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[1, 2]",
        b'{"kind": "Pod", "apiVersion": "v1"}',
        b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}',
        b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {}}',
        b'{"kind": "AdmissionReview", "apiVersion": "v9", "request": {"uid": "u"}}',
        b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {"uid": 7}}',
    ],
)
def test_it_answers_400_to_a_body_that_is_not_an_admission_review(client, db, body):
    response = post(client, body)
    assert response.status_code == 400
    assert "AdmissionReview" in response.json()["error"]


def test_it_refuses_an_oversized_body(client, db):
    from portal.webhook import MAX_BODY_BYTES

    response = post(client, b" " * (MAX_BODY_BYTES + 1))
    assert response.status_code == 413


def test_it_only_accepts_post(client, db):
    response = client.get(URL, headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 405


# --------------------------------------------------------------------------------------------
# The hot path's queries


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


# --------------------------------------------------------------------------------------------
# The placement context and the decision queue


def real_step_workflow(run: WorkflowRun, unit: str = "preprocess") -> dict[str, Any]:
    """The step workflow exactly as the worker would create it (with its placement context)."""
    units = list(run.units.order_by("position", "id"))
    target = next(u for u in units if u.name == unit)
    return step_workflow_for(run, target, units)


def context_of(obj: dict[str, Any]) -> dict[str, Any]:
    return json.loads(obj["metadata"]["annotations"][f"{D}/placement-context"])


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


def test_the_drain_writes_each_decision_once_even_when_run_again(client, demo_run):
    queue = decision_queue._queue()
    answer(post(client, review(real_step_workflow(demo_run), uid="once"), flush=False))
    pending = queue.lrange(decision_queue._queue_key(), 0, -1)

    assert decision_queue.decisions_flush() == 1
    # A drainer that wrote its batch and died before trimming leaves the entry behind:
    queue.rpush(decision_queue._queue_key(), *pending)
    assert decision_queue.decisions_flush() == 1
    assert decision_queue.decisions_flush() == 0
    assert PlacementDecision.objects.filter(admission_uid="once").count() == 1


def test_an_entry_the_database_refuses_does_not_block_the_queue(client, demo_run):
    queue = decision_queue._queue()
    queue.rpush(decision_queue._queue_key(), b"not json", json.dumps({"uid": "x" * 300}))
    answer(post(client, review(real_step_workflow(demo_run), uid="after"), flush=False))

    decision_queue.decisions_flush()

    assert queue.llen(decision_queue._queue_key()) == 0
    assert PlacementDecision.objects.filter(admission_uid="after").exists()


@pytest.mark.parametrize("queue_url", ["", "redis://127.0.0.1:9/0"])
def test_without_a_reachable_queue_the_decision_is_written_at_once(
    client, demo_run, settings, queue_url
):
    settings.PORTAL_DECISION_QUEUE_URL = queue_url
    _, patch = answer(post(client, review(real_step_workflow(demo_run), uid="now"), flush=False))

    assert patch is not None
    decision = PlacementDecision.objects.get(admission_uid="now")
    assert decision.site == "site-b"
    assert demo_run.units.get(name="preprocess").site == "site-b"


def test_a_queued_decision_is_not_mistaken_for_the_fallback_policy(client, demo_run):
    """The watcher may see the binding before any drain ran: it writes the queue first."""
    obj = real_step_workflow(demo_run)
    answer(post(client, review(obj, uid="race"), flush=False))
    unit = demo_run.units.get(name="preprocess")
    UnitRun.objects.filter(pk=unit.pk).update(workflow_name=obj["metadata"]["name"])
    binding = {
        "spec": {
            "resource": {"kind": "Workflow", "name": obj["metadata"]["name"]},
            "clusters": [{"name": "site-b"}],
        }
    }

    binding_observe(binding)

    sources = set(PlacementDecision.objects.filter(unit=unit).values_list("source", flat=True))
    assert sources == {DecisionSource.WEBHOOK}
    assert demo_run.units.get(name="preprocess").site == "site-b"


def test_a_superseded_attempt_keeps_its_decision_but_not_the_unit(client, demo_run):
    answer(post(client, review(real_step_workflow(demo_run), uid="old"), flush=False))
    UnitRun.objects.filter(run=demo_run, name="preprocess").update(attempt=2)

    decision_queue.decisions_flush()

    assert PlacementDecision.objects.get(admission_uid="old").attempt == 1
    assert demo_run.units.get(name="preprocess").site == ""


def test_a_drain_never_trims_while_another_drainer_holds_the_lock(client, demo_run):
    queue = decision_queue._queue()
    key = decision_queue._queue_key()
    answer(post(client, review(real_step_workflow(demo_run), uid="held"), flush=False))
    queue.set(f"{key}:drain-lock", "someone-else")

    assert decision_queue.decisions_flush() == 0
    assert queue.llen(key) == 1
    assert not PlacementDecision.objects.filter(admission_uid="held").exists()
    queue.delete(f"{key}:drain-lock")
    assert decision_queue.decisions_flush() == 1


def test_a_drain_with_redis_down_says_so_and_loses_nothing(client, demo_run, settings):
    answer(post(client, review(real_step_workflow(demo_run), uid="kept"), flush=False))
    settings.PORTAL_DECISION_QUEUE_URL = "redis://127.0.0.1:9/0"
    with pytest.raises(decision_queue.QueueUnavailable):
        decision_queue.decisions_flush()
    settings.PORTAL_DECISION_QUEUE_URL = settings.REDIS_URL
    assert decision_queue.decisions_flush() == 1


def test_a_direct_workflow_decision_is_queued_too(client, demo_run):
    decide.snapshot_get()  # warm, as under load
    with CaptureQueriesContext(connection) as ctx:
        _, patch = answer(post(client, review(direct_workflow(), namespace="argo"), flush=False))
    assert patch is not None
    assert ctx.captured_queries == []  # no templateRef: no catalogue to read
    assert not PlacementDecision.objects.filter(workflow_name="hello-x7k2p").exists()
    assert decision_queue.decisions_flush() == 1
    assert PlacementDecision.objects.get(workflow_name="hello-x7k2p").run is None


def test_the_resync_writes_queued_decisions_when_no_watcher_runs(client, demo_run):
    from portal import tasks

    answer(post(client, review(real_step_workflow(demo_run), uid="beat"), flush=False))
    tasks.resync()
    assert PlacementDecision.objects.filter(admission_uid="beat").exists()


def test_the_fallback_policy_is_still_recorded_when_the_webhook_did_not_place(demo_run):
    obj = real_step_workflow(demo_run)
    unit = demo_run.units.get(name="preprocess")
    UnitRun.objects.filter(pk=unit.pk).update(workflow_name=obj["metadata"]["name"])
    binding_observe(
        {
            "spec": {
                "resource": {"kind": "Workflow", "name": obj["metadata"]["name"]},
                "clusters": [{"name": "site-c"}],
            }
        }
    )
    decision = PlacementDecision.objects.get(unit=unit)
    assert decision.source == DecisionSource.FALLBACK
    assert decision.site == "site-c"


# --------------------------------------------------------------------------------------------
# Pieces


def test_concurrent_pushes_all_land_and_share_round_trips():
    from concurrent.futures import ThreadPoolExecutor

    client = decision_queue._queue()
    key = decision_queue._queue_key()
    texts = [f"entry-{i}" for i in range(300)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda t: decision_queue._group_push(client, key, t), texts))
    assert sorted(x.decode() for x in client.lrange(key, 0, -1)) == sorted(texts)
    assert not decision_queue._pushes.pending and not decision_queue._pushes.busy


def test_a_failed_push_fails_every_entry_it_carried():
    from concurrent.futures import ThreadPoolExecutor

    import redis

    dead = redis.Redis.from_url("redis://127.0.0.1:9/0", socket_connect_timeout=0.25)

    def push(i: int) -> BaseException | None:
        try:
            decision_queue._group_push(dead, "k", str(i))
        except redis.RedisError as exc:
            return exc
        return None

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(push, range(40)))
    assert all(isinstance(o, redis.RedisError) for o in outcomes)
    assert not decision_queue._pushes.pending and not decision_queue._pushes.busy


def test_json_pointer_escapes_tilde_and_slash():
    assert decide.json_pointer("metadata", "labels", "a~b/c") == ("/metadata/labels/a~0b~1c")


@pytest.mark.parametrize(
    ("outputs", "expected"),
    [
        ({}, None),
        (None, None),
        ({"parameters": [{"name": "n", "value": "1"}]}, 0),
        ({"artifacts": [{"name": "a", "size": 5}, {"name": "b", "size": 7}]}, 12),
        ({"artifacts": [{"name": "a", "size": 5}, {"name": "b"}]}, None),
        ({"artifacts": [{"name": "a", "size": True}]}, None),
        ({"artifacts": "nope"}, None),
    ],
)
def test_upstream_bytes_sums_artifact_sizes_only_when_all_are_known(outputs, expected):
    assert context.upstream_bytes(outputs) == expected


def test_the_configuration_carries_the_token_in_its_url_and_the_ca_bundle(settings):
    settings.PORTAL_WEBHOOK_URL = "https://portal.example.org/webhooks/placement/"
    settings.PORTAL_WEBHOOK_CA_BUNDLE = "LS0tLS1CRUdJTg=="
    body = webhook_configuration()

    assert body["kind"] == "MutatingWebhookConfiguration"
    hooks = body["webhooks"]
    assert len(hooks) == 2
    for hook in hooks:
        assert hook["clientConfig"] == {
            "url": f"https://portal.example.org/webhooks/placement/{TOKEN}/",
            "caBundle": "LS0tLS1CRUdJTg==",
        }
        assert hook["failurePolicy"] == "Ignore"
        assert hook["timeoutSeconds"] == 3
        assert hook["rules"][0]["operations"] == ["CREATE"]
        assert hook["rules"][0]["resources"] == ["workflows"]
    assert hooks[0]["objectSelector"] == {"matchLabels": {f"{D}/placement": "runtime"}}
    assert hooks[1]["objectSelector"] == {
        "matchExpressions": [{"key": f"{D}/managed", "operator": "DoesNotExist"}]
    }


def test_register_applies_the_configuration_through_the_gateway(settings, monkeypatch):
    from portal.karmada import client

    applied: list[dict[str, Any]] = []
    monkeypatch.setattr(client, "apply_mutating_webhook", applied.append)
    body = webhook_register()
    assert applied == [body]


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
