"""The step panel and the unit's REST endpoints: detail, attempts, logs, resume; the run page's
events, outputs, group nodes and unit filters."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from rest_framework.test import APIClient

from portal.choices import RunStatus, UnitPhase
from portal.karmada import client, logs, proxy
from portal.models import RunEvent, UnitRun, WorkflowRun
from sites.choices import SyncMode
from tests.factories import PlacementDecisionFactory, SiteFactory, UnitRunFactory
from tests.portal.helpers import make_run

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}
LOG = b"loading tiles\ninference on 4 GPUs\nwrote s3://results/eo/out.zarr\n"


@pytest.fixture
def sites(db: Any) -> None:
    SiteFactory(name="site-a")
    SiteFactory(name="site-b")
    SiteFactory(name="site-c", gpu_allocatable=8)
    SiteFactory(name="site-p", sync_mode=SyncMode.PULL)


@pytest.fixture
def run(sites: None, scientist: User, project: Any) -> WorkflowRun:
    run = make_run(
        scientist,
        project=project,
        status=RunStatus.SUCCEEDED,
        units=[
            ("ingest", "site-a", UnitPhase.SUCCEEDED, []),
            ("preprocess", "site-b", UnitPhase.SUCCEEDED, ["ingest"]),
            ("inference", "site-c", UnitPhase.SUCCEEDED, ["preprocess"]),
        ],
    )
    UnitRun.objects.filter(run=run, name="inference").update(
        workflow_name=f"{run.name}-inference-1",
        outputs={
            "parameters": [{"name": "score", "value": "0.93", "globalName": "best-score"}],
            "artifacts": [{"name": "tiles", "s3": {"bucket": "results", "key": "eo/out.zarr"}}],
            "exitCode": "0",
            "result": "done",
        },
        spec={"arguments": {"parameters": [{"name": "model", "value": "unet"}], "artifacts": []}},
    )
    return run


@pytest.fixture
def fake_site(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """Karmada answering for a push-mode site: the binding's member status and a pod log."""
    calls: list[dict[str, Any]] = []

    def member_status(workflow: str) -> dict[str, Any]:
        return {
            "phase": "Succeeded",
            "nodes": {
                workflow: {"id": workflow, "name": workflow, "type": "Steps", "phase": "Succeeded"},
                f"{workflow}-1": {
                    "id": f"{workflow}-1",
                    "name": f"{workflow}[0].run",
                    "displayName": "run",
                    "type": "Pod",
                    "templateName": "infer",
                    "phase": "Succeeded",
                },
            },
        }

    def pod_log(site: str, namespace: str, pod: str, **kwargs: Any) -> Iterator[bytes]:
        calls.append({"site": site, "namespace": namespace, "pod": pod, **kwargs})
        return iter([LOG[:20], LOG[20:]])

    monkeypatch.setattr(logs, "_member_status", member_status)
    monkeypatch.setattr(proxy, "pod_log", pod_log)
    yield calls


def panel_url(run: WorkflowRun, key: str) -> str:
    return reverse("ui-unit-detail", args=[run.pk, key])


# --- pod names ------------------------------------------------------------------------------


# --- the step panel -------------------------------------------------------------------------


def test_the_panel_shows_site_workflow_inputs_outputs_and_decision(
    run: WorkflowRun, client_for: Any, scientist: User
) -> None:
    unit = run.units.get(name="inference")
    PlacementDecisionFactory(unit=unit, site="site-c", reason="needs GPUs: site-c has 6 free")
    body = client_for(scientist).get(panel_url(run, "inference"), **HX).content.decode()
    assert 'id="unit-panel"' in body and "<html" not in body
    assert "site-c" in body and unit.workflow_name in body
    assert "unet" in body  # an input parameter
    assert "0.93" in body and "s3://results/eo/out.zarr" in body and "done" in body
    assert "needs GPUs: site-c has 6 free" in body
    assert reverse("ui-unit-logs", args=[run.pk, unit.slug]) in body


