"""The step workflow of a transfer unit: a copy of a producer's outputs into the repository
of the site it runs at, for readers that cannot read the producer's own repository."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from placement.labels import DEFAULT_DOMAIN
from placement.manifests.names import API_VERSION
from placement.manifests.workflows import step_metadata
from placement.parser import Unit

# The transfer step's image: a shell is all it needs (Argo's executor moves the bytes).
TRANSFER_IMAGE = "alpine:3.20"
# Argo's retryStrategy (workflow_types.go, RetryStrategy): ``Always`` retries a node that
# ended Failed or Error; the backoff waits 2 s, then 4 s.
TRANSFER_RETRY = {
    "limit": "2",
    "retryPolicy": "Always",
    "backoff": {"duration": "2s", "factor": "2"},
}
TRANSFER_DIR = "/tmp/transfer"


def transfer_workflow(
    unit: Unit,
    artifacts: Sequence[Mapping[str, Any]],
    *,
    run_name: str,
    run_id: str | int,
    attempt: int = 1,
    namespace: str,
    site: str,
    reason: str,
    domain: str = DEFAULT_DOMAIN,
    folders: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """The step workflow of a transfer unit: each of ``artifacts`` (a producer's outputs, by
    the output's name, at their full ``s3`` locations, each signed into a pre-signed ``http``
    GET by the caller) is read into the step and written out again, under the same name, into
    the repository of the site it runs at. An object is moved as it is (``archive: none`` both
    ways: a producer's tgz stays the same tgz, its reader unpacks it as it would have). A folder
    saved with ``archive: none`` (``folders``: its objects' paths relative to its key) is read
    one object per input, each at its relative path, and written as one tgz: its readers, at
    sites that hold no key for this repository either, read it with one pre-signed GET and
    Argo unpacks it into the folder. Its ``bytes`` output parameter is what was moved, for the
    transfer's record and the link's observed bandwidth."""
    folders = folders or {}
    arguments: list[dict[str, Any]] = []
    for i, a in enumerate(artifacts):
        kept = {k: v for k, v in a.items() if k not in ("name", "archive")}
        files = folders.get(str(a["name"]))
        if not files:
            arguments.append({**kept, "name": f"a{i}", "archive": {"none": {}}})
            continue
        base = posixpath.normpath(str(a["s3"]["key"]))
        for j, rel in enumerate(files):
            s3 = {**a["s3"], "key": f"{base}/{rel}"}
            arguments.append({**kept, "s3": s3, "name": f"a{i}-{j}", "archive": {"none": {}}})
    return {
        "apiVersion": API_VERSION,
        "kind": "Workflow",
        "metadata": step_metadata(
            unit,
            domain,
            run_name=run_name,
            namespace=namespace,
            run_id=run_id,
            attempt=attempt,
            site=site,
            reason=reason,
        ),
        "spec": {
            # The copy is the portal's, not the user's: it goes when its step workflow is
            # deleted (after the run ends), whatever the run's own artifactGC says.
            "artifactGC": {"strategy": "OnWorkflowDeletion"},
            "entrypoint": "transfer",
            "arguments": {"artifacts": arguments},
            "templates": [_transfer_template(artifacts, folders)],
        },
    }


def _transfer_template(
    artifacts: Sequence[Mapping[str, Any]], folders: Mapping[str, Sequence[str]]
) -> dict[str, Any]:
    """The one template of a transfer: input ``a<i>`` (or a folder's ``a<i>-<j>``) read as it
    is, written out again as the output named as the artifact, and the bytes it moved."""
    inputs: list[dict[str, Any]] = []
    outputs: list[dict[str, Any]] = []
    for i, artifact in enumerate(artifacts):
        path = f"{TRANSFER_DIR}/{i}"
        files = folders.get(str(artifact["name"]))
        if not files:
            inputs.append({"name": f"a{i}", "path": path, "archive": {"none": {}}})
            outputs.append({"name": str(artifact["name"]), "path": path, "archive": {"none": {}}})
            continue
        for j, rel in enumerate(files):
            inputs.append({"name": f"a{i}-{j}", "path": f"{path}/{rel}", "archive": {"none": {}}})
        # Argo's default archive: one tgz whose top entry is the folder.
        outputs.append({"name": str(artifact["name"]), "path": path})
    return {
        "name": "transfer",
        "inputs": {"artifacts": inputs},
        "outputs": {
            "artifacts": outputs,
            "parameters": [{"name": "bytes", "valueFrom": {"path": f"{TRANSFER_DIR}.bytes"}}],
        },
        # A copy is idempotent (the same objects written again under the same keys), so a
        # transient failure (a dropped connection, a repository answering 503 SlowDown) is
        # retried in place by the member's Argo, whatever phase it ended in, as any step
        # with a retryStrategy is; a permanent one (an expired URL) fails after the last.
        "retryStrategy": dict(TRANSFER_RETRY),
        "container": {
            "image": TRANSFER_IMAGE,
            "command": ["sh", "-c"],
            # Bytes of every file read (a directory artifact is counted file by file), by
            # their sizes: counting with cat read every byte once more.
            "args": [
                f"find {TRANSFER_DIR} -type f -exec stat -c %s {{}} + "
                f"| awk '{{s += $1}} END {{print s + 0}}' > {TRANSFER_DIR}.bytes"
            ],
        },
    }
