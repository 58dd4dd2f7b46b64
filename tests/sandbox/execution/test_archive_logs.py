"""``archiveLogs`` on an executing member: the main container's log saved to the artifact
repository as Argo's wait container saves it (``main.log`` under
``{{workflow.name}}/{{pod.name}}``, the node's output artifact ``main-logs`` with its key
only), decided as Argo's controller decides (``IsArchiveLogs``: the repository's setting when
on, else the template's, else the workflow's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.sandbox.execution.conftest import Member, needs_bwrap
from tests.sandbox.execution.test_execution import sh, wf

pytestmark = needs_bwrap

SCRIPT = "echo one; echo 'NDVI ≥ 0.5'; echo two"


def archived(member: Member, node: dict[str, Any]) -> tuple[str, bytes] | None:
    arts = [
        a for a in (node.get("outputs") or {}).get("artifacts") or [] if a["name"] == "main-logs"
    ]
    if not arts:
        return None
    (art,) = arts
    assert art == {"name": "main-logs", "s3": {"key": art["s3"]["key"]}}  # key only
    key = art["s3"]["key"]
    (found,) = list(Path(member.data_dir, "buckets").glob(f"*/{key}"))
    return key, found.read_bytes()


def run(member: Member, workflow: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    name = member.create(workflow)
    status = member.wait(name)
    (node,) = member.pods(status).values()
    return name, node


def test_a_workflow_with_archive_logs_saves_main_log_as_argo_names_it(site_b: Member) -> None:
    name, node = run(site_b, wf(sh("main", SCRIPT), archiveLogs=True))
    assert node["phase"] == "Succeeded"
    found = archived(site_b, node)
    assert found is not None
    key, data = found
    assert key == f"{name}/{node['id']}/main.log"
    assert data.decode() == site_b.log(node["id"]) == "one\nNDVI ≥ 0.5\ntwo\n"


def test_a_failed_step_archives_its_log_too(site_b: Member) -> None:
    _name, node = run(site_b, wf(sh("main", "echo why it failed; exit 3"), archiveLogs=True))
    assert node["phase"] == "Failed"
    found = archived(site_b, node)
    assert found is not None and found[1] == b"why it failed\n"


def test_without_archive_logs_nothing_is_saved(site_b: Member) -> None:
    _name, node = run(site_b, wf(sh("main", SCRIPT)))
    assert archived(site_b, node) is None


def test_the_template_overrides_the_workflow(site_b: Member) -> None:
    off = sh("main", SCRIPT, archiveLocation={"archiveLogs": False})
    _name, node = run(site_b, wf(off, archiveLogs=True))
    assert archived(site_b, node) is None
    on = sh("main", SCRIPT, archiveLocation={"archiveLogs": True})
    _name, node = run(site_b, wf(on))
    assert archived(site_b, node) is not None


def test_the_repository_turned_on_wins_over_the_template(site_b: Member) -> None:
    repo = "archiveLogs: true\ns3:\n  bucket: logs-bucket\n  endpoint: s3.site-b.sandbox.invalid\n"
    site_b.create_bucket("logs-bucket")  # S3 has no bucket that nobody made
    site_b.put(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "log-repositories"},
            "data": {"logs": repo},
        }
    )
    off = sh("main", SCRIPT, archiveLocation={"archiveLogs": False})
    workflow = wf(off, artifactRepositoryRef={"configMap": "log-repositories", "key": "logs"})
    name, node = run(site_b, workflow)
    key = f"{name}/{node['id']}/main.log"
    assert archived(site_b, node) is not None
    assert (Path(site_b.data_dir) / "buckets" / "logs-bucket" / key).is_file()