def test_a_step_whose_only_output_is_its_result_does_not_also_say_none(
    run: WorkflowRun, client_for: Any, scientist: User
) -> None:
    UnitRun.objects.filter(run=run, name="inference").update(outputs={"result": "42 tiles"})
    body = client_for(scientist).get(panel_url(run, "inference"), **HX).content.decode()
    outputs = body.split("Outputs", 1)[1].split("Placement", 1)[0]
    assert "42 tiles" in outputs and "None" not in outputs


def test_a_deep_link_opens_the_run_page_with_the_panel(
    run: WorkflowRun, client_for: Any, scientist: User
) -> None:
    body = client_for(scientist).get(panel_url(run, "inference")).content.decode()
    assert "<html" in body and 'id="unit-panel"' in body and 'id="run-live"' in body


def test_a_member_sees_the_panel_and_an_outsider_gets_404(
    run: WorkflowRun, client_for: Any, member: User, outsider: User
) -> None:
    assert client_for(member).get(panel_url(run, "inference"), **HX).status_code == 200
    assert client_for(outsider).get(panel_url(run, "inference"), **HX).status_code == 404
    logs_url = reverse("ui-unit-logs", args=[run.pk, "inference"])
    assert client_for(outsider).get(logs_url, **HX).status_code == 404


def test_an_unknown_unit_is_404(run: WorkflowRun, client_for: Any, scientist: User) -> None:
    assert client_for(scientist).get(panel_url(run, "nope"), **HX).status_code == 404


def test_the_panel_reads_the_log_through_the_cluster_proxy(
    run: WorkflowRun, client_for: Any, scientist: User, fake_site: list[dict[str, Any]]
) -> None:
    url = reverse("ui-unit-logs", args=[run.pk, "inference"])
    body = client_for(scientist).get(url, **HX).content.decode()
    assert "inference on 4 GPUs" in body
    wf = f"{run.name}-inference-1"
    assert fake_site[0]["site"] == "site-c"
    assert fake_site[0]["pod"] == f"{wf}-infer-{logs.fnv32a(f'{wf}[0].run')}"
    assert fake_site[0]["container"] == "main"
    assert 'data-live="false"' in body  # a finished step is not polled


