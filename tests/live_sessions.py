"""``requests`` sessions acting as a user against a live server (pytest-django's
``live_server``), for the tests that go over HTTP end to end: one with the user's API token,
one logged in to the web pages through the login form. Each carries the server's URL as
``.base``."""

from __future__ import annotations

import requests
from django.contrib.auth.models import User

from portal.api_tokens import api_token_create

PASSWORD = "portal-demo"  # load_demo's password


def api_session(base: str, username: str) -> requests.Session:
    """``username`` with a new API token (``Authorization: Token``; it replaces the user's
    earlier one)."""
    user = User.objects.get(username=username)
    s = requests.Session()
    s.headers["Authorization"] = f"Token {api_token_create(user=user, replace=True)}"
    s.base = base  # type: ignore[attr-defined]
    return s


def web_session(base: str, username: str, password: str = PASSWORD) -> requests.Session:
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
