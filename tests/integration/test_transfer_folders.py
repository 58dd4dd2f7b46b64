"""A folder output read at a site that cannot use its repository: Argo saves a directory with
``archive: none`` as one object per file under its key, which no single pre-signed GET names.
The portal lists the folder at the producer's repository and gives the copy one pre-signed
GET per object; the copy is one tgz the reader's Argo unpacks into the folder. The copy is at
a relay when the reader's site cannot read the producer's repository, at the reader's own
site when it can, and at the producer's own site when the webhook places the reader."""

from __future__ import annotations

import hashlib
import json

import pytest
import yaml
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from portal import services
from portal.models import PlacementDecision
from portal.selectors.transfers import transfer_measured
from tests.fixtures_stack import Stack
from tests.integration.test_transfers import repository_keys, stop
from tests.live_sessions import finished_run, units
from tests.portal import helpers

pytestmark = [pytest.mark.integration]

# Relative path -> content: nested, a name needing quoting in a URL, bytes of every value.
FILES = {
    "a.txt": b"first file\n",
    "sub/b.bin": bytes(range(256)) * 64,
    "sub/deeper/c d+e.txt": "ünïcode & $HOME {{not-a-template}}".encode(),
}

WRITE_FOLDER = {
    "outputs": {
        "artifacts": [{"name": "data", "path": "/tmp/out", "archive": {"none": {}}}],
    },
    "script": {
        "image": "python:3",
        "command": ["python3"],
        "source": (
            "import os\n"
            f"files = {FILES!r}\n"
            "for rel, data in files.items():\n"
            "    path = os.path.join('/tmp/out', rel)\n"
            "    os.makedirs(os.path.dirname(path), exist_ok=True)\n"
            "    open(path, 'wb').write(data)\n"
        ),
    },
}

# The GPU step: what it found under the folder, each file's SHA-256 by relative path.
READ_FOLDER_ON_GPU = {
    "inputs": {"artifacts": [{"name": "data", "path": "/tmp/in"}]},
    "script": {
        "image": "python:3",
        "command": ["python3"],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
        "source": (
            "import hashlib, json, os\n"
            "found = {}\n"
            "for top, _dirs, names in os.walk('/tmp/in'):\n"
            "    for n in names:\n"
            "        p = os.path.join(top, n)\n"
            "        found[os.path.relpath(p, '/tmp/in')] = "
            "hashlib.sha256(open(p, 'rb').read()).hexdigest()\n"
            "print(json.dumps(found, sort_keys=True))\n"
        ),
    },
}


def test_a_folder_written_unarchived_at_site_a_reaches_a_gpu_step_at_site_c(
    live_executing: Stack,
) -> None:
    scientist = User.objects.get(username="scientist")
    helpers.pin("write", "site-a")
    body = helpers.write_then_read(WRITE_FOLDER, READ_FOLDER_ON_GPU)
    run = services.run_submit(user=scientist, body=body, project="eo-demo")
    try:
        done = finished_run(run.pk, 120)
    finally:
        stop(run.pk, scientist)
    got = units(run.pk)
    assert done.status == "Succeeded", (done.message, {n: u.message for n, u in got.items()})
    write, copy, read = got["write"], got["write-copy-site-b"], got["read"]
    assert (write.site, copy.site, read.site) == ("site-a", "site-b", "site-c")
    # The folder is at site-a as Argo leaves it: one object per file under its key.
    written = repository_keys(live_executing, "site-a", f"{write.workflow_name}/")
    assert len(written) == len(FILES), written
    # Every file arrived, byte for byte, at its relative path.
    expected = {rel: hashlib.sha256(data).hexdigest() for rel, data in FILES.items()}
    assert json.loads(read.outputs["result"]) == expected
    # The copy read one pre-signed GET per object, each at its path under the folder.
    (step,) = [
        w for w in live_executing.workflows(run.pk) if w["metadata"]["name"] == copy.workflow_name
    ]
    arguments = step["spec"]["arguments"]["artifacts"]
    assert len(arguments) == len(FILES)
    assert all("s3" not in a and "X-Amz-Signature=" in a["http"]["url"] for a in arguments)
    (template,) = step["spec"]["templates"]
    paths = sorted(a["path"] for a in template["inputs"]["artifacts"])
    assert paths == sorted(f"/tmp/transfer/0/{rel}" for rel in FILES)
    assert transfer_measured(copy)["bytes"] == sum(len(d) for d in FILES.values())


READ_FOLDER = {
    **READ_FOLDER_ON_GPU,
    "script": {k: v for k, v in READ_FOLDER_ON_GPU["script"].items() if k != "resources"},
}


