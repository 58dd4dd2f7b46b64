"""Artifacts across sites (issue #17, item 2), against a sandbox that really runs the steps:
Argo records only an output's key, and a reader resolves a key against its own site's
repository, so the portal writes the producing site's full location (endpoint, bucket, key,
credential Secret refs) into the step workflow; the credential Secret is what Karmada
propagates to every member (``portal-artifact-credentials``)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.core.management import call_command

from portal import execution, services, state
from portal.choices import UnitPhase
from portal.models import UnitRun
from sites.models import Site
from tests.portal.helpers import write_then_read
from tests.sandbox.execution import conftest as on_members
from tests.sandbox.execution.conftest import Member, needs_bwrap, secret

# The executing sandbox and its members, as the execution tests have them.
executing = on_members.executing
site_a = on_members.site_a
site_b = on_members.site_b

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
def inventory(db: Any, settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    call_command("load_demo", verbosity=0)
    # What site-a's operators set in the inventory (the demo fleet's repository for site-a).
    site = Site.objects.get(name="site-a")
    site.overrides = {
        **(site.overrides or {}),
        "artifact_store": {
            "endpoint": "s3.site-a.sandbox.invalid",
            "bucket": "site-a-artifacts",
            "credentials_secret": "site-a-artifacts-credentials",
        },
    }
    site.save()


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
    body = execution.step_workflow_for(run, read, units)
    body["metadata"] = {"generateName": "reader-"}  # created directly on a member
    return body


@pytest.mark.xfail(
    strict=True,
    reason=(
        "issue #28: the sandbox's repositories now check SigV4 keys against the owning "
        "site's own credential Secret; this test puts the Secret only on the reader's "
        "member (it relied on the old credential shortcut)"
    ),
)
def test_a_step_at_site_b_reads_the_exact_file_a_step_at_site_a_wrote(
    inventory, site_a: Member, site_b: Member
) -> None:
    body = reader_step_workflow(written_at_site_a(site_a))
    (argument,) = body["spec"]["arguments"]["artifacts"]
    s3 = argument["s3"]
    assert (s3["endpoint"], s3["bucket"]) == ("s3.site-a.sandbox.invalid", "site-a-artifacts")
    assert s3["accessKeySecret"]["name"] == "site-a-artifacts-credentials"

    # What the portal-artifact-credentials policy puts in every member.
    site_b.put(secret("site-a-artifacts-credentials", accessKey="ak", secretKey="sk"))
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
