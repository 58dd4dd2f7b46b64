"""Artifacts across sites, against a sandbox that really runs the
steps: Argo records only an output's key, and a reader resolves a key against its own site's
repository, so the portal resolves it against the producing site's repository and gives the
reader a pre-signed GET for exactly that object, signed with the keys of site-a's Secret on
karmada-apiserver: the reader's site holds no credential of site-a."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.core.management import call_command

from portal import services, state
from portal.choices import UnitPhase
from portal.controller.step_workflow import step_workflow_for
from portal.karmada import client
from portal.models import UnitRun
from sites.models import Site
from tests.fixtures_sandbox import SandboxHTTPError
from tests.portal.helpers import write_then_read
from tests.sandbox.execution import conftest as on_members
from tests.sandbox.execution.conftest import Member, needs_bwrap, secret

# The executing sandbox and its members, as the execution tests have them.
executing = on_members.executing
site_a = on_members.site_a
site_b = on_members.site_b

SECRET = "site-a-artifacts-credentials"
CONTENT = "line one\nsecond line: ünïcode & symbols $HOME {{not-a-template}}"

pytestmark = [needs_bwrap]


def two_steps() -> str:
    return write_then_read(
        {
            "outputs": {"artifacts": [{"name": "data", "path": "/tmp/out.txt"}]},
            "container": {"image": "alpine:3.23", "command": ["sh", "-c", "true"]},
        }
    )


@pytest.fixture
def inventory(executing: Any, site_a: Member, db: Any, settings: Any) -> Any:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.KARMADA_KUBECONFIG = str(executing.kubeconfig)
    client.reset()
    call_command("load_demo", verbosity=0)
    # site-a's repository keys: on karmada-apiserver (which the portal signs with) and on
    # site-a's own member (which the repository checks against), nowhere else.
    creds = secret(SECRET, accessKey="demo-site-a", secretKey="demo-site-a-secret")
    try:
        executing.request("POST", "/api/v1/namespaces", {"metadata": {"name": "portal"}})
    except SandboxHTTPError as exc:
        if exc.status != 409:
            raise
    try:
        executing.request("POST", "/api/v1/namespaces/portal/secrets", creds)
    except SandboxHTTPError as exc:
        if exc.status != 409:
            raise
    site_a.put(creds)
    # What site-a's operators set in the inventory (the demo fleet's repository for site-a).
    site = Site.objects.get(name="site-a")
    site.overrides = {
        **(site.overrides or {}),
        "artifact_store": {
            "endpoint": "s3.site-a.sandbox.invalid",
            "bucket": "site-a-artifacts",
            "credentials_secret": SECRET,
            "region": "eu-west",
        },
    }
    site.save()
    yield
    client.reset()


def written_at_site_a(site_a: Member) -> dict[str, Any]:
    """A step at site-a writes the file; its node records only the artifact's key."""
    writer = {
        "name": "main",
        "outputs": {"artifacts": [{"name": "data", "path": "/tmp/out.txt"}]},
        "script": {
            "image": "python:3.12",
            "command": ["python3"],
            "source": f"open('/tmp/out.txt', 'w').write({CONTENT!r})",
        },
    }
    wf = {
        "metadata": {"generateName": "writer-"},
        "spec": {"entrypoint": "main", "templates": [writer]},
    }
    status = site_a.wait(site_a.create(wf))
    assert status["phase"] == "Succeeded", status.get("message")
    (node,) = site_a.pods(status).values()
    (artifact,) = node["outputs"]["artifacts"]
    assert set(artifact["s3"]) == {"key"}  # key only, as Argo >= 3 records it
    return dict(node["outputs"])


def reader_step_workflow(outputs: dict[str, Any]) -> dict[str, Any]:
    """The portal's step workflow for "read", with "write" recorded as done at site-a."""
    user = get_user_model().objects.get(username="scientist")
    run = services.run_submit(user=user, body=two_steps())
    write = run.units.get(name="write")
    # The writer ran at site-a (created there directly above).
    UnitRun.objects.filter(pk=write.pk).update(site="site-a")
    write.refresh_from_db()
    state.unit_move(write, UnitPhase.RUNNING)
    state.unit_move(write, UnitPhase.SUCCEEDED, outputs=outputs)
    units = list(run.units.all())
    read = next(u for u in units if u.name == "read")
    body = step_workflow_for(run, read, units)
    body["metadata"] = {"generateName": "reader-"}  # created directly on a member
    return body


def test_a_step_at_site_b_reads_the_exact_file_a_step_at_site_a_wrote(
    inventory, site_a: Member, site_b: Member
) -> None:
    body = reader_step_workflow(written_at_site_a(site_a))
    (argument,) = body["spec"]["arguments"]["artifacts"]
    assert "s3" not in argument  # no location with Secret references
    url = argument["http"]["url"]
    assert url.startswith("http://s3.site-a.sandbox.invalid/site-a-artifacts/")
    assert "X-Amz-Credential=demo-site-a%2F" in url and "X-Amz-Signature=" in url
    status = site_b.wait(site_b.create(body))
    assert status["phase"] == "Succeeded", status.get("message")
    (node,) = site_b.pods(status).values()
    assert node["outputs"]["result"] == CONTENT


def test_without_the_full_location_site_b_would_read_its_own_bucket(
    inventory, site_a: Member, site_b: Member
) -> None:
    """Why the portal writes it: the bare key resolves against the reader's repository."""
    outputs = written_at_site_a(site_a)
    Site.objects.filter(name="site-a").update(overrides={})  # no repository known for site-a
    body = reader_step_workflow(outputs)
    status = site_b.wait(site_b.create(body))
    assert status["phase"] in ("Failed", "Error")
    assert "NoSuchKey" in yaml.safe_dump(status)
