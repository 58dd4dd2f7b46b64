"""The unit's REST endpoints: detail, attempts, logs and the schema."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from rest_framework.test import APIClient

from portal.choices import UnitPhase
from portal.karmada import client
from portal.models import UnitRun, WorkflowRun
from tests.factories import PlacementDecisionFactory
from tests.portal.units.conftest import HX, LOG, failed_over

pytestmark = pytest.mark.django_db


def test_the_api_gives_every_attempt_numbered_consecutively(
    run: WorkflowRun, api_client_for: Any, scientist: User
) -> None:
    failed_over(run)
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
