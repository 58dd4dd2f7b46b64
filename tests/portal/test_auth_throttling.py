"""In Django: the webhook token is redacted from Django's request
logs, and failed logins and API tokens are throttled per user and per address."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client
from rest_framework.test import APIClient

from portal import throttling
from portal.logredact import redact

TOKEN = "django-log-token-4b8e2f"


# --- item 6 -----------------------------------------------------------------------------------


def test_django_request_log_lines_carry_no_webhook_token(
    client: Client, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.PORTAL_WEBHOOK_TOKEN = TOKEN
    with caplog.at_level(logging.INFO):
        wrong = client.post("/webhooks/placement/wrong-one-9d1a/", b"{}", "application/json")
        bad = client.post(f"/webhooks/placement/{TOKEN}/", b"not json", "application/json")
    assert (wrong.status_code, bad.status_code) == (403, 400)
    lines = [r for r in caplog.records if r.name == "django.request"]
    assert len(lines) == 2  # Forbidden and Bad Request, each with the path...
    assert all("/webhooks/placement/[redacted]/" in r.getMessage() for r in lines)
    assert TOKEN not in caplog.text  # ...and no token
    assert "wrong-one-9d1a" not in caplog.text


def test_runserver_request_lines_carry_no_webhook_token() -> None:
    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger = logging.getLogger("django.server")
    handler = Collect()
    logger.addHandler(handler)
    try:
        # What django.core.servers.basehttp.WSGIRequestHandler.log_message writes.
        logger.info(
            '"%s" %s %s',
            f"POST /webhooks/placement/{TOKEN}/ HTTP/1.1",
            "200",
            "512",
            extra={"request": None, "server_time": "now", "status_code": 200},
        )
    finally:
        logger.removeHandler(handler)
    assert seen == ['"POST /webhooks/placement/[redacted]/ HTTP/1.1" 200 512']


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("/webhooks/placement/abc/", "/webhooks/placement/[redacted]/"),
        ("/webhooks/placement/abc", "/webhooks/placement/[redacted]"),
        (
            "POST /webhooks/placement/abc?x=1 HTTP/1.1",
            "POST /webhooks/placement/[redacted]?x=1 HTTP/1.1",
        ),
        (
            "https://p.example/webhooks/placement/a.b-c_d/ x",
            "https://p.example/webhooks/placement/[redacted]/ x",
        ),
        ("/webhooks/placement/", "/webhooks/placement/"),
        ("POST /webhooks/placement/ HTTP/1.1", "POST /webhooks/placement/ HTTP/1.1"),
        ("/api/v1/runs/", "/api/v1/runs/"),
    ],
)
def test_redact(line: str, expected: str) -> None:
    assert redact(line) == expected


# --- item 10 ----------------------------------------------------------------------------------


@pytest.fixture
def limits(settings: Any) -> Iterator[str]:
    """Small limits, and an address of this test's own (counts live in Redis)."""
    settings.PORTAL_AUTH_FAILURES_PER_USER = 3
    settings.PORTAL_AUTH_FAILURES_PER_ADDRESS = 5
    settings.PORTAL_AUTH_FAILURE_WINDOW_SECONDS = 60
    address = f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"
    yield address
    cache.delete_many(
        [throttling._key("addr", address), throttling._key("addr", address) + ":ends"]
    )


def test_the_cache_is_shared_between_processes(settings: Any) -> None:
    assert settings.CACHES["default"]["BACKEND"].endswith("RedisCache")


def login(client: Client, address: str, username: str, password: str) -> Any:
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


def test_failed_logins_are_throttled_per_user_and_address(
    client: Client, limits: str, django_user_model: Any
) -> None:
    name = f"victim-{uuid.uuid4().hex[:8]}"
    django_user_model.objects.create_user(name, password="right-password-123")
    for _ in range(3):  # one address guessing one user's password
        assert login(client, limits, name, "wrong").status_code == 200
    refused = login(client, limits, name, "right-password-123")
    assert refused.status_code == 429  # brute force stops, even at the right password
    assert int(refused["Retry-After"]) > 0
    assert "Too many failed attempts" in refused.content.decode()
    other = f"bystander-{uuid.uuid4().hex[:8]}"
    django_user_model.objects.create_user(other, password="right-password-123")
    assert login(client, limits, other, "right-password-123").status_code == 302
    throttling.reset_user(limits, name)


def test_a_strangers_failures_do_not_lock_the_real_user_out(
    client: Client, limits: str, django_user_model: Any
) -> None:
    name = f"victim-{uuid.uuid4().hex[:8]}"
    django_user_model.objects.create_user(name, password="right-password-123")
    stranger, owner = limits, limits + "7"
    for _ in range(4):  # past the limit, from the stranger's address
        login(client, stranger, name, "guess")
    assert login(client, stranger, name, "guess").status_code == 429
    # The real user, from their own address, logs in with the right password.
    assert login(client, owner, name, "right-password-123").status_code == 302
    # ...and the stranger is still throttled.
    assert login(client, stranger, name, "right-password-123").status_code == 429
    throttling.reset_user(stranger, name)


def test_failed_logins_are_throttled_per_address(
    client: Client, limits: str, django_user_model: Any
) -> None:
    for i in range(5):  # five usernames, one address
        assert login(client, limits, f"nobody-{i}-{uuid.uuid4().hex[:6]}", "x").status_code == 200
    django_user_model.objects.create_user("addr-user", password="right-password-123")
    assert login(client, limits, "addr-user", "right-password-123").status_code == 429
    admin = client.post(
        "/admin/login/", {"username": "addr-user", "password": "x"}, REMOTE_ADDR=limits
    )
    assert admin.status_code == 429  # the admin's login counts the same


def test_wrong_api_tokens_are_throttled_per_address(
    limits: str, scientist_api: APIClient, scientist: Any
) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token-0000")
    for _ in range(5):
        assert client.get("/api/v1/sites/", REMOTE_ADDR=limits).status_code == 401
    refused = client.get("/api/v1/sites/", REMOTE_ADDR=limits)
    assert refused.status_code == 429
    assert "Too many failed attempts" in refused.json()["detail"]
    assert int(refused["Retry-After"]) > 0
    # Even a right token from that address waits; other addresses are not affected.
    assert scientist_api.get("/api/v1/sites/", REMOTE_ADDR=limits).status_code == 429
    assert scientist_api.get("/api/v1/sites/", REMOTE_ADDR="10.255.0.1").status_code == 200


def test_a_throttled_login_does_not_check_the_password(
    client: Client, limits: str, monkeypatch: pytest.MonkeyPatch, db: Any
) -> None:
    for i in range(5):
        login(client, limits, f"nobody-{i}-{uuid.uuid4().hex[:6]}", "x")
    checked: list[Any] = []
    monkeypatch.setattr("django.contrib.auth.forms.authenticate", lambda *a, **k: checked.append(k))
    assert login(client, limits, "someone", "x").status_code == 429
    assert checked == []
