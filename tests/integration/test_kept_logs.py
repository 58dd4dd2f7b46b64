"""Step logs outlive their step workflow, end to end over HTTP on a sandbox that really runs
the steps (PostgreSQL, Redis, a Celery worker, the watcher, the live server): a log read after
the cleanup deleted the step workflow (and, with it, the member's pods and their logs) is
byte for byte the log read before, through the REST logs endpoint, the step panel and Argo
Server's log endpoint; a long log keeps its end and says so; a site that cannot give a log
holds back only its own step workflows, until the portal gives up and says why; a keeping cut
short changes nothing a reader sees; deleting the run deletes what was kept."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
import yaml

from portal.controller import keep_logs
from portal.controller.cleanup import step_workflows_cleanup
from portal.karmada import client, errors, proxy
from portal.models import KeptAttempt, KeptLog, UnitRun, WorkflowRun
from tests.fixtures_stack import Stack, wait_for
from tests.live_sessions import api_session, finished_run, post_run, web_session

pytestmark = [pytest.mark.integration]

PROJECT = "eo-demo"
# Lines a reader must get back exactly: non-ASCII, a blank line, no final newline.
PRINT = "printf 'first line\\n\\nNDVI ≥ 0.5 — ok\\n'; seq 1 40; printf 'no newline at the end'"


def dag_workflow(print_script: str = PRINT, *, gpu_pair: bool = False, **spec: Any) -> str:
    def container(script: str, **extra: Any) -> dict[str, Any]:
        return {"image": "alpine:3.23", "command": ["sh", "-c", script], **extra}

    # A GPU sends pair to the demo's GPU site, away from talk.
    gpu = {"resources": {"limits": {"nvidia.com/gpu": "1"}}} if gpu_pair else {}

    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "kept-logs-"},
            "spec": {
                "entrypoint": "main",
                "templates": [
                    {
                        "name": "main",
                        "dag": {
                            "tasks": [
                                {"name": "talk", "template": "talk"},
                                {"name": "pair", "template": "pair"},
                            ]
                        },
                    },
                    {"name": "talk", "container": container(print_script)},
                    {"name": "pair", "container": container("echo pod two; seq 1 3", **gpu)},
                ],
                **spec,
            },
        }
    )


@pytest.fixture
def member(live_executing: Stack, live_server: Any) -> Iterator[requests.Session]:
    """load_demo's scientist with an API token; the stack's own cleanup keeps finished step
    workflows for a minute, so the test runs the cleanup itself when it wants it."""
    yield api_session(live_server.url, "scientist")


def submit(member: requests.Session, body: str) -> WorkflowRun:
    """The run of ``body``, once it has succeeded."""
    run = finished_run(post_run(member, body, PROJECT), 180)
    assert run.status == "Succeeded", run
    return run


def reads(member: requests.Session, web: requests.Session, run: WorkflowRun) -> dict[str, bytes]:
    """Every way a reader sees the run's logs, as raw bytes."""
    base = member.base  # type: ignore[attr-defined]
    token = str(member.headers["Authorization"]).split(" ", 1)[1]
    out: dict[str, bytes] = {}
    for unit in ("talk", "pair"):
        logs_url = f"{base}/api/v1/runs/{run.pk}/units/{unit}/logs/"
        for query in ("", "?tail=2", "?tail=0", "?container=main"):
            answer = member.get(logs_url + query, timeout=30)
            assert answer.status_code == 200, answer.text
            out[f"rest {unit}{query}"] = answer.content
        panel = web.get(
            f"{base}/runs/{run.pk}/units/{unit}/logs/", headers={"HX-Request": "true"}, timeout=30
        )
        assert panel.status_code == 200
        out[f"panel {unit}"] = panel.content
    argo = requests.get(
        f"{base}/argo/api/v1/workflows/{PROJECT}/{run.name}/log",
        params={"logOptions.container": "main"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert argo.status_code == 200, argo.text
    out["argo"] = argo.content
    return out


def cleaned(run: WorkflowRun, stack: Stack) -> None:
    """Run the cleanup as the resync does (without its minute's wait) and see the step
    workflows and their pods gone from the sites."""
    step_workflows_cleanup(keep_seconds=0)
    units = list(UnitRun.objects.filter(run=run))
    assert all(u.workflow_deleted_at is not None for u in units), [
        (u.name, u.workflow_deleted_at) for u in units
    ]

    def gone() -> bool:
        return not stack.workflows(run.pk)

    wait_for(gone, 60, "the step workflows to leave the sandbox")


def test_a_log_read_after_cleanup_is_the_log_read_before(
    member: requests.Session, live_executing: Stack
) -> None:
    run = submit(member, dag_workflow())
    web = web_session(member.base, "scientist")  # type: ignore[attr-defined]
    before = reads(member, web, run)
    talk = before["rest talk"].decode()
    assert talk.startswith("first line\n\nNDVI ≥ 0.5 — ok\n1\n2\n")
    assert talk.endswith("40\nno newline at the end")
    assert before["rest talk?tail=2"] == b"40\nno newline at the end"
    assert before["rest pair"] == b"pod two\n1\n2\n3\n"
    assert b"NDVI" in before["panel talk"] and b"pod two" in before["argo"]

    talk_unit = UnitRun.objects.get(run=run, name="talk")
    cleaned(run, live_executing)
    # The member's pods go with their step workflow: the site soon has no log to give. The
    # member deletes them after Karmada has deleted its Work, as a real member's garbage
    # collector does, so this waits for that rather than reading in the same instant.
    kept = KeptAttempt.objects.get(unit=talk_unit, attempt=1)
    assert kept.kept_at is not None
    (entry,) = kept.pods

    def site_log_gone() -> bool:
        try:
            b"".join(proxy.pod_log(talk_unit.site, client.namespace(), entry["pod"]))
        except errors.KarmadaError:
            return True
        return False

    wait_for(site_log_gone, 60, "the member's pod and its log to go")

    after = reads(member, web, run)
    assert after.keys() == before.keys()
    for key, text in before.items():
        if not key.startswith("panel"):
            assert after[key] == text, key
    assert b"kept by the portal" not in before["panel talk"]
    assert b"kept by the portal when the step workflow was deleted" in after["panel talk"]
    for unit in ("talk", "pair"):
        for line in before[f"rest {unit}"].decode().splitlines():
            assert line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in (
                after[f"panel {unit}"].decode()
            )
    assert KeptLog.objects.filter(kept__unit__run=run).count() == 2  # talk's pod, pair's


def test_a_long_log_keeps_its_end_and_says_so(
    member: requests.Session, live_executing: Stack, settings: Any
) -> None:
    settings.PORTAL_KEPT_LOG_MAX_BYTES = 100
    run = submit(member, dag_workflow("seq 1 1000"))
    cleaned(run, live_executing)
    base = member.base  # type: ignore[attr-defined]
    text = member.get(f"{base}/api/v1/runs/{run.pk}/units/talk/logs/", timeout=30).text
    whole = "".join(f"{i}\n" for i in range(1, 1001))
    head, kept = text.split("\n", 1)
    assert head == (
        f"[log truncated: the container printed {len(whole)} bytes; the portal kept the last "
        "100 (PORTAL_KEPT_LOG_MAX_BYTES)]"
    )
    assert kept == whole[-100:]
    row = KeptLog.objects.get(kept__unit__run=run, kept__unit__name="talk")
    assert row.truncated and row.size == len(whole)


def test_a_silent_site_holds_back_only_its_own_cleanup_until_the_portal_gives_up(
    member: requests.Session, live_executing: Stack, settings: Any
) -> None:
    run = submit(member, dag_workflow(gpu_pair=True))
    talk = UnitRun.objects.get(run=run, name="talk")
    assert UnitRun.objects.get(run=run, name="pair").site != talk.site
    live_executing.sandbox.fault("site-unreachable", site=talk.site)
    step_workflows_cleanup(keep_seconds=0)
    talk.refresh_from_db()
    assert talk.workflow_deleted_at is None  # tried again at the next cleanup
    assert not KeptAttempt.objects.filter(unit=talk, kept_at__isnull=False).exists()
    pair = UnitRun.objects.get(run=run, name="pair")
    assert pair.workflow_deleted_at is not None  # at another site: not held back
    assert KeptLog.objects.filter(kept__unit=pair).exists()
    base = member.base  # type: ignore[attr-defined]
    # Past the give-up time the step workflow goes, and the reader is told why.
    settings.PORTAL_LOG_KEEP_GIVE_UP_SECONDS = 0
    step_workflows_cleanup(keep_seconds=0)
    talk.refresh_from_db()
    assert talk.workflow_deleted_at is not None
    answer = member.get(f"{base}/api/v1/runs/{run.pk}/units/talk/logs/", timeout=30)
    assert answer.status_code == 404
    assert (
        "the site did not give its log before the step workflow was deleted"
        in (answer.json()["detail"])
    )


def test_a_keeping_cut_short_changes_nothing_a_reader_sees(
    member: requests.Session, live_executing: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = submit(member, dag_workflow())
    base = member.base  # type: ignore[attr-defined]
    url = f"{base}/api/v1/runs/{run.pk}/units/talk/logs/"
    before = member.get(url, timeout=30).content
    write = KeptAttempt.objects.bulk_create
    calls: list[int] = []

    def killed_at_the_second_write(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) > 1:
            raise KeyboardInterrupt  # the worker dies in the middle of a write
        return write(*args, **kwargs)

    with monkeypatch.context() as m:
        # Every log alone passes the memory bound: each is written as it is read, unmarked.
        m.setattr(keep_logs, "FLUSH_BYTES", 1)
        m.setattr(KeptAttempt.objects, "bulk_create", killed_at_the_second_write)
        with pytest.raises(KeyboardInterrupt):
            step_workflows_cleanup(keep_seconds=0)
    # The first log was written, but nothing is marked kept, nothing deleted.
    assert KeptLog.objects.filter(kept__unit__run=run).count() == 1
    assert not KeptAttempt.objects.filter(unit__run=run, kept_at__isnull=False).exists()
    assert not UnitRun.objects.filter(run=run, workflow_deleted_at__isnull=False).exists()
    assert member.get(url, timeout=30).content == before  # still read from the site
    cleaned(run, live_executing)
    assert member.get(url, timeout=30).content == before
    assert KeptLog.objects.filter(kept__unit__run=run).count() == 2


def test_deleting_a_run_deletes_its_kept_logs(
    member: requests.Session, live_executing: Stack
) -> None:
    run = submit(member, dag_workflow())
    cleaned(run, live_executing)
    assert KeptLog.objects.filter(kept__unit__run=run).count() == 2
    base = member.base  # type: ignore[attr-defined]
    token = str(member.headers["Authorization"]).split(" ", 1)[1]
    answer = requests.delete(
        f"{base}/argo/api/v1/workflows/{PROJECT}/{run.name}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    assert not KeptAttempt.objects.filter(unit__run_id=run.pk).exists()
    assert not KeptLog.objects.filter(kept__unit__run_id=run.pk).exists()


def test_a_log_argo_archived_is_named_in_what_was_kept(
    member: requests.Session, live_executing: Stack
) -> None:
    run = submit(member, dag_workflow(archiveLogs=True))
    base = member.base  # type: ignore[attr-defined]
    url = f"{base}/api/v1/runs/{run.pk}/units/talk/logs/"
    before = member.get(url, timeout=30).content
    cleaned(run, live_executing)
    talk = UnitRun.objects.get(run=run, name="talk")
    (entry,) = KeptAttempt.objects.get(unit=talk).pods
    assert entry["archived"] == f"{talk.workflow_name}/{entry['pod']}/main.log"
    assert member.get(url, timeout=30).content == before
