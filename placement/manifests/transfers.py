"""The step workflow of a transfer unit: a copy of a producer's outputs into the repository
of the site it runs at, for readers that cannot read the producer's own repository."""

from __future__ import annotations

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
) -> dict[str, Any]:
    """The step workflow of a transfer unit: each of ``artifacts`` (a producer's
    outputs, each an input artifact at a pre-signed ``http`` URL, by the output's name) is
    read into the step and written out again, under the same name, into the repository of the
    site it runs at, unarchived (``archive: none``: the copy is the object as read, Argo having
    unpacked a producer's default tgz on input). Its ``bytes`` output parameter is what was
    moved, for the transfer's record and the link's observed bandwidth."""
    arguments = [
        {**{k: v for k, v in a.items() if k != "name"}, "name": f"a{i}"}
        for i, a in enumerate(artifacts)
    ]
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
            "templates": [_transfer_template(artifacts)],
        },
    }


def _transfer_template(artifacts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The one template of a transfer: input ``a<i>`` read to a file, written out again as
    the output named as the artifact, and the bytes it moved."""
    inputs, outputs = [], []
    for i, artifact in enumerate(artifacts):
        path = f"{TRANSFER_DIR}/{i}"
        inputs.append({"name": f"a{i}", "path": path})
        outputs.append({"name": str(artifact["name"]), "path": path, "archive": {"none": {}}})
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
            # Bytes of every file read (a directory artifact is counted file by file).
            "args": [
                f"find {TRANSFER_DIR} -type f -exec cat {{}} + | wc -c "
                f"| tr -d ' ' > {TRANSFER_DIR}.bytes"
            ],
        },
    }
