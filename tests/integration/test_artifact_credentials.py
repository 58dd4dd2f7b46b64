"""The portal end to end (PostgreSQL, Redis, a Celery worker, the watcher, the webhook) on a
sandbox that really runs the steps. Each site's repository Secret is propagated to its own
cluster only; a file written at one site is read at another through a pre-signed
URL for exactly that object. The demo pipeline, with real results on the run page."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from placement.demo import credential_secrets
from portal import services
from portal.models import UnitRun
from tests.fixtures_sandbox import SandboxHTTPError
from tests.fixtures_stack import Stack, wait_for
from tests.live_sessions import finished_run, units
from tests.portal import helpers

pytestmark = [pytest.mark.integration]

NS = "portal"  # KARMADA_NAMESPACE
KUBECTL = shutil.which("kubectl")
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


def created(run_id: int, name: str) -> UnitRun | None:
    unit = units(run_id)[name]
    return unit if unit.workflow_name else None


@pytest.fixture
def scientist(live_executing: Stack) -> User:
    return User.objects.get(username="scientist")


def kubectl_json(stack: Stack, *args: str) -> Any:
    """kubectl (the machine's, as an operator runs it) against the stack's karmada-apiserver."""
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    out = subprocess.run(
        [KUBECTL, "--kubeconfig", str(stack.sandbox.admin_kubeconfig), *args, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_no_member_holds_another_site_s_repository_secret(live_executing: Stack) -> None:
    """Each ``*-artifacts-credentials`` Secret is bound to its own cluster only
    (its ResourceBinding, as ``kubectl get resourcebindings`` shows it), the every-member
    policy of old is gone, and each member holds its own Secret and no other."""
    secrets = {f"{site}-artifacts-credentials": site for site in ("site-a", "site-b", "site-c")}

    def bound() -> dict[str, list[str]] | None:
        items = kubectl_json(live_executing, "-n", NS, "get", "resourcebindings")["items"]
        found = {
            b["spec"]["resource"]["name"]: sorted(
                c["name"] for c in b["spec"].get("clusters") or []
            )
            for b in items
            if b["spec"]["resource"]["kind"] == "Secret"
        }
        return found if set(secrets) <= set(found) else None

    found = wait_for(bound, 60, "the Secrets' ResourceBindings")
    assert found is not None
    for name, site in secrets.items():
        assert found[name] == [site], (name, found[name])
    policies = kubectl_json(live_executing, "-n", NS, "get", "propagationpolicies")["items"]
    names = {p["metadata"]["name"] for p in policies}
    assert "portal-artifact-credentials" not in names
    assert {f"portal-artifact-credentials-{s}" for s in secrets.values()} <= names
    for site in secrets.values():
        items = live_executing.sandbox.request("GET", f"/_sandbox/members/{site}/objects")["items"]
        held = {o["metadata"]["name"] for o in items if o.get("kind") == "Secret"}
        assert held & set(secrets) == {f"{site}-artifacts-credentials"}, (site, held)


def test_site_b_reads_site_a_s_file_through_a_presigned_url_without_site_a_s_keys(
    live_executing: Stack, scientist: User
) -> None:
    helpers.pin("write", "site-a")
    helpers.pin("read", "site-b")
    run = services.run_submit(user=scientist, body=write_then_read(), project="eo-demo")
    done = finished_run(run.pk, 120)
    assert done.status == "Succeeded", done.message
    got = units(run.pk)
    assert (got["write"].site, got["read"].site) == ("site-a", "site-b")
    assert got["read"].outputs["result"] == CONTENT
    step = next(
        w
        for w in live_executing.workflows(run.pk)
        if w["metadata"]["name"] == got["read"].workflow_name
    )
    (argument,) = step["spec"]["arguments"]["artifacts"]
    assert "s3" not in argument
    assert argument["http"]["url"].startswith("http://s3.site-a.sandbox.invalid/site-a-artifacts/")


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
    done = finished_run(run.pk, 180)
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
