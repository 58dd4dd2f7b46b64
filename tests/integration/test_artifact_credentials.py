"""The portal end to end (PostgreSQL, Redis, a Celery worker, the watcher, the webhook) on a
sandbox that really runs the steps. A file written at one site and read at another: the
reader's step workflow carries the producer's full location with its credential Secret refs,
and the Secret reaches the reading member only because Karmada propagates it (the portal's
``portal-artifact-credentials`` policy). The demo pipeline, with real results on the run page.
Issue 16, issue 17 item 2."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from placement.demo import credential_secrets
from placement.models import PlacementRule
from portal import services
from portal.models import UnitRun, WorkflowRun
from tests.fixtures_sandbox import SandboxHTTPError
from tests.fixtures_stack import Stack, wait_for
from tests.portal import helpers

pytestmark = [pytest.mark.integration]

NS = "portal"  # KARMADA_NAMESPACE
CREDENTIALS = "portal.multisite.io/artifact-credentials"
SECRET = "site-a-artifacts-credentials"
CONTENT = "line one\nsecond line: ünïcode & symbols $HOME {{not-a-template}}"


def write_then_read() -> str:
    """``write`` (python:3) writes CONTENT into an output artifact; ``read`` prints it."""
    return helpers.write_then_read(
        {
            "outputs": {"artifacts": [{"name": "data", "path": "/tmp/out.txt"}]},
            "script": {
                "image": "python:3",
                "command": ["python3"],
                "source": f"open('/tmp/out.txt', 'w').write({CONTENT!r})",
            },
        }
    )


def pin(task: str, site: str) -> None:
    PlacementRule.objects.update_or_create(
        name=f"test-pin-{task}",
        defaults={
            "order": 1,
            "selector": {"task": task},
            "timing": "submit",
            "effect": "pin",
            "parameters": {"sites": [site]},
        },
    )


def create_credentials(stack: Stack) -> None:
    """What site-a's operators do once, on karmada-apiserver (``kubectl create secret``)."""
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "labels": {CREDENTIALS: "true"}},
        "data": {
            k: base64.b64encode(v.encode()).decode()
            for k, v in (("accessKey", "ak"), ("secretKey", "sk"))
        },
    }
    try:
        stack.sandbox.request("POST", f"/api/v1/namespaces/{NS}/secrets", secret)
    except SandboxHTTPError as exc:
        if exc.status != 409:  # an earlier test of this module created it
            raise


def remove_credentials(stack: Stack) -> None:
    """No credential Secret anywhere: deleted on Karmada, and so at the members."""
    try:
        stack.sandbox.request("DELETE", f"/api/v1/namespaces/{NS}/secrets/{SECRET}")
    except SandboxHTTPError as exc:
        if exc.status != 404:
            raise

    def held() -> bool:
        for site in ("site-a", "site-b", "site-c"):
            items = stack.sandbox.request("GET", f"/_sandbox/members/{site}/objects")["items"]
            if any(o["metadata"]["name"] == SECRET for o in items):
                return True
        return False

    wait_for(lambda: not held(), 30, "the credential Secret to leave the members")


def member_pod_message(stack: Stack, site: str, workflow: str) -> str | None:
    for wf in stack.sandbox.member_workflows(site):
        if wf["metadata"]["name"] != workflow:
            continue
        for node in ((wf.get("status") or {}).get("nodes") or {}).values():
            if node["type"] == "Pod" and node.get("message"):
                return str(node["message"])
    return None


def finished(run_id: int) -> WorkflowRun | None:
    run = WorkflowRun.objects.get(pk=run_id)
    return run if run.finished_at is not None else None


def wait_finished(run_id: int, timeout: float) -> WorkflowRun:
    run = wait_for(lambda: finished(run_id), timeout, "the run to finish")
    assert run is not None
    return run


def created(run_id: int, name: str) -> UnitRun | None:
    unit = units(run_id)[name]
    return unit if unit.workflow_name else None


def units(run_id: int) -> dict[str, UnitRun]:
    return {u.name: u for u in UnitRun.objects.filter(run_id=run_id)}


@pytest.fixture
def scientist(live_executing: Stack) -> User:
    return User.objects.get(username="scientist")


