"""Rule revisions at run time: the step workflows the worker creates carry the revision their
site came from, the webhook's patch the one active when it decides, and the webhook's decisions
are recorded for replay as submissions are."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, cast

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from placement.revisions import replay, services
from placement.revisions.models import PlanningRecord, PlanningSnapshot
from placement.revisions.selectors import current_config
from portal import labels
from portal import services as run_services
from portal.admission import decide
from portal.admission import queue as decision_queue
from portal.choices import UnitPhase
from portal.controller.step_workflow import step_workflow_for
from portal.controller.submit import creates_finish, creates_start, pass_shared, submit_units
from portal.karmada import client, resources
from portal.models import UnitRun, WorkflowRun
from portal.selectors import upstream_outputs
from tests.factories import UserFactory
from tests.fixtures_sandbox import SandboxServer

EO_PIPELINE = Path(__file__).resolve().parents[2] / "examples" / "eo-pipeline.yaml"
TOKEN = "revisions-webhook-token"
GB = 10**9
INGEST_OUTPUTS = {
    "parameters": [{"name": "tile-count", "value": "12"}],
    "artifacts": [{"name": "tiles", "s3": {"key": "runs/ingest/tiles.tgz"}, "size": 20 * GB}],
}


def _submit() -> WorkflowRun:
    user = get_user_model().objects.get(username="scientist")
    return run_services.run_submit(user=user, body=EO_PIPELINE.read_text())


def _apply_site_b_gpu_override(author: Any) -> Any:
    """A new revision that changes nothing the demo pipeline's placement reads."""
    config = current_config()
    for site in config["sites"]:
        if site["name"] == "site-b":
            site["overrides"] = {**site["overrides"], "gpu_node_selector": {"pool": "gpu"}}
    draft = services.revision_draft_create(user=author, config=config)
    services.revision_apply(revision=draft, user=author)
    return draft


def _ingest_done(run: WorkflowRun) -> None:
    UnitRun.objects.filter(run=run, name="ingest").update(
        phase=UnitPhase.SUCCEEDED, site="site-a", outputs=INGEST_OUTPUTS
    )


def test_step_workflows_carry_the_revision_their_site_came_from(
    demo_fleet: SandboxServer, settings: Any
) -> None:
    settings.PORTAL_RULES_REVIEW = False
    key = labels.key(labels.RULES_REVISION)
    baseline = services.revision_baseline()
    run = _submit()
    later = _apply_site_b_gpu_override(UserFactory(username="alice", is_staff=True))
    assert later.pk != baseline.pk

    units = list(run.units.order_by("position", "id"))
    ingest = next(u for u in units if u.name == "ingest")
    assert ingest.timing == "submit" and ingest.site
    assert submit_units(run, [ingest], units, None, upstream_outputs(units)) == 1
    _ingest_done(run)
    units = list(run.units.order_by("position", "id"))
    preprocess = next(u for u in units if u.name == "preprocess")
    assert preprocess.timing == "runtime" and not preprocess.site
    assert submit_units(run, [preprocess], units, None, upstream_outputs(units)) == 1

    def annotation(unit_name: str) -> str:
        name = run.units.get(name=unit_name).workflow_name
        assert name
        obj = client.get(resources.WORKFLOW, name)  # read back from karmada-apiserver
        return str((obj["metadata"].get("annotations") or {}).get(key))

    # Placed at submission: the revision active then, though a later one is active now.
    assert annotation("ingest") == str(baseline.pk)
    # Placed at run time: the worker's fallback site comes from the revision active now.
    assert annotation("preprocess") == str(later.pk)


def test_a_pass_keeps_the_submissions_revision_and_reads_the_active_one_per_chunk(
    demo_fleet: SandboxServer, settings: Any
) -> None:
    """One pass's chunks share what they read of the run (``pass_shared``), but a rule change
    between two chunks reaches the second: a runtime unit's fallback site is decided from the
    newest state, and its annotation names the revision of that state."""
    settings.PORTAL_RULES_REVIEW = False
    key = labels.key(labels.RULES_REVISION)
    baseline = services.revision_baseline()
    run = _submit()
    _ingest_done(run)
    units = list(run.units.order_by("position", "id"))
    preprocess = next(u for u in units if u.name == "preprocess")
    shared = pass_shared(run, units)
    assert shared.revisions.of(preprocess) == baseline.pk  # an earlier chunk read it
    later = _apply_site_b_gpu_override(UserFactory(username="alice", is_staff=True))
    creates = creates_start(run, [preprocess], units, None, upstream_outputs(units), shared)
    assert creates_finish(run, creates) == 1
    name = run.units.get(name="preprocess").workflow_name
    obj = client.get(resources.WORKFLOW, name)
    assert obj["metadata"]["annotations"][key] == str(later.pk)


# The webhook --------------------------------------------------------------------------------


@pytest.fixture
def webhook(db: Any, settings: Any) -> Any:
    settings.PORTAL_WEBHOOK_TOKEN = TOKEN
    settings.KARMADA_NAMESPACE = "portal"
    settings.PORTAL_WEBHOOK_BUDGET_MS = 500
    settings.PORTAL_RULES_REVIEW = False
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    assert decision_queue.decisions_flush() == 0
    decide.snapshot_clear()
    call_command("load_demo", verbosity=0)
    yield
    decide.snapshot_clear()


