"""Runs across sites with every real part: REST, PostgreSQL, Redis, a Celery worker, the
watcher, and the sandbox fleet over HTTP."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from portal import services, tasks
from portal.models import PlacementDecision, UnitRun, WorkflowRun
from tests.fixtures_stack import Stack, wait_for

pytestmark = [pytest.mark.integration]

DEMO = (Path(__file__).resolve().parents[2] / "examples" / "eo-pipeline.yaml").read_text()
DURATION = "portal.multisite.io/sandbox-duration"


@pytest.fixture
def user(live: Stack) -> User:
    """load_demo's scientist: a member of the eo-demo project, which the demo runs in."""
    return User.objects.get(username="scientist")


@pytest.fixture
def api(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _slow_demo(seconds: int, only: str | None = None) -> str:
    """The demo pipeline with every step (or the ``only`` one, the others taking the
    sandbox's default) lasting ``seconds`` simulated seconds."""
    doc = yaml.safe_load(DEMO)
    for template in doc["spec"]["templates"]:
        if only is not None and template["name"] != only:
            continue
        if "container" in template or "script" in template:
            meta = template.setdefault("metadata", {})
            meta.setdefault("annotations", {})[DURATION] = f"{seconds}s"
    return yaml.safe_dump(doc)


def _finished(run_id: int) -> WorkflowRun | None:
    run = WorkflowRun.objects.get(pk=run_id)
    return run if run.finished_at is not None else None


def _wait_finished(stack: Stack, run_id: int, timeout: float = 90) -> WorkflowRun:
    try:
        return wait_for(lambda: _finished(run_id), timeout, "the run to finish")
    except AssertionError:
        units = list(
            UnitRun.objects.filter(run_id=run_id).values_list(
                "name", "phase", "site", "attempt", "workflow_name", "message"
            )
        )
        # The members' side too (capacity, pods waiting, each step workflow's phase): a run
        # that does not finish is as often held at a site as lost in the portal.
        members = json.dumps(stack.sandbox.state().get("members"), indent=1, sort_keys=True)
        raise AssertionError(
            f"run {run_id} did not finish; units {units}\n--- members\n{members}"
            f"\n--- sandbox\n{stack.sandbox.log_tail(80)}"
            f"\n--- worker\n{stack.log('worker')}\n--- watcher\n{stack.log('watcher')}"
        ) from None


# A step workflow's phases that end it (Argo's WorkflowSucceeded, WorkflowFailed, WorkflowError).
FINISHED = ("Succeeded", "Failed", "Error")


def _left_quiet(stack: Stack, run_id: int) -> None:
    """Wait until no step workflow of the stopped run still runs: each is shut down, ended
    or gone. The database is emptied after the test, and a stop the worker had not carried
    to Karmada by then never would be: the step workflow would wait at its site for the rest
    of the module, taking what the next tests' steps need."""

    def quiet() -> bool:
        # Karmada does not write a member's phase back into the step workflow here, so one
        # whose unit recorded its end (from the binding's aggregated status) has ended too.
        ended = set(
            UnitRun.objects.filter(run_id=run_id, phase__in=FINISHED).values_list(
                "workflow_name", flat=True
            )
        )
        return all(
            w["spec"].get("shutdown")
            or (w.get("status") or {}).get("phase") in FINISHED
            or w["metadata"]["name"] in ended
            for w in stack.workflows(run_id)
        )

    wait_for(quiet, 60, f"run {run_id}'s step workflows to be shut down")


def _units(run_id: int) -> dict[str, UnitRun]:
    return {u.name: u for u in UnitRun.objects.filter(run_id=run_id)}


def _one_workflow_per_attempt(stack: Stack, run_id: int) -> None:
    keys = [
        (
            w["metadata"]["labels"]["portal.multisite.io/unit"],
            w["metadata"]["labels"]["portal.multisite.io/attempt"],
        )
        for w in stack.workflows(run_id)
    ]
    assert len(keys) == len(set(keys)), keys


def test_the_demo_runs_to_succeeded_across_three_sites(live: Stack, api: APIClient) -> None:
    response = api.post("/api/v1/runs/?project=eo-demo", data=DEMO, content_type="application/yaml")
    assert response.status_code == 201, response.content
    run_id = response.json()["id"]

    run = _wait_finished(live, run_id)
    assert run.status == "Succeeded", run.message
    units = _units(run_id)
    assert units["ingest"].site == "site-a"
    assert units["inference"].site == "site-c"
    # preprocess was placed at admission by the webhook: site-a has no CPU free for it and the
    # link from site-a to site-b is fast.
    assert units["preprocess"].site == "site-b"
    webhook = PlacementDecision.objects.get(unit=units["preprocess"], source="webhook")
    assert webhook.site == "site-b" and webhook.timing == "runtime"
    assert {c["site"] for c in webhook.candidates} == {"site-a", "site-b", "site-c"}
    assert all(u.phase == "Succeeded" for u in units.values())

    # inference received preprocess's output artifact, from where preprocess wrote it: a
    # pre-signed GET for exactly that object in site-b's repository.
    patches = next(a for a in units["preprocess"].outputs["artifacts"] if a["name"] == "patches")
    inference = next(
        w
        for w in live.workflows(run_id)
        if w["metadata"]["name"] == units["inference"].workflow_name
    )
    passed = {a["name"]: a for a in inference["spec"]["arguments"]["artifacts"]}
    url = passed["patches"]["http"]["url"]
    assert url.startswith(
        f"http://s3.site-b.sandbox.invalid/site-b-artifacts/{patches['s3']['key']}?"
    )

    body = api.get(f"/api/v1/runs/{run_id}/").json()
    assert body["status"] == "Succeeded"
    assert {u["name"]: u["site"] for u in body["units"]}["inference"] == "site-c"
    sources = set(PlacementDecision.objects.filter(run_id=run_id).values_list("source", flat=True))
    assert "rule" in sources


def test_a_task_delivered_twice_creates_one_step_workflow(live: Stack, user: User) -> None:
    # Stop the worker so the two deliveries race in the next one, not with the first.
    live.kill("worker", signal.SIGTERM)
    run = services.run_submit(user=user, body=_slow_demo(20), project="eo-demo")
    tasks.run_advance.delay(run.pk)
    tasks.run_advance.delay(run.pk)
    live.start("worker")
    wait_for(lambda: _units(run.pk)["ingest"].workflow_name, 60, "ingest to be submitted")
    finished = _wait_finished(live, run.pk)
    assert finished.status == "Succeeded"
    _one_workflow_per_attempt(live, run.pk)
    assert len(live.workflows(run.pk)) == 3


def test_a_worker_killed_mid_run_loses_and_duplicates_nothing(live: Stack, user: User) -> None:
    # Only the step the kill interrupts is slow: the others need no time to prove anything.
    run = services.run_submit(user=user, body=_slow_demo(60, only="ingest"), project="eo-demo")
    wait_for(lambda: _units(run.pk)["ingest"].phase == "Running", 60, "ingest running")
    live.kill("worker", signal.SIGKILL)
    live.start("worker")
    finished = _wait_finished(live, run.pk, timeout=120)
    assert finished.status == "Succeeded"
    _one_workflow_per_attempt(live, run.pk)
    assert {u.phase for u in _units(run.pk).values()} == {"Succeeded"}


def test_runs_complete_after_the_api_answers_500s_for_a_while(live: Stack, user: User) -> None:
    live.sandbox.fault("api-error", status=500, duration=4)
    run = services.run_submit(user=user, body=DEMO, project="eo-demo")
    finished = _wait_finished(live, run.pk, timeout=120)
    assert finished.status == "Succeeded"
    _one_workflow_per_attempt(live, run.pk)


def test_runs_complete_after_the_api_is_slow_for_a_while(live: Stack, user: User) -> None:
    live.sandbox.fault("api-slow", delay=4, duration=6)
    run = services.run_submit(user=user, body=DEMO, project="eo-demo")
    finished = _wait_finished(live, run.pk, timeout=120)
    assert finished.status == "Succeeded"


def test_a_site_lost_mid_run_has_its_units_placed_again(live: Stack, user: User) -> None:
    # Only the step the lost site runs is slow (it must still run when the site goes).
    run = services.run_submit(user=user, body=_slow_demo(120, only="preprocess"), project="eo-demo")
    wait_for(lambda: _units(run.pk)["preprocess"].phase == "Running", 90, "preprocess running")
    lost = _units(run.pk)["preprocess"].site
    fault = live.sandbox.fault("site-not-ready", site=lost)
    try:
        pre = wait_for(
            lambda: (u := _units(run.pk)["preprocess"]).attempt == 2 and u,
            90,
            "preprocess to be placed again",
        )
        assert pre.site != lost
        failover = PlacementDecision.objects.get(unit=pre, source="failover")
        assert failover.site == pre.site
        assert any(c["site"] == lost and not c["eligible"] for c in failover.candidates)
        # Not site-c: it reads ingest's output at site-a only through a copy at site-b, the
        # site just lost.
        assert pre.site == "site-a"
        why = {c["site"]: c["why"] for c in failover.candidates}
        assert "cannot reach the artifact repository of site-a" in why["site-c"], why["site-c"]
        # The run cannot finish in this fleet now (site-a has no CPU free for preprocess and
        # nothing else can run it): it is stopped, and nothing of it outlives the test.
    finally:
        left = WorkflowRun.objects.get(pk=run.pk)
        if left.finished_at is None:
            services.run_stop(run=left, user=user)
        # The site comes back for the module's next tests.
        live.sandbox.clear_fault(fault["id"])
    stopped = _wait_finished(live, run.pk, timeout=60)
    assert stopped.status in ("Stopped", "Failed"), stopped.status
    _left_quiet(live, run.pk)


def test_stop_shuts_down_running_step_workflows(live: Stack, user: User, api: APIClient) -> None:
    run = services.run_submit(user=user, body=_slow_demo(300), project="eo-demo")
    wait_for(lambda: _units(run.pk)["ingest"].phase == "Running", 60, "ingest running")
    response = api.post(f"/api/v1/runs/{run.pk}/stop/")
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "Stopped"

    def shut_down() -> bool:
        wf = [w for w in live.workflows(run.pk) if "ingest" in w["metadata"]["name"]]
        return bool(wf) and wf[0]["spec"].get("shutdown") == "Stop"

    wait_for(shut_down, 30, "spec.shutdown on the ingest step workflow")
    units = wait_for(
        lambda: (u := _units(run.pk)) and u["inference"].phase == "Omitted" and u,
        30,
        "the units that never started to be omitted",
    )
    assert units["preprocess"].phase == "Omitted"
    assert api.post(f"/api/v1/runs/{run.pk}/stop/").status_code == 409


def test_retry_gives_failed_units_a_new_attempt(live: Stack, user: User, api: APIClient) -> None:
    fault = live.sandbox.fault("template-fail", template="inference")
    run = services.run_submit(user=user, body=DEMO, project="eo-demo")
    failed = _wait_finished(live, run.pk)
    assert failed.status == "Failed"
    assert _units(run.pk)["inference"].phase == "Failed"
    live.sandbox.clear_fault(fault["id"])

    response = api.post(f"/api/v1/runs/{run.pk}/retry/")
    assert response.status_code == 200, response.content
    finished = _wait_finished(live, run.pk)
    assert finished.status == "Succeeded"
    inference = _units(run.pk)["inference"]
    assert inference.attempt == 2
    assert _units(run.pk)["ingest"].attempt == 1  # what succeeded is not run again


def test_resubmit_makes_a_new_run_of_the_same_manifest(
    live: Stack, user: User, api: APIClient
) -> None:
    first = services.run_submit(user=user, body=DEMO, project="eo-demo")
    _wait_finished(live, first.pk)
    response = api.post(f"/api/v1/runs/{first.pk}/resubmit/")
    assert response.status_code == 201, response.content
    second = response.json()["id"]
    assert second != first.pk
    assert WorkflowRun.objects.get(pk=second).resubmitted_from_id == first.pk
    assert _wait_finished(live, second).status == "Succeeded"


def test_an_outsider_cannot_act_on_the_run(
    live: Stack, user: User, outsider: User, api_client_for: Any
) -> None:
    run = services.run_submit(user=user, body=_slow_demo(300), project="eo-demo")
    client = api_client_for(outsider)
    assert client.get(f"/api/v1/runs/{run.pk}/").status_code == 404
    assert client.post(f"/api/v1/runs/{run.pk}/stop/").status_code == 404
    services.run_stop(run=run, user=user)
    _left_quiet(live, run.pk)


def test_a_run_whose_task_was_lost_is_started_by_the_resync(live: Stack, user: User) -> None:
    import redis
    from django.conf import settings

    live.kill("worker", signal.SIGTERM)
    run = services.run_submit(user=user, body=DEMO, project="eo-demo")
    # The broker loses the message (as a broker that was down would never have had it).
    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
    assert not UnitRun.objects.filter(run=run).exclude(workflow_name="").exists()
    live.start("worker")
    finished = _wait_finished(live, run.pk, timeout=120)
    assert finished.status == "Succeeded"
    _one_workflow_per_attempt(live, run.pk)


def test_readyz_reports_karmada(live: Stack, client: Any, settings: Any, tmp_path: Path) -> None:
    from portal.karmada.client import reset

    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json()["checks"]["karmada"] == "ok"

    dead = tmp_path / "kubeconfig"
    text = live.sandbox.kubeconfig.read_text()
    dead.write_text(text.replace(live.sandbox.url, "http://127.0.0.1:1"))
    settings.KARMADA_KUBECONFIG = str(dead)
    reset()
    response = client.get("/readyz")
    assert response.status_code == 503
    assert "unreachable" in response.json()["checks"]["karmada"].lower()


def test_with_the_webhook_down_the_fallback_policy_places_the_step(
    live: Stack, user: User, settings: Any
) -> None:
    settings.PORTAL_WEBHOOK_TOKEN = "not-the-token-karmada-sends"  # every admission is refused
    run = services.run_submit(user=user, body=DEMO, project="eo-demo")
    finished = _wait_finished(live, run.pk)
    assert finished.status == "Succeeded"
    pre = _units(run.pk)["preprocess"]
    assert pre.site in {"site-a", "site-b", "site-c"}
    assert PlacementDecision.objects.get(unit=pre).source == "fallback"


def test_a_workflow_created_directly_on_karmada_is_placed_by_the_rules(live: Stack) -> None:
    from portal.karmada import client, errors, resources

    doc = yaml.safe_load(DEMO)
    # Created with the argo CLI, say: no portal labels at all; the GPU step rules the whole.
    body = {**doc, "metadata": {"name": "direct-eo", "namespace": "portal"}}
    client.create(resources.WORKFLOW, body)

    def placed() -> str:
        wf = client.get(resources.WORKFLOW, "direct-eo")
        return str(wf["metadata"].get("labels", {}).get("portal.multisite.io/site", ""))

    site = wait_for(placed, 30, "the webhook's site label")
    # The admission queues its decision; the watcher drains the queue every second (the
    # resync, also every second here, writes it too: test_watcher.py checks the watcher alone).
    decision = wait_for(
        lambda: PlacementDecision.objects.filter(workflow_name="direct-eo").first(),
        30,
        "the webhook's queued decision to be written",
    )
    assert decision.run is None and decision.source == "webhook"
    assert decision.site == site == "site-c"  # the whole workflow needs the GPU site

    def scheduled() -> list[dict[str, Any]]:
        try:
            rb = client.get(resources.RESOURCE_BINDING, "direct-eo-workflow")
        except errors.NotFound:
            return []
        return list(rb["spec"].get("clusters") or [])

    binding = wait_for(scheduled, 30, "Karmada to schedule the workflow")
    assert binding[0]["name"] == "site-c"


EXIT_WORKFLOW = """
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  generateName: with-exit-
spec:
  entrypoint: main
  onExit: notify
  templates:
    - name: main
      dag:
        tasks:
          - name: work
            template: work
    - name: work
      container:
        image: busybox
        command: [sh, -c, "echo work"]
    - name: notify
      container:
        image: busybox
        command: [sh, -c, "echo run ended: {{workflow.status}}"]
"""


def test_on_exit_runs_after_the_units_with_the_run_status(live: Stack, user: User) -> None:
    run = services.run_submit(user=user, body=EXIT_WORKFLOW, project="eo-demo")
    finished = _wait_finished(live, run.pk)
    assert finished.status == "Succeeded", finished.message
    units = _units(run.pk)
    assert units["work"].finished_at is not None
    exit_unit = units["onExit"]
    assert exit_unit.phase == "Succeeded"
    assert exit_unit.started_at is None or exit_unit.started_at >= units["work"].finished_at
    wf = next(w for w in live.workflows(run.pk) if w["metadata"]["name"] == exit_unit.workflow_name)
    notify = next(t for t in wf["spec"]["templates"] if t["name"] == wf["spec"]["entrypoint"])
    assert notify["container"]["command"][-1] == "echo run ended: Succeeded"
