"""The data plane on the live stack: the demo fleet's site-c (the GPUs) cannot read
site-a's repository, so a step at site-c reading what a step at site-a wrote reads a copy a
transfer unit made at site-b (which reads site-a and which site-c reads); every read is a
pre-signed URL for exactly that object; a fan-out shares one copy; residency holds across
moves; a tampered or expired URL fails the read with S3's own error."""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from portal import presign, services
from portal.models import PlacementDecision, UnitRun, WorkflowRun
from sites.models import Dataset, SiteLink
from tests.fixtures_stack import Stack, wait_for
from tests.live_sessions import finished_run, units
from tests.portal import helpers

pytestmark = [pytest.mark.integration]

CONTENT = "bytes written at site-a, read at site-c: ünïcode & $HOME {{not-a-template}}\n"

WRITE = {
    "outputs": {"artifacts": [{"name": "data", "path": "/tmp/out.txt"}]},
    "script": {
        "image": "python:3",
        "command": ["python3"],
        "source": f"open('/tmp/out.txt', 'w').write({CONTENT!r})",
    },
}


def stop(run_id: int, user: User) -> None:
    run = WorkflowRun.objects.get(pk=run_id)
    if run.finished_at is None:
        services.run_stop(run=run, user=user)


@pytest.fixture
def scientist(live_executing: Stack) -> User:
    return User.objects.get(username="scientist")


def assert_the_transfer_is_shown(scientist: User, run_id: int, size: int) -> None:
    """The REST run detail, the site page and the run page show the copy as a transfer, which
    moved ``size`` bytes (the producer's object as it is: Argo's tgz of the file)."""
    # The REST run detail: the transfer is a unit of kind transfer, with what it moved.
    api = APIClient()
    api.force_authenticate(scientist)
    body = api.get(f"/api/v1/runs/{run_id}/").json()
    kinds = {u["name"]: u["kind"] for u in body["units"]}
    assert kinds == {"write": "step", "read": "step", "write-copy-site-b": "transfer"}
    (shown,) = [u for u in body["units"] if u["kind"] == "transfer"]
    assert shown["site"] == "site-b"
    moved = shown["transfer"]
    assert (moved["from"], moved["to"]) == ("site-a", "site-b")
    assert moved["bytes"] == size
    assert moved["seconds"] is not None and moved["cost"] == "0.00"
    # A copy this small measures overhead, not the link: the link learns nothing from it
    # (tests/bench/bench_transfer.py moves 256 MiB, which it learns from).
    link = SiteLink.objects.get(source__name="site-a", target__name="site-b")
    assert link.observed_transfers == 0 and link.observed_mbps is None
    client = Client()
    client.force_login(scientist)
    page = client.get(reverse("ui-site-detail", args=["site-a"]))
    assert page.status_code == 200 and "Observed" in page.content.decode()
    # The run page shows the transfer beside the steps.
    page = client.get(reverse("ui-run-detail", args=[run_id]))
    assert page.status_code == 200
    html = page.content.decode()
    # A distinct shape in the DAG, fed by write and feeding read.
    assert 'data-unit="write-copy-site-b"' in html and 'polygon class="transfer"' in html
    assert html.count('class="node phase-Succeeded transfer"') == 1
    # Its timeline bar says what it moved.
    assert 'class="bar-label" ' in html and f">{size} B</text>" in html, html


def test_a_gpu_step_at_site_c_reads_site_a_s_output_through_a_copy_at_site_b(
    live_executing: Stack, scientist: User
) -> None:
    assert not SiteLink.objects.get(
        source__name="site-a", target__name="site-c"
    ).artifacts_reachable
    helpers.pin("write", "site-a")
    run = services.run_submit(
        user=scientist, body=helpers.write_then_read(WRITE, helpers.READ_ON_GPU), project="eo-demo"
    )
    try:
        done = finished_run(run.pk, 60)
    except AssertionError:
        for wf in live_executing.sandbox.member_workflows("site-c"):
            print("MEMBER", wf["metadata"]["name"], wf.get("status"))
        raise
    finally:
        stop(run.pk, scientist)
    got = units(run.pk)
    assert done.status == "Succeeded", (done.message, {n: u.message for n, u in got.items()})
    assert (got["write"].site, got["read"].site) == ("site-a", "site-c")
    assert got["read"].outputs["result"] == CONTENT.removesuffix("\n")  # Argo trims one
    copy = got["write-copy-site-b"]
    assert copy.site == "site-b" and copy.phase == "Succeeded"
    assert copy.spec["kind"] == "transfer"
    assert got["read"].spec["via"] == {"write": "write-copy-site-b"}
    decision = PlacementDecision.objects.get(unit=copy)
    assert decision.source == "transfer" and decision.site == "site-b"
    assert "site-c cannot read the artifact repository of site-a" in decision.reason
    # The reader's step workflow held a pre-signed URL of the copy, never a Secret.
    step = next(
        w
        for w in live_executing.workflows(run.pk)
        if w["metadata"]["name"] == got["read"].workflow_name
    )
    (argument,) = step["spec"]["arguments"]["artifacts"]
    assert "s3" not in argument
    assert argument["http"]["url"].startswith("http://s3.site-b.sandbox.invalid/site-b-artifacts/")
    assert "X-Amz-Signature=" in argument["http"]["url"]
    (size,) = repository_objects(
        live_executing, "site-a", f"{got['write'].workflow_name}/"
    ).values()
    assert_the_transfer_is_shown(scientist, run.pk, size)