def test_a_folder_read_directly_at_another_site_is_copied_where_it_is_read(
    live_executing: Stack,
) -> None:
    """site-b reads site-a's repository, but only by pre-signed URL, which names no folder:
    the folder is copied into site-b's repository (one tgz, made at site-b) and read there."""
    scientist = User.objects.get(username="scientist")
    helpers.pin("write", "site-a")
    helpers.pin("read", "site-b")
    body = helpers.write_then_read(WRITE_FOLDER, READ_FOLDER)
    run = services.run_submit(user=scientist, body=body, project="eo-demo")
    try:
        done = finished_run(run.pk, 120)
    finally:
        stop(run.pk, scientist)
    got = units(run.pk)
    assert done.status == "Succeeded", (done.message, {n: u.message for n, u in got.items()})
    copy, read = got["write-copy-site-b"], got["read"]
    assert (copy.site, read.site, read.spec["via"]) == ("site-b", "site-b", {"write": copy.name})
    decision = PlacementDecision.objects.get(unit=copy)
    assert decision.source == "transfer" and "folder saved unarchived" in decision.reason
    expected = {rel: hashlib.sha256(data).hexdigest() for rel, data in FILES.items()}
    assert json.loads(read.outputs["result"]) == expected
    # The copy is one object in site-b's repository, read with site-b's own Secret.
    (copied,) = repository_keys(live_executing, "site-b", f"{copy.workflow_name}/")
    assert copied.endswith(".tgz")


def _write_then_fan_out(items: int) -> str:
    """``write`` (the folder), then ``items`` readers under the task name the demo's runtime
    rule (``preprocess*``) leaves to the webhook."""
    take = {"name": "data", "from": "{{tasks.write.outputs.artifacts.data}}"}
    tasks = [
        {"name": "write", "template": "write"},
        {
            "name": "preprocess",
            "template": "read",
            "depends": "write",
            "arguments": {"artifacts": [take]},
            "withItems": list(range(items)),
        },
    ]
    templates = [
        {"name": "main", "dag": {"tasks": tasks}},
        {"name": "write", **WRITE_FOLDER},
        {"name": "read", **READ_FOLDER},
    ]
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "folder-fan-out-"},
            "spec": {"entrypoint": "main", "templates": templates},
        },
        allow_unicode=True,
    )


def test_runtime_readers_of_a_folder_share_one_copy_made_at_its_own_site(
    live_executing: Stack,
) -> None:
    """Three readers the webhook places (their site unknown when their step workflows are
    made) read one folder written at site-a: one copy, made at site-a within its repository
    as one tgz, which each reader reads through one pre-signed GET wherever it runs."""
    scientist = User.objects.get(username="scientist")
    helpers.pin("write", "site-a")
    run = services.run_submit(user=scientist, body=_write_then_fan_out(3), project="eo-demo")
    try:
        done = finished_run(run.pk, 120)
    finally:
        stop(run.pk, scientist)
    got = units(run.pk)
    assert done.status == "Succeeded", (done.message, {n: u.message for n, u in got.items()})
    readers = [u for n, u in got.items() if n.startswith("preprocess(")]
    copies = [u for u in got.values() if u.kind == "transfer"]
    assert len(readers) == 3 and [c.name for c in copies] == ["write-copy-site-a"]
    (copy,) = copies
    assert copy.site == "site-a" and copy.phase == "Succeeded"
    assert all(r.timing == "runtime" and r.site for r in readers)
    assert all(r.spec["via"] == {"write": copy.name} for r in readers)
    decision = PlacementDecision.objects.get(unit=copy)
    assert decision.source == "transfer" and "placed at runtime" in decision.reason
    # Every reader found every file, byte for byte, at its relative path.
    expected = {rel: hashlib.sha256(data).hexdigest() for rel, data in FILES.items()}
    assert [json.loads(r.outputs["result"]) for r in readers] == [expected] * 3
    # The copy is one object in site-a's repository; each reader read it by pre-signed GET.
    (copied,) = repository_keys(live_executing, "site-a", f"{copy.workflow_name}/")
    assert copied.endswith(".tgz")
    names = {r.workflow_name for r in readers}
    for step in live_executing.workflows(run.pk):
        if step["metadata"]["name"] in names:
            (argument,) = step["spec"]["arguments"]["artifacts"]
            assert "s3" not in argument and copied in argument["http"]["url"]
    # The REST run detail shows the copy as a transfer unit.
    api = APIClient()
    api.force_authenticate(scientist)
    body = api.get(f"/api/v1/runs/{run.pk}/").json()
    (shown,) = [u for u in body["units"] if u["kind"] == "transfer"]
    assert (shown["name"], shown["site"]) == (copy.name, "site-a")
    assert (shown["transfer"]["from"], shown["transfer"]["to"]) == ("site-a", "site-a")
    assert shown["transfer"]["bytes"] > 0