def _admit(client: Client, obj: dict[str, Any], uid: str) -> list[dict[str, Any]]:
    gvk = {"group": "argoproj.io", "version": "v1alpha1", "kind": "Workflow"}
    review = {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": uid,
            "kind": gvk,
            "name": obj["metadata"]["name"],
            "namespace": "portal",
            "operation": "CREATE",
            "object": obj,
            "dryRun": False,
        },
    }
    response = client.post(
        "/webhooks/placement/",
        data=json.dumps(review),
        content_type="application/json",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert response.status_code == 200, response.content
    patch = response.json()["response"].get("patch")
    assert patch, response.json()
    return list(json.loads(base64.b64decode(patch)))


def _runtime_step(run: WorkflowRun) -> dict[str, Any]:
    units = list(run.units.order_by("position", "id"))
    return step_workflow_for(run, next(u for u in units if u.name == "preprocess"), units)


def test_the_webhooks_patch_carries_the_revision_active_when_it_decides(
    client: Client, webhook: None
) -> None:
    baseline = services.revision_baseline()
    run = _submit()
    _ingest_done(run)
    obj = _runtime_step(run)
    later = _apply_site_b_gpu_override(UserFactory(username="alice", is_staff=True))
    decide.snapshot_clear()  # past the snapshot's second

    ops = {op["path"]: op["value"] for op in _admit(client, obj, "rev-1")}

    key = labels.key(labels.RULES_REVISION).replace("/", "~1")
    assert ops[f"/metadata/annotations/{key}"] == str(later.pk) != str(baseline.pk)


def test_a_webhook_decision_is_recorded_and_replayed_like_a_submission(
    client: Client, webhook: None
) -> None:
    baseline = services.revision_baseline()
    run = _submit()
    _ingest_done(run)
    obj = _runtime_step(run)
    decide.snapshot_clear()
    _admit(client, obj, "rt-1")
    _admit(client, obj, "rt-2")  # same snapshot: recorded once

    redis, key = decision_queue._queue(), decision_queue._queue_key()
    assert redis is not None, "these tests run with the queue (REDIS_URL)"
    pending = cast(list[bytes], redis.lrange(key, 0, -1))
    assert decision_queue.decisions_flush() == 2
    # Drained again (a drainer that died before trimming): still one record per decision.
    redis.rpush(key, *pending)
    assert decision_queue.decisions_flush() == 2
    records = PlanningRecord.objects.filter(admission_uid__isnull=False).order_by("id")
    assert [r.admission_uid for r in records] == ["rt-1", "rt-2"]
    first = records[0]
    assert first.run_id == run.pk and first.revision_id == baseline.pk
    assert first.project == "eo-demo" and first.units[0]["name"] == "preprocess"
    assert first.context["upstream"] == {"ingest": ["site-a", 20 * GB]}
    assert records[1].snapshot_id == first.snapshot_id
    assert PlanningSnapshot.objects.filter(pk=first.snapshot_id).exists()

    # Only the webhook's decisions, so what moves is theirs and not the submission's plan.
    PlanningRecord.objects.filter(admission_uid__isnull=True).delete()
    active = current_config()
    same = replay.replay(base=active, draft=active)
    assert same["summary"]["decisions"] == 2 and same["moved"] == []

    draft = current_config()
    for site in draft["sites"]:
        if site["name"] == "site-b":
            site["cordoned"] = True
    moved = replay.replay(base=active, draft=draft)["moved"]
    assert len(moved) == 2
    # Decided as the webhook decides, for a step workflow already built: site-c (the only
    # site left in its regions) reads site-a's repository only through a copy, which a built
    # step cannot get, so nothing could take it.
    assert {(m["run"], m["unit"], m["from"], m["to"], m["timing"]) for m in moved} == {
        (run.pk, "preprocess", "site-b", None, "runtime")
    }
    assert "cannot reach the artifact repository of site-a" in moved[0]["why"]


def test_a_direct_workflows_decision_is_replayed_without_a_run(
    client: Client, webhook: None
) -> None:
    services.revision_baseline()
    obj = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "hello-x7k2p"},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {
                    "name": "main",
                    "container": {
                        "image": "busybox",
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                    },
                }
            ],
        },
    }
    decide.snapshot_clear()
    ops = {op["path"]: op["value"] for op in _admit(client, obj, "direct-1")}
    site = ops["/metadata/labels"][labels.key(labels.SITE)]
    decision_queue.decisions_flush()
    record = PlanningRecord.objects.get(admission_uid="direct-1")
    assert record.run_id is None and record.units[0]["kind"] == "workflow"

    active = current_config()
    draft = current_config()
    for s in draft["sites"]:
        s["cordoned"] = s["name"] == site
    moved = replay.replay(base=active, draft=draft)["moved"]
    assert [(m["run"], m["unit"], m["from"], m["timing"]) for m in moved] == [
        (None, "hello-x7k2p", site, "runtime")
    ]
