"""A browser session (no API key) submits over REST as a token does: Django's CSRF check, which
DRF runs for a session, must not consume the body before the view reads it."""

from __future__ import annotations

import re
from typing import Any

import pytest
import requests
from django.core.management import call_command

from portal.models import WorkflowRun, WorkflowTemplate
from tests.factories import PASSWORD
from tests.portal.helpers import EO_PIPELINE


@pytest.fixture
def session(live_server: Any, transactional_db: Any) -> requests.Session:
    """The demo's scientist, logged in through the login form, with the CSRF cookie set."""
    call_command("load_demo", verbosity=0)
    from django.contrib.auth.models import User

    user = User.objects.get(username="scientist")
    user.set_password(PASSWORD)
    user.save()
    browser = requests.Session()
    page = browser.get(f"{live_server.url}/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token, page.text[:300]
    answer = browser.post(
        f"{live_server.url}/login/",
        data={"csrfmiddlewaretoken": token.group(1), "username": "scientist", "password": PASSWORD},
        headers={"Referer": f"{live_server.url}/login/"},
        allow_redirects=False,
    )
    assert answer.status_code == 302, answer.text[:300]
    return browser


def headers(browser: requests.Session, url: str, content_type: str) -> dict[str, str]:
    return {
        "X-CSRFToken": browser.cookies["csrftoken"],
        "Content-Type": content_type,
        "Referer": url,
    }


@pytest.mark.parametrize("content_type", ["application/yaml", "application/x-www-form-urlencoded"])
def test_a_logged_in_browser_submits_a_workflow_with_its_csrf_token(
    live_server: Any, session: requests.Session, content_type: str
) -> None:
    """``curl -d`` sends the form content type: the body is still the workflow."""
    url = f"{live_server.url}/api/v1/runs/?project=eo-demo"
    answer = session.post(
        url, data=EO_PIPELINE.read_bytes(), headers=headers(session, url, content_type)
    )
    assert answer.status_code == 201, answer.text[:500]
    assert WorkflowRun.objects.filter(name=answer.json()["name"]).exists()


def test_a_logged_in_browser_previews_and_stops_with_its_csrf_token(
    live_server: Any, session: requests.Session
) -> None:
    url = f"{live_server.url}/api/v1/runs/preview/?project=eo-demo"
    answer = session.post(
        url, data=EO_PIPELINE.read_bytes(), headers=headers(session, url, "application/yaml")
    )
    assert answer.status_code == 200, answer.text[:500]
    assert {u["name"] for u in answer.json()["units"]} >= {"ingest", "inference"}
    url = f"{live_server.url}/api/v1/runs/?project=eo-demo"
    run = session.post(
        url, data=EO_PIPELINE.read_bytes(), headers=headers(session, url, "application/yaml")
    ).json()
    url = f"{live_server.url}/api/v1/runs/{run['id']}/stop/"
    answer = session.post(
        url, data=b'{"strategy": "Bogus"}', headers=headers(session, url, "application/json")
    )
    # The body was read: the strategy is refused by name, not taken as the default Stop.
    assert answer.status_code == 400, answer.text[:500]
    assert "strategy" in answer.text


def test_a_logged_in_browser_without_the_csrf_token_is_refused(
    live_server: Any, session: requests.Session
) -> None:
    url = f"{live_server.url}/api/v1/runs/?project=eo-demo"
    answer = session.post(
        url, data=EO_PIPELINE.read_bytes(), headers={"Content-Type": "application/yaml"}
    )
    assert answer.status_code == 403, answer.text[:300]
    assert "CSRF" in answer.text
    assert not WorkflowRun.objects.exists()


def test_a_logged_in_browser_adds_a_workflow_template_with_its_csrf_token(
    live_server: Any, session: requests.Session
) -> None:
    body = (
        "apiVersion: argoproj.io/v1alpha1\nkind: WorkflowTemplate\nmetadata: {name: tools}\n"
        "spec:\n  templates:\n  - name: echo\n    container: {image: busybox}\n"
    )
    url = f"{live_server.url}/api/v1/workflow-templates/?project=eo-demo"
    answer = session.post(url, data=body, headers=headers(session, url, "application/yaml"))
    assert answer.status_code == 201, answer.text[:500]
    assert WorkflowTemplate.objects.filter(name="tools").exists()
