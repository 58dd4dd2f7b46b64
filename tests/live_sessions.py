"""``requests`` sessions acting as a user against a live server (pytest-django's
``live_server``), for the tests that go over HTTP end to end: one with the user's API token,
one logged in to the web pages through the login form (each carries the server's URL as
``.base``); and a run submitted over the API, followed to its end, with its units."""

from __future__ import annotations

import requests
from django.contrib.auth.models import User

from portal.api_tokens import api_token_create
from portal.management.commands.load_demo import DEMO_PASSWORD
from portal.models import UnitRun, WorkflowRun
from tests.fixtures_stack import wait_for


def api_session(base: str, username: str) -> requests.Session:
    """``username`` with a new API token (``Authorization: Token``; it replaces the user's
    earlier one)."""
    user = User.objects.get(username=username)
    s = requests.Session()
    s.headers["Authorization"] = f"Token {api_token_create(user=user, replace=True)}"
    s.base = base  # type: ignore[attr-defined]
    return s


def web_session(base: str, username: str, password: str = DEMO_PASSWORD) -> requests.Session:
    """``username`` logged in to the web pages through the login form, with the CSRF cookie
    and the Referer a browser sends."""
    s = requests.Session()
    s.headers["Referer"] = base + "/login/"
    s.get(f"{base}/login/", timeout=30)
    answer = s.post(
        f"{base}/login/",
        data={
            "username": username,
            "password": password,
            "csrfmiddlewaretoken": s.cookies["csrftoken"],
        },
        timeout=30,
    )
    assert answer.ok and "sessionid" in s.cookies, answer.text[:500]
    s.base = base  # type: ignore[attr-defined]
    return s


def post_run(api: requests.Session, body: str, project: str = "eo-demo") -> int:
    """POST the workflow ``body`` (YAML) as a new run of ``project`` (load_demo's by default);
    the run's id."""
    answer = api.post(
        f"{api.base}/api/v1/runs/?project={project}",  # type: ignore[attr-defined]
        data=body,
        headers={"Content-Type": "application/yaml"},
        timeout=60,
    )
    assert answer.status_code == 201, answer.text
    return int(answer.json()["id"])


def units(run_id: int) -> dict[str, UnitRun]:
    """The run's units by name."""
    return {u.name: u for u in UnitRun.objects.filter(run_id=run_id)}


def finished_run(run_id: int, seconds: float = 120) -> WorkflowRun:
    """The run once it has finished (the live stack's worker and watcher drive it); if it does
    not, the failure says where each unit stands."""

    def done() -> WorkflowRun | None:
        run = WorkflowRun.objects.get(pk=run_id)
        return run if run.finished_at is not None else None

    try:
        found = wait_for(done, seconds, "the run to finish")
    except AssertionError as exc:
        where = {n: (u.site, u.phase, u.reason[:200], u.message) for n, u in units(run_id).items()}
        raise AssertionError(f"{exc}; units: {where}") from None
    assert found is not None
    return found
