"""The log views read a kept attempt from the database alone once its step workflow is gone:
every pod, headed as a live read heads them; a container that was not kept, a pod whose log
the site no longer gave, and an attempt kept only in part each say why; a keeping cut short
(no ``kept_at``) is not read; people outside the run's project see nothing of it. Karmada is
not configured here: a read that went to it would fail these tests."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from portal.choices import RunStatus, UnitPhase
from portal.models import KeptAttempt, KeptLog, UnitRun, WorkflowRun
from tests.portal.helpers import make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(scientist: User, project: Any, settings: Any) -> WorkflowRun:
    settings.KARMADA_KUBECONFIG = ""
    run = make_run(
        scientist,
        project=project,
        status=RunStatus.SUCCEEDED,
        units=[("fan", "site-b", UnitPhase.SUCCEEDED, [])],
    )
    unit = UnitRun.objects.get(run=run, name="fan")
    UnitRun.objects.filter(pk=unit.pk).update(
        workflow_name=f"{run.name}-fan-1", workflow_deleted_at=timezone.now()
    )
    kept = KeptAttempt.objects.create(
        unit=unit,
        attempt=1,
        workflow=f"{run.name}-fan-1",
        site="site-b",
        phase="Succeeded",
        pods=[
            {
                "pod": "pod-b",
                "node": "fan(1)",
                "template": "t",
                "phase": "Succeeded",
                "containers": ["main"],
            },
            {
                "pod": "pod-a",
                "node": "fan(0)",
                "template": "t",
                "phase": "Succeeded",
                "containers": ["main"],
            },
            {
                "pod": "pod-c",
                "node": "fan(2)",
                "template": "t",
                "phase": "Failed",
                "containers": [],
                "note": "the site no longer gave this pod's log (404)",
            },
        ],
        kept_at=timezone.now(),
    )
    for pod, text in (("pod-a", b"a1\na2\n"), ("pod-b", b"b1\nb2\nb3")):
        KeptLog.objects.create(kept=kept, pod=pod, container="main", content=text, size=len(text))
    return run


def logs_url(run: WorkflowRun, query: str = "") -> str:
    return f"/api/v1/runs/{run.pk}/units/fan/logs/{query}"


def test_every_kept_pod_is_served_headed_by_its_name(
    run: WorkflowRun, api_client_for: Any, scientist: User
) -> None:
    answer = api_client_for(scientist).get(logs_url(run))
    assert answer.status_code == 200
    assert b"".join(answer.streaming_content) == (
        b"==> pod-a (fan(0)) <==\na1\na2\n"
        b"==> pod-b (fan(1)) <==\nb1\nb2\nb3"
        b"==> pod-c (fan(2)) <==\n"
        b"[Logs not available: the site no longer gave this pod's log (404)]\n"
    )
    one = api_client_for(scientist).get(logs_url(run, "?pod=pod-b&tail=2"))
    assert one.status_code == 200 and one.content == b"b2\nb3"


def test_a_container_not_kept_says_which_were(
    run: WorkflowRun, api_client_for: Any, scientist: User
) -> None:
    answer = api_client_for(scientist).get(logs_url(run, "?pod=pod-a&container=wait"))
    assert answer.status_code == 404
    assert answer.json()["detail"] == (
        "Logs not available: the step workflow is deleted and the portal kept the log of "
        "main only, not of wait."
    )


def test_a_keeping_cut_short_is_not_read(
    run: WorkflowRun, api_client_for: Any, scientist: User
) -> None:
    KeptAttempt.objects.filter(unit__run=run).update(kept_at=None)
    answer = api_client_for(scientist).get(logs_url(run))
    # Read from Karmada as before, which is not configured here.
    assert answer.status_code == 404
    assert "a1" not in answer.json()["detail"]
    assert "Karmada" in answer.json()["detail"]


def test_the_panel_and_the_argo_face_read_the_kept_copy(
    run: WorkflowRun, client_for: Any, api_key_for: Any, scientist: User, client: Any
) -> None:
    panel = (
        client_for(scientist)
        .get(f"/runs/{run.pk}/units/fan/logs/", HTTP_HX_REQUEST="true")
        .content.decode()
    )
    assert "kept by the portal when the step workflow was deleted" in panel
    assert "a1\na2" in panel and "b1\nb2\nb3" in panel
    assert "the site no longer gave this pod&#x27;s log (404)" in panel
    argo = client.get(
        f"/argo/api/v1/workflows/{run.project.name}/{run.name}/log",
        {"logOptions.container": "main", "grep": "2"},
        HTTP_AUTHORIZATION=f"Bearer {api_key_for(scientist)}",
    )
    assert argo.status_code == 200
    lines = b"".join(argo.streaming_content).decode().splitlines()
    assert lines == [
        '{"result":{"content":"a2","podName":"pod-a"}}',
        '{"result":{"content":"b2","podName":"pod-b"}}',
    ]


def test_people_outside_the_project_see_nothing_of_it(
    run: WorkflowRun, api_client_for: Any, outsider: User
) -> None:
    assert api_client_for(outsider).get(logs_url(run)).status_code == 404
