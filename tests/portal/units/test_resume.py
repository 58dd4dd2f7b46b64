"""A suspended step: waiting for approval, and resume over REST and from the page."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from rest_framework.test import APIClient

from portal.karmada import client, proxy
from portal.models import UnitRun, WorkflowRun
from tests.portal.helpers import make_run
from tests.portal.units.conftest import HX, panel_url

pytestmark = pytest.mark.django_db


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
