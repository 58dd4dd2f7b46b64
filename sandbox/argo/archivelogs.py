"""``archiveLogs``: a pod's main-container log saved to the artifact repository as Argo's wait
container saves it (workflow/executor/executor.go, ``SaveLogs`` and ``saveContainerLogs``):
the file ``<container>.log`` under the archive location's key (by default
``{{workflow.name}}/{{pod.name}}``), recorded in the node's outputs as the artifact
``<container>-logs`` with its key only (``ArtifactLocation.SetType`` starts an empty ``s3``,
``SetKey`` fills the key)."""

from __future__ import annotations

import os
import posixpath
import shutil
import tempfile
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sandbox.s3.client import RemoteBucket


MAIN = "main"


def enabled(spec: dict[str, Any], tmpl: dict[str, Any], repository: dict[str, Any]) -> bool:
    """``IsArchiveLogs`` (workflow/controller/workflowpod.go): "priorities: controller(on) >
    template > workflow > controller(off)"; the controller's is the resolved artifact
    repository's ``archiveLogs``."""
    if repository.get("archiveLogs") is True:
        return True
    value = spec.get("archiveLogs")
    location = tmpl.get("archiveLocation")
    if isinstance(location, dict) and location.get("archiveLogs") is not None:
        value = location["archiveLogs"]
    return value is True


def key_of(tmpl: dict[str, Any], workflow: str, pod: str, container: str = MAIN) -> str:
    """``path.Join(ArchiveLocation.GetKey(), fileName)``: a template whose archiveLocation
    names its own s3 key puts the log under it."""
    location = tmpl.get("archiveLocation") if isinstance(tmpl.get("archiveLocation"), dict) else {}
    s3 = (location or {}).get("s3") or {}
    prefix = str(s3.get("key") or f"{workflow}/{pod}") if isinstance(s3, dict) else ""
    return posixpath.join(prefix or f"{workflow}/{pod}", f"{container}.log")


def save(repo: RemoteBucket, key: str, data: bytes) -> None:
    """Store ``data`` at ``key`` as it is (a log is not tarred), through the repository's
    confined writer. Raises what the repository raises (``ArtifactError``, ``OSError``)."""
    folder = tempfile.mkdtemp(prefix="sandbox-log-")
    try:
        with open(os.path.join(folder, "log"), "wb") as out:
            out.write(data)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            repo.save((fd, "log"), key, False, posixpath.basename(key))
        finally:
            os.close(fd)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def output(key: str, container: str = MAIN) -> dict[str, Any]:
    return {"name": f"{container}-logs", "s3": {"key": key}}