def test_fifty_items_at_site_c_over_one_site_a_artifact_make_one_transfer(
    live_executing: Stack, scientist: User
) -> None:
    helpers.pin("write", "site-a")
    doc = yaml.safe_load(helpers.write_then_read(WRITE, helpers.READ_ON_GPU))
    read = doc["spec"]["templates"][0]["dag"]["tasks"][1]
    read["withSequence"] = {"count": "50"}
    # Each item asks a sliver of a GPU's time: 50 at once fit site-c's eight GPUs in turns.
    run = services.run_submit(user=scientist, body=yaml.safe_dump(doc), project="eo-demo")
    try:
        done = finished_run(run.pk, 600)
    finally:
        stop(run.pk, scientist)
    got = units(run.pk)
    assert done.status == "Succeeded", (done.message, {n: u.message for n, u in got.items()})
    copies = [u for u in got.values() if u.kind == "transfer"]
    assert [c.name for c in copies] == ["write-copy-site-b"]
    readers = [
        u
        for u in got.values()
        if u.spec.get("task") == "read" and u.spec.get("item_index") is not None
    ]
    assert len(readers) == 50
    assert all(
        r.site == "site-c" and r.spec["via"] == {"write": "write-copy-site-b"} for r in readers
    )
    assert all(r.outputs["result"] == CONTENT.removesuffix("\n") for r in readers)


def test_a_residency_bound_output_needed_outside_its_regions_is_refused_at_submission(
    live_executing: Stack, scientist: User
) -> None:
    """The scene may stay in eu-west: what a step at site-a derives from it may not be read
    at (or copied to) site-c, in eu-central, so the GPU read is refused at submission and the
    preview says why, naming the dataset, its regions and the site."""
    Dataset.objects.filter(name="sentinel2-l1c").update(residency=["eu-west"])
    doc = yaml.safe_load(helpers.write_then_read(WRITE, helpers.READ_ON_GPU))
    write = doc["spec"]["templates"][1]
    write["inputs"] = {
        "parameters": [{"name": "scene", "value": "s3://eo-archive/sentinel2/l1c/T31UDQ/"}]
    }
    body = yaml.safe_dump(doc)
    api = APIClient()
    api.force_authenticate(scientist)
    preview = api.post("/api/v1/runs/preview/", data=body, content_type="application/yaml")
    assert preview.status_code == 200, preview.content
    read = next(u for u in preview.json()["units"] if u["name"] == "read")
    assert read["site"] is None
    rows = {c["site"]: c["why"] for c in read["candidates"]}
    assert "sentinel2-l1c" in rows["site-c"] and "eu-west" in rows["site-c"], rows
    refused = api.post("/api/v1/runs/", data=body, content_type="application/yaml")
    assert refused.status_code == 400, refused.content
    text = refused.content.decode()
    assert "units.read" in text and "sentinel2-l1c" in text and "eu-west" in text, text
    assert not UnitRun.objects.filter(name__endswith="-copy-site-c").exists()


def signed_input(key: str, *, expires: int) -> dict[str, Any]:
    """A step reading site-a's seeded scene manifest through a pre-signed GET made with
    site-a's demo keys (what the portal signs with)."""
    url = presign.presigned_url(
        presign.Location("s3.site-a.sandbox.invalid", "site-a-artifacts", key, region="eu-west"),
        presign.Keys("demo-site-a", "demo-site-a-secret"),
        expires=expires,
    )
    return {"name": "scene", "path": "/tmp/in", "http": {"url": url}}


def reading(artifact: dict[str, Any]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "signed-"},
            "spec": {
                "entrypoint": "read",
                "templates": [
                    {
                        "name": "read",
                        "inputs": {"artifacts": [artifact]},
                        "container": {"image": "alpine:3.23", "command": ["wc", "-c", "/tmp/in"]},
                    }
                ],
            },
        }
    )