def test_a_log_of_blank_lines_says_it_is_empty(
    run: WorkflowRun,
    client_for: Any,
    scientist: User,
    fake_site: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A step that printed only a newline drew an empty black box on the panel.
    monkeypatch.setattr(proxy, "pod_log", lambda *a, **k: iter([b"\n", b"  \n"]))
    url = reverse("ui-unit-logs", args=[run.pk, "inference"])
    body = client_for(scientist).get(url, **HX).content.decode()
    assert "The log is empty." in body and "log-text" not in body


def test_a_unit_not_started_has_no_log_yet(
    run: WorkflowRun, client_for: Any, scientist: User
) -> None:
    UnitRun.objects.filter(run=run, name="inference").update(
        workflow_name="", phase=UnitPhase.PENDING
    )
    url = reverse("ui-unit-logs", args=[run.pk, "inference"])
    body = client_for(scientist).get(url, **HX).content.decode()
    assert "no step workflow yet" in body


def test_a_waiting_unit_says_what_it_waits_for(
    sites: None, scientist: User, client_for: Any
) -> None:
    run = make_run(scientist)  # preprocess running, inference pending after it
    body = client_for(scientist).get(panel_url(run, "inference"), **HX).content.decode()
    assert "Waiting for preprocess to finish." in body


def _pending_ready(scientist: User) -> tuple[WorkflowRun, UnitRun]:
    run = make_run(
        scientist,
        units=[
            ("ingest", "site-a", UnitPhase.SUCCEEDED, []),
            ("preprocess", "site-b", UnitPhase.PENDING, ["ingest"]),
        ],
    )
    return run, run.units.get(name="preprocess")


def test_a_unit_waiting_for_a_lock_names_the_lock_not_its_creation(
    sites: None, scientist: User
) -> None:
    from portal.controller import gates
    from portal.selectors import unit_detail

    _run, unit = _pending_ready(scientist)
    # What the worker writes when the unit's mutex is held by another run.
    gates._say_waiting([unit], "waiting for the lock eo/Mutex/shared (spec.synchronization)")
    said = unit_detail(UnitRun.objects.get(pk=unit.pk))["waiting_for"]
    assert said == "Waiting for the lock eo/Mutex/shared (spec.synchronization)."


def test_a_unit_of_a_suspended_run_says_the_run_waits_to_be_resumed(
    sites: None, scientist: User
) -> None:
    from portal.selectors import unit_detail

    run, unit = _pending_ready(scientist)
    WorkflowRun.objects.filter(pk=run.pk).update(compiled={"spec": {"suspend": True}})
    said = unit_detail(UnitRun.objects.get(pk=unit.pk))["waiting_for"]
    assert said == "Waiting for the run to be resumed (spec.suspend)."


def test_a_unit_whose_pod_is_pending_at_its_site_names_the_members_reason(
    sites: None, scientist: User
) -> None:
    """A tainted or full site is named for what the member said, not blamed on "the site's
    capacity, or its image pulls"."""
    from portal.controller import bindings
    from portal.selectors import unit_detail

    _run, unit = _pending_ready(scientist)
    UnitRun.objects.filter(pk=unit.pk).update(workflow_name="wf-preprocess-1", site="site-b")
    unit.refresh_from_db()
    reason = 'persistentvolumeclaim "scratch" not found'
    member = {
        "phase": "Running",
        "nodes": {
            "n": {"type": "Pod", "phase": "Pending", "displayName": "run", "message": reason}
        },
    }
    bindings._note_waiting(unit, "site-b", member, "7")  # what the watcher writes
    said = unit_detail(UnitRun.objects.get(pk=unit.pk))["waiting_for"]
    assert said == f"Waiting at site-b: run: {reason}."
    assert "capacity" not in said
    # With nothing reported, it blames nothing.
    UnitRun.objects.filter(pk=unit.pk).update(message="")
    said = unit_detail(UnitRun.objects.get(pk=unit.pk))["waiting_for"]
    assert said.startswith("Waiting for site-b to start") and "capacity" not in said


# --- attempts -------------------------------------------------------------------------------


def _failed_over(run: WorkflowRun) -> UnitRun:
    unit = run.units.get(name="preprocess")
    record = unit.attempt_record(ended="failed over", why="site site-b not ready")
    UnitRun.objects.filter(pk=unit.pk).update(attempt=2, site="site-a")
    RunEvent.objects.create(
        run=run,
        unit=unit,
        kind="failover",
        message="preprocess: site site-b not ready; attempt 2 at site-a",
        data={"ended_attempt": record},
    )
    return UnitRun.objects.get(pk=unit.pk)


def test_every_attempt_is_shown_and_the_failed_over_one_says_why(
    run: WorkflowRun, client_for: Any, scientist: User
) -> None:
    _failed_over(run)
    client = client_for(scientist)
    body = client.get(panel_url(run, "preprocess"), **HX).content.decode()
    attempts = re.search(r'<ol class="attempts">(.*?)</ol>', body, re.S)
    assert attempts is not None
    assert "#1" in attempts.group(1) and "#2" in attempts.group(1)
    assert "failed over: site site-b not ready" in attempts.group(1)
    # The lost attempt's phase is the last one its site reported, and says so.
    assert re.search(r"#1.*last seen</span> <span class=\"phase", attempts.group(1), re.S)
    assert attempts.group(1).count("last seen") == 1  # not on the current attempt
    page = client.get(reverse("ui-run-detail", args=[run.pk])).content.decode()
    # The graph keeps the lost attempt as a greyed card, the timeline as a greyed bar.
    assert 'class="ghost"' in page and "attempt 1 at site-b: failed over" in page
    assert "bar phase-Succeeded ended" in page or "ended" in page


def test_the_api_gives_every_attempt_numbered_consecutively(
    run: WorkflowRun, api_client_for: Any, scientist: User
) -> None:
    _failed_over(run)
    url = f"/api/v1/runs/{run.pk}/units/preprocess/"
    data = api_client_for(scientist).get(url).json()
    assert [a["number"] for a in data["attempts"]] == [1, 2]
    assert data["attempts"][0]["ended"] == "failed over"
    assert data["attempts"][0]["site"] == "site-b"
    assert data["attempts"][1]["site"] == "site-a"


# --- REST -----------------------------------------------------------------------------------


def test_the_api_unit_detail_has_inputs_outputs_and_decision(
    run: WorkflowRun, api_client_for: Any, scientist: User
) -> None:
    PlacementDecisionFactory(unit=run.units.get(name="inference"), site="site-c")
    data = api_client_for(scientist).get(f"/api/v1/runs/{run.pk}/units/inference/").json()
    assert data["site"] == "site-c" and data["phase"] == "Succeeded"
    assert data["inputs"]["parameters"][0]["value"] == "unet"
    assert data["outputs"]["result"] == "done"
    assert data["decision"]["site"] == "site-c"
    assert data["namespace"]


def test_the_api_unit_endpoints_check_the_run_permission(
    run: WorkflowRun, outsider_api: APIClient, api_client: APIClient
) -> None:
    for suffix in ("", "logs/"):
        url = f"/api/v1/runs/{run.pk}/units/inference/{suffix}"
        assert outsider_api.get(url).status_code == 404
        assert api_client.get(url).status_code in (401, 403)


def test_the_api_logs_are_text(
    run: WorkflowRun, api_client_for: Any, scientist: User, fake_site: list[dict[str, Any]]
) -> None:
    client = api_client_for(scientist)
    answer = client.get(f"/api/v1/runs/{run.pk}/units/inference/logs/?tail=2&container=init")
    assert answer.status_code == 200
    assert answer["Content-Type"].startswith("text/plain")
    assert answer.content == LOG
    assert fake_site[0]["tail_lines"] == 2 and fake_site[0]["container"] == "init"


def test_the_api_logs_follow_streams_and_is_bounded(
    run: WorkflowRun,
    api_client_for: Any,
    scientist: User,
    fake_site: list[dict[str, Any]],
    settings: Any,
) -> None:
    settings.PORTAL_LOG_MAX_BYTES = 25
    client = api_client_for(scientist)
    url = f"/api/v1/runs/{run.pk}/units/inference/logs/?follow=1"
    answer = client.get(url)
    assert answer.status_code == 200
    assert b"log cut at 25 bytes" in answer.content
    # A finished step is not followed: the log is read once.
    assert fake_site[0]["follow"] is False
    UnitRun.objects.filter(run=run, name="inference").update(phase=UnitPhase.RUNNING)
    answer = client.get(url)
    assert answer.status_code == 200 and answer.streaming
    text = b"".join(answer.streaming_content)
    assert text.startswith(LOG[:25]) and b"log cut at 25 bytes" in text
    assert fake_site[1]["follow"] is True and fake_site[1]["limit_bytes"] == 25


@pytest.mark.parametrize(
    "query,path",
    [("attempt=x", "attempt"), ("attempt=7", "attempt"), ("tail=-1", "tail"), ("tail=z", "tail")],
)
def test_the_api_logs_refuse_bad_parameters_with_the_path(
    run: WorkflowRun, api_client_for: Any, scientist: User, query: str, path: str
) -> None:
    answer = api_client_for(scientist).get(f"/api/v1/runs/{run.pk}/units/inference/logs/?{query}")
    assert answer.status_code == 400
    assert answer.json()["errors"][0]["path"] == path


def test_the_schema_has_the_unit_and_logs_endpoints(api_client: APIClient) -> None:
    schema = api_client.get("/api/schema/?format=json").json()
    paths = schema["paths"]
    assert "/api/v1/runs/{id}/units/{name}/" in paths
    assert "/api/v1/runs/{id}/units/{name}/logs/" in paths
    assert "/api/v1/runs/{id}/resume/" in paths
    assert (
        "text/plain"
        in paths["/api/v1/runs/{id}/units/{name}/logs/"]["get"]["responses"]["200"]["content"]
    )


def test_the_logs_view_against_the_sandbox_reads_or_says_why(
    run: WorkflowRun, client_for: Any, scientist: User, sandbox: Any, settings: Any
) -> None:
    """Against the sandbox over HTTP: a log where the sandbox serves the proxy path, else the
    clear "not available" message (never an error page)."""
    settings.KARMADA_KUBECONFIG = str(sandbox.kubeconfig)
    client.reset()
    try:
        url = reverse("ui-unit-logs", args=[run.pk, "inference"])
        answer = client_for(scientist).get(url, **HX)
    finally:
        client.reset()
    assert answer.status_code == 200
    body = answer.content.decode()
    assert "Logs not available" in body or '<pre class="log-text"' in body
    assert "Karmada did not answer" not in body


# --- the run page ---------------------------------------------------------------------------


def test_the_run_page_shows_outputs_events_and_clickable_nodes(
    run: WorkflowRun, client_for: Any, scientist: User, api_client_for: Any
) -> None:
    RunEvent.objects.create(run=run, kind="failover-blocked", message="no other site for x")
    body = client_for(scientist).get(reverse("ui-run-detail", args=[run.pk])).content.decode()
    assert 'id="run-outputs"' in body and "best-score" in body and "0.93" in body
    assert 'id="run-events"' in body and "no other site for x" in body
    assert f'href="/runs/{run.pk}/units/inference/"' in body
    assert 'id="unit-panel-slot"' in body
    data = api_client_for(scientist).get(f"/api/v1/runs/{run.pk}/").json()
    assert data["outputs"]["parameters"] == [{"name": "best-score", "value": "0.93"}]
    assert data["outputs"]["final"][0]["unit"] == "inference"


def test_the_legend_has_an_entry_for_every_phase_drawn(
    sites: None, scientist: User, client_for: Any
) -> None:
    run = make_run(
        scientist,
        units=[
            ("a", "site-a", UnitPhase.FAILED, []),
            ("b", "site-a", UnitPhase.OMITTED, ["a"]),
            ("c", "site-a", UnitPhase.ERROR, []),
        ],
    )
    body = client_for(scientist).get(reverse("ui-run-detail", args=[run.pk])).content.decode()
    legend = re.search(r'<ul class="legend".*?</ul>', body, re.S)
    assert legend is not None
    for phase in ("Failed", "Omitted", "Error"):
        assert f"outline phase-{phase}" in legend.group(0)


def _fan_out(owner: User, items: int) -> WorkflowRun:
    run = make_run(owner, units=[("prepare", "site-a", UnitPhase.SUCCEEDED, [])])
    rows = [
        UnitRunFactory.build(
            run=run,
            name=f"process({i}:{i})",
            slug=f"process-{i}",
            position=i + 1,
            upstream=["prepare"],
            planned_site="site-b" if i % 3 else "site-c",
            phase=UnitPhase.SUCCEEDED if i % 5 else UnitPhase.RUNNING,
            spec={"task": "process", "item_index": i},
        )
        for i in range(items)
    ]
    rows.append(
        UnitRunFactory.build(
            run=run,
            name="report",
            position=items + 1,
            upstream=[r.name for r in rows],
            planned_site="site-a",
        )
    )
    UnitRun.objects.bulk_create(rows)
    return run


def test_a_big_fan_out_is_one_group_node_with_counts_and_expands(
    sites: None, scientist: User, client_for: Any
) -> None:
    run = _fan_out(scientist, 500)
    client = client_for(scientist)
    body = client.get(reverse("ui-run-detail", args=[run.pk])).content.decode()
    svg = re.search(r"<svg class=\"dag.*?</svg>", body, re.S)
    assert svg is not None
    assert svg.group(0).count('class="node ') < 50
    assert 'data-items="500"' in svg.group(0)
    assert "site-b 333" in body and "site-c 167" in body  # per-site counts
    assert "Running 100" in body and "Succeeded 400" in body  # per-phase counts
    expanded = client.get(
        reverse("ui-run-live", args=[run.pk]) + "?expand=process", **HX
    ).content.decode()
    svg = re.search(r"<svg class=\"dag.*?</svg>", expanded, re.S)
    assert svg is not None and svg.group(0).count('class="node ') == 502


def test_the_units_table_filters_by_phase_and_site_and_pages(
    sites: None, scientist: User, client_for: Any
) -> None:
    run = _fan_out(scientist, 120)
    client = client_for(scientist)
    live = reverse("ui-run-live", args=[run.pk])
    body = client.get(f"{live}?phase=Running&site=site-c", **HX).content.decode()
    rows = re.findall(r'<a class="unit-name"[^>]*>([^<]+)</a>', body)
    assert rows and all(name.startswith("process(") for name in rows)
    assert len(rows) == len({i for i in range(120) if i % 5 == 0 and i % 3 == 0})
    page2 = client.get(f"{live}?site=site-b&page=2", **HX).content.decode()
    assert "Units 51\u201380 of 80" in page2
    assert "site=site-b&amp;page=1" in page2  # the pager keeps the filter


# --- resume ---------------------------------------------------------------------------------


@pytest.fixture
def suspended(sites: None, scientist: User, project: Any) -> WorkflowRun:
    run = make_run(scientist, project=project)
    run.compiled = {"templates": {"approve": {"name": "approve", "suspend": {}}}}
    run.save(update_fields=["compiled"])
    UnitRun.objects.filter(run=run, name="preprocess").update(
        template="approve", spec={"templates": ["approve"]}, workflow_name=f"{run.name}-pp-1"
    )
    return run


def test_a_suspended_step_shows_waiting_for_approval_and_a_resume_button(
    suspended: WorkflowRun, client_for: Any, scientist: User
) -> None:
    body = client_for(scientist).get(panel_url(suspended, "preprocess"), **HX).content.decode()
    assert "Waiting for approval" in body
    assert reverse("ui-run-resume", args=[suspended.pk]) in body


def test_resume_over_rest_enqueues_the_resume(
    suspended: WorkflowRun,
    api_client_for: Any,
    scientist: User,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    from portal import tasks

    sent: list[tuple[int, str]] = []
    monkeypatch.setattr(tasks.unit_resume, "delay", lambda pk, by: sent.append((pk, by)))
    client = api_client_for(scientist)
    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post(
            f"/api/v1/runs/{suspended.pk}/resume/", {"node": "preprocess"}, format="json"
        )
    assert answer.status_code == 200, answer.content
    unit = suspended.units.get(name="preprocess")
    assert sent == [(unit.pk, scientist.username)]
    assert suspended.events.filter(kind="resume-requested").exists()


def test_resume_refuses_an_unknown_or_idle_step(
    suspended: WorkflowRun, api_client_for: Any, scientist: User, outsider_api: APIClient
) -> None:
    client = api_client_for(scientist)
    url = f"/api/v1/runs/{suspended.pk}/resume/"
    answer = client.post(url, {"node": "nope"}, format="json")
    assert answer.status_code == 400 and answer.json()["errors"][0]["path"] == "node"
    assert client.post(url, {"node": "inference"}, format="json").status_code == 409
    assert outsider_api.post(url, {}, format="json").status_code == 404


def test_resume_clears_suspend_and_marks_suspended_nodes(
    suspended: WorkflowRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    from portal.controller import resume

    patched: list[Any] = []
    replaced: list[dict[str, Any]] = []
    member = {
        "metadata": {"resourceVersion": "7"},
        "status": {
            "nodes": {
                "n1": {"type": "Suspend", "phase": "Running"},
                "n2": {"type": "Pod", "phase": "Running"},
            }
        },
    }
    monkeypatch.setattr(client, "patch", lambda *a, **k: patched.append(a) or {})
    monkeypatch.setattr(proxy, "member_workflow_get", lambda *a: member)
    monkeypatch.setattr(proxy, "member_workflow_replace", lambda *a: replaced.append(a[3]) or {})
    unit = suspended.units.get(name="preprocess")
    assert resume.unit_resume(unit, by="alice")
    assert patched[0][2] == {"spec": {"suspend": None}}
    nodes = replaced[0]["status"]["nodes"]
    assert nodes["n1"]["phase"] == "Succeeded" and "Resumed by: alice" in nodes["n1"]["message"]
    assert nodes["n2"]["phase"] == "Running"
    assert suspended.events.filter(kind="resumed").exists()


# --- small things the issue names -----------------------------------------------------------


def test_the_run_page_shows_waiting_for_approval_and_resume_posts(
    suspended: WorkflowRun,
    client_for: Any,
    scientist: User,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    from portal import tasks

    sent: list[int] = []
    monkeypatch.setattr(tasks.unit_resume, "delay", lambda pk, by: sent.append(pk))
    client = client_for(scientist)
    body = client.get(reverse("ui-run-detail", args=[suspended.pk])).content.decode()
    assert "Waiting for approval:" in body and "Resume preprocess" in body
    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post(reverse("ui-run-resume", args=[suspended.pk]), {"node": "preprocess"})
    assert answer.status_code == 302 and answer["Location"].endswith("/units/preprocess/")
    assert sent == [suspended.units.get(name="preprocess").pk]
    # Someone who may not see the run cannot resume it.
    outsider_answer = client_for(User.objects.create_user("nosy", password="x")).post(
        reverse("ui-run-resume", args=[suspended.pk]), {"node": "preprocess"}
    )
    assert outsider_answer.status_code == 404


def test_the_panel_shows_inputs_resolved_from_upstream_outputs(
    run: WorkflowRun, client_for: Any, scientist: User
) -> None:
    UnitRun.objects.filter(run=run, name="ingest").update(
        outputs={
            "parameters": [{"name": "tile-count", "value": "42"}],
            "artifacts": [{"name": "tiles", "s3": {"bucket": "site-a-art", "key": "t.tgz"}}],
        }
    )
    UnitRun.objects.filter(run=run, name="preprocess").update(
        spec={
            "arguments": {
                "parameters": [
                    {
                        "name": "tile-count",
                        "value": "{{tasks.ingest.outputs.parameters.tile-count}}",
                    }
                ],
                "artifacts": [
                    {"name": "tiles", "from": "{{tasks.ingest.outputs.artifacts.tiles}}"}
                ],
            }
        }
    )
    body = client_for(scientist).get(panel_url(run, "preprocess"), **HX).content.decode()
    assert ">42</code>" in body and "s3://site-a-art/t.tgz" in body


def test_the_panel_shows_a_looped_producers_outputs_as_argos_list(
    run: WorkflowRun, client_for: Any, scientist: User
) -> None:
    # The panel fills inputs with the worker's own substitution: a looped producer's output
    # parameter is Argo's JSON list of the items' values in item order, not the raw reference.
    for index, value in ((1, "b"), (0, "a")):
        UnitRunFactory(
            run=run,
            name=f"tile({index})",
            phase="Succeeded",
            spec={"task": "tile", "item_index": index, "item": str(index)},
            outputs={"parameters": [{"name": "p", "value": value}]},
        )
    UnitRun.objects.filter(run=run, name="preprocess").update(
        upstream=["tile"],
        spec={
            "arguments": {
                "parameters": [{"name": "ps", "value": "{{tasks.tile.outputs.parameters.p}}"}]
            }
        },
    )
    body = client_for(scientist).get(panel_url(run, "preprocess"), **HX).content.decode()
    assert '<dt>ps</dt><dd><code class="value">[&quot;a&quot;,&quot;b&quot;]</code>' in body
