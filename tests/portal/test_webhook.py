"""The runtime placement webhook (issue 6): AdmissionReviews as karmada-apiserver sends them."""

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

from placement import planner
from portal import placement_runtime, services
from portal.choices import DecisionSource, UnitPhase, UnitTiming
from portal.models import PlacementDecision, UnitRun, WorkflowRun
from sites.models import Site
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
    placement_runtime.snapshot_clear()
    yield
    placement_runtime.snapshot_clear()


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


def post(client: Client, body: Any, *, path: str | None = None, auth: bool = True):
    headers = {"Authorization": f"Bearer {TOKEN}"} if auth else {}
    data = body if isinstance(body, bytes | str) else json.dumps(body)
    return client.post(path or URL, data=data, content_type="application/json", headers=headers)


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
    # The fast link: ingest's 20 GB reach site-b much sooner than GPU site-c.
    assert table["site-b"]["est_transfer_s"] < table["site-c"]["est_transfer_s"]
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
    # A cordoned site-b is not a candidate once the snapshot is refreshed.
    Site.objects.filter(name="site-b").update(cordoned=True)
    placement_runtime.snapshot_clear()
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
    obj = services.parser.decode_document(EO_PIPELINE.read_text())
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
    monkeypatch.setattr(placement_runtime, "time", clock)
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


def test_it_reads_and_writes_in_a_fixed_small_number_of_queries(
    client, demo_run, django_assert_max_num_queries
):
    placement_runtime.snapshot_get()  # warm, as under load
    body = review(step_workflow(demo_run))
    # savepoint, statement timeout, unit, upstream units, conditional update, decision, release
    with django_assert_max_num_queries(7):
        _, patch = answer(post(client, body))
    assert patch is not None


def test_its_query_count_does_not_grow_with_the_fleet(client, demo_run):
    body = review(step_workflow(demo_run))

    def count() -> int:
        placement_runtime.snapshot_clear()
        with CaptureQueriesContext(connection) as ctx:
            answer(post(client, body))
        return len(ctx.captured_queries)

    small = count()
    SiteFactory.create_batch(30)
    assert count() == small


# --------------------------------------------------------------------------------------------
# Pieces


def test_json_pointer_escapes_tilde_and_slash():
    assert placement_runtime.json_pointer("metadata", "labels", "a~b/c") == (
        "/metadata/labels/a~0b~1c"
    )


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
    assert placement_runtime.upstream_bytes(outputs) == expected


def test_the_configuration_carries_the_token_in_its_url_and_the_ca_bundle(settings):
    settings.PORTAL_WEBHOOK_URL = "https://portal.example.org/webhooks/placement/"
    settings.PORTAL_WEBHOOK_CA_BUNDLE = "LS0tLS1CRUdJTg=="
    body = placement_runtime.webhook_configuration()

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
    from portal import gateway

    applied: list[dict[str, Any]] = []
    monkeypatch.setattr(gateway, "apply_mutating_webhook", applied.append)
    body = placement_runtime.webhook_register()
    assert applied == [body]