SEEDED = "sentinel2/l1c/T31UDQ/S2B_MSIL1C_20240612T105619.SAFE/manifest.safe"


def test_a_tampered_url_ends_the_run_in_error_with_s3_s_message(
    live_executing: Stack, scientist: User
) -> None:
    helpers.pin("read", "site-b")
    good = signed_input(SEEDED, expires=600)
    run = services.run_submit(user=scientist, body=reading(good), project="eo-demo")
    done = finished_run(run.pk, 120)
    assert done.status == "Succeeded", done.message  # the untampered URL reads
    tampered = {**good, "http": {"url": good["http"]["url"].replace(SEEDED, SEEDED + "x")}}
    run = services.run_submit(user=scientist, body=reading(tampered), project="eo-demo")
    done = finished_run(run.pk, 120)
    assert done.status == "Error"
    assert "403 Forbidden" in done.message and "SignatureDoesNotMatch" in done.message, done.message


def test_an_expired_url_ends_the_run_in_error_with_s3_s_message(
    live_executing: Stack, scientist: User
) -> None:
    helpers.pin("read", "site-b")
    expired = signed_input(SEEDED, expires=1)
    time.sleep(2)
    run = services.run_submit(user=scientist, body=reading(expired), project="eo-demo")
    done = finished_run(run.pk, 120)
    assert done.status == "Error"
    assert "Request has expired" in done.message and "AccessDenied" in done.message, done.message


def test_a_copy_failing_transiently_is_retried_and_the_reader_reads_it(
    live_executing: Stack, scientist: User
) -> None:
    """The copy's first attempt fails (a fault on its template, once): the member's Argo
    retries it (the transfer's retryStrategy), and the run succeeds through the second."""
    helpers.pin("write", "site-a")
    live_executing.sandbox.fault("template-fail", template="transfer", count=1)
    run = services.run_submit(
        user=scientist, body=helpers.write_then_read(WRITE, helpers.READ_ON_GPU), project="eo-demo"
    )
    try:
        done = finished_run(run.pk, 120)
    finally:
        stop(run.pk, scientist)
        live_executing.sandbox.clear_faults()
    got = units(run.pk)
    assert done.status == "Succeeded", (done.message, {n: u.message for n, u in got.items()})
    copy = got["write-copy-site-b"]
    assert copy.phase == "Succeeded" and copy.attempt == 1
    assert got["read"].outputs["result"] == CONTENT.removesuffix("\n")
    member = next(
        w
        for w in live_executing.sandbox.member_workflows("site-b")
        if w["metadata"]["name"] == copy.workflow_name
    )
    phases = sorted(
        n["phase"] for n in member["status"]["nodes"].values() if n.get("type") == "Pod"
    )
    assert phases == ["Failed", "Succeeded"], phases


BIG = {
    "outputs": {"artifacts": [{"name": "data", "path": "/tmp/out.bin"}]},
    "script": {
        "image": "python:3",
        "command": ["python3"],
        # Incompressible: the copy moves all of it, which takes a while.
        "source": "import os; open('/tmp/out.bin', 'wb').write(os.urandom(192 * 2**20))",
    },
}


def test_stopping_a_run_mid_transfer_stops_the_copy(live_executing: Stack, scientist: User) -> None:
    helpers.pin("write", "site-a")
    run = services.run_submit(
        user=scientist, body=helpers.write_then_read(BIG, helpers.READ_ON_GPU), project="eo-demo"
    )
    try:
        copy = wait_for(
            lambda: (u := units(run.pk).get("write-copy-site-b")) and u.phase == "Running" and u,
            180,
            "the copy to run",
        )
        services.run_stop(run=WorkflowRun.objects.get(pk=run.pk), user=scientist)
    finally:
        stop(run.pk, scientist)
    done = finished_run(run.pk, 60)
    assert done.status == "Stopped", done.status

    def shut_down() -> bool:
        found = [
            w
            for w in live_executing.workflows(run.pk)
            if w["metadata"]["name"] == copy.workflow_name
        ]
        return bool(found) and found[0]["spec"].get("shutdown") == "Stop"

    wait_for(shut_down, 30, "spec.shutdown on the copy's step workflow")
    # The member ends the copy's pod on the shutdown; its phase reaches the unit through
    # Karmada's binding and the watcher, a moment after the shutdown is seen.
    ended = wait_for(
        lambda: (u := units(run.pk)["write-copy-site-b"]).phase not in ("Running", "Pending") and u,
        60,
        "the copy to end",
    )
    assert ended.phase != "Succeeded", ended.phase
    got = units(run.pk)
    assert got["read"].phase == "Omitted" and not got["read"].workflow_name