def test_site_b_reads_site_a_s_file_once_karmada_has_propagated_the_credentials(
    live_executing: Stack, scientist: User
) -> None:
    remove_credentials(live_executing)
    pin("write", "site-a")
    pin("read", "site-b")
    run = services.run_submit(user=scientist, body=write_then_read(), project="eo-demo")
    # No credential Secret on Karmada yet: the reader's pod waits at site-b for its volume.
    read = wait_for(lambda: created(run.pk, "read"), 120, "read to be created")
    assert read is not None
    message = wait_for(
        lambda: member_pod_message(live_executing, "site-b", read.workflow_name),
        60,
        "the reader's pod to wait for its Secret",
    )
    assert message == (
        'MountVolume.SetUp failed for volume "site-a-artifacts-credentials" : '
        'secret "site-a-artifacts-credentials" not found'
    )
    assert units(run.pk)["read"].phase not in ("Succeeded", "Failed", "Error")
    # The portal's unit says the same, from the binding Karmada aggregates (issue 19).
    waiting = wait_for(lambda: units(run.pk)["read"].message, 60, "the unit to say why it waits")
    assert waiting.startswith("waiting at site-b: ") and waiting.endswith(message), waiting
    step = next(
        w for w in live_executing.workflows(run.pk) if w["metadata"]["name"] == read.workflow_name
    )
    (argument,) = step["spec"]["arguments"]["artifacts"]
    assert argument["s3"]["endpoint"] == "s3.site-a.sandbox.invalid"
    assert argument["s3"]["bucket"] == "site-a-artifacts"
    assert argument["s3"]["accessKeySecret"]["name"] == "site-a-artifacts-credentials"

    create_credentials(live_executing)
    done = wait_finished(run.pk, 120)
    assert done.status == "Succeeded", done.message
    got = units(run.pk)
    assert (got["write"].site, got["read"].site) == ("site-a", "site-b")
    assert got["read"].outputs["result"] == CONTENT
    assert got["read"].message == ""  # cleared once its pod ran


def test_a_site_that_cannot_reach_site_a_s_repository_fails_the_read_as_argo_does(
    live_executing: Stack, scientist: User
) -> None:
    """The demo fleet lets only site-b reach site-a's repository. The inventory does not say
    so here (its link says reachable), so the portal places the read at site-c, where Argo's
    executor cannot resolve the endpoint."""
    create_credentials(live_executing)
    pin("write", "site-a")
    pin("read", "site-c")
    run = services.run_submit(user=scientist, body=write_then_read(), project="eo-demo")
    done = wait_finished(run.pk, 120)
    assert done.status == "Error"  # as Argo: the node errored (its init container)
    read = units(run.pk)["read"]
    assert read.site == "site-c"
    assert read.phase == "Error"
    assert "dial tcp: lookup s3.site-a.sandbox.invalid: no such host" in read.message


DEMO = (Path(__file__).resolve().parents[2] / "examples" / "eo-pipeline.yaml").read_text()


def test_the_demo_pipeline_really_runs_and_its_results_show_on_the_run_page(
    live_executing: Stack, scientist: User, client: Any
) -> None:
    for secret in credential_secrets("portal.multisite.io"):  # as run_demo does
        try:
            live_executing.sandbox.request("POST", f"/api/v1/namespaces/{NS}/secrets", secret)
        except SandboxHTTPError as exc:
            if exc.status != 409:
                raise
    body = DEMO.replace("value: cloud-segmentation-v3", "value: land-cover-v2", 1)
    run = services.run_submit(user=scientist, body=body, project="eo-demo")
    done = wait_finished(run.pk, 180)
    got = units(run.pk)
    assert done.status == "Succeeded", (done.message, {n: u.message for n, u in got.items()})
    assert {n: u.site for n, u in got.items()} == {
        "ingest": "site-a",
        "preprocess": "site-b",
        "inference": "site-c",
    }
    # Real values, computed from the scene's files.
    tile_count = {p["name"]: p["value"] for p in got["ingest"].outputs["parameters"]}
    assert tile_count == {"tile-count": "4"}
    assert (
        "S2B_MSIL1C_20240612T105619.SAFE: 6 files, 4 band tiles" in got["ingest"].outputs["result"]
    )
    checksum = got["preprocess"].outputs["result"]
    assert len(checksum) == 64 and int(checksum, 16) >= 0
    result = json.loads(got["inference"].outputs["result"])
    assert result == {
        "model": "land-cover-v2",
        "patches": 9,
        "classes": {
            "bare soil": 2,
            "dense vegetation": 3,
            "sparse vegetation": 3,
            "water": 1,
        },
    }
    client.force_login(scientist)
    panel = client.get(f"/runs/{run.pk}/units/inference/")
    assert panel.status_code == 200
    assert "dense vegetation" in panel.content.decode()
    logs = client.get(f"/runs/{run.pk}/units/preprocess/logs/")
    assert logs.status_code == 200
    assert "NDVI of 36 pixels from 4 band tiles" in logs.content.decode()