def test_a_relay_lost_mid_copy_with_no_other_relay_fails_the_reader_saying_why(
    live_executing: Stack, scientist: User
) -> None:
    """site-b, the only site that reads site-a's repository and that site-c reads, is lost
    while it copies: the copy cannot move, so it ends in Error saying so, and the reader with
    it, naming the copy (rather than wait for site-b)."""
    helpers.pin("write", "site-a")
    run = services.run_submit(
        user=scientist, body=helpers.write_then_read(BIG, helpers.READ_ON_GPU), project="eo-demo"
    )
    fault = None
    try:
        wait_for(
            lambda: (u := units(run.pk).get("write-copy-site-b")) and u.phase == "Running" and u,
            180,
            "the copy to run",
        )
        fault = live_executing.sandbox.fault("site-not-ready", site="site-b")
        done = finished_run(run.pk, 120)
    finally:
        stop(run.pk, scientist)
        if fault:
            live_executing.sandbox.clear_fault(fault["id"])
    got = units(run.pk)
    copy, read = got["write-copy-site-b"], got["read"]
    assert done.status in ("Error", "Failed"), done.status
    assert copy.phase == "Error" and copy.attempt == 1
    assert copy.message.startswith("site site-b not ready; no other relay: no other site reads")
    assert read.phase == "Error" and not read.workflow_name
    assert read.message.startswith(
        "transfer write-copy-site-b of write's outputs to site-b failed: site site-b not ready"
    ), read.message


def repository_keys(stack: Stack, site: str, prefix: str) -> list[str]:
    """The keys under ``prefix`` in ``site``'s repository."""
    return list(repository_objects(stack, site, prefix))


def repository_objects(stack: Stack, site: str, prefix: str) -> dict[str, int]:
    """The objects under ``prefix`` in ``site``'s repository and their sizes, listed over S3
    (ListObjectsV2, botocore's SigV4) with the site's demo keys, through its listener."""
    import botocore.session
    from botocore.config import Config

    repo = stack.sandbox.repositories()[site]
    s3 = botocore.session.get_session().create_client(
        "s3",
        region_name=repo["region"],
        endpoint_url=f"http://{repo['endpoint']}",
        aws_access_key_id=f"demo-{site}",
        aws_secret_access_key=f"demo-{site}-secret",
        config=Config(
            proxies={"http": repo["url"]},
            s3={"addressing_style": "path"},
            retries={"max_attempts": 1},
            signature_version="s3v4",
        ),
    )
    listed = s3.list_objects_v2(Bucket=repo["bucket"], Prefix=prefix)
    return {str(o["Key"]): int(o["Size"]) for o in listed.get("Contents") or []}


@pytest.mark.parametrize("run_gc", [False, True], ids=["no-artifact-gc", "artifact-gc"])
def test_a_run_s_copies_are_deleted_once_it_ends(
    live_executing: Stack, scientist: User, run_gc: bool
) -> None:
    """Copies are the portal's: they go once the run has ended (its step workflows deleted,
    when the member's Argo collects ``OnWorkflowDeletion`` artifacts), whatever the run says;
    the run's own outputs go only under its ``artifactGC`` (``OnWorkflowCompletion``, held
    until the run ends), as in Argo."""
    from portal.controller.cleanup import step_workflows_cleanup

    helpers.pin("write", "site-a")
    doc = yaml.safe_load(helpers.write_then_read(WRITE, helpers.READ_ON_GPU))
    if run_gc:
        doc["spec"]["artifactGC"] = {"strategy": "OnWorkflowCompletion"}
    run = services.run_submit(user=scientist, body=yaml.safe_dump(doc), project="eo-demo")
    try:
        done = finished_run(run.pk, 120)
    finally:
        stop(run.pk, scientist)
    assert done.status == "Succeeded", done.message
    got = units(run.pk)
    copy, write = got["write-copy-site-b"], got["write"]
    copied = repository_keys(live_executing, "site-b", f"{copy.workflow_name}/")
    written = repository_keys(live_executing, "site-a", f"{write.workflow_name}/")
    assert copied and written
    step_workflows_cleanup(keep_seconds=0)
    wait_for(
        lambda: not repository_keys(live_executing, "site-b", f"{copy.workflow_name}/"),
        30,
        "the copy to be collected",
    )
    left = repository_keys(live_executing, "site-a", f"{write.workflow_name}/")
    assert left == ([] if run_gc else written)
