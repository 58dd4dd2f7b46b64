"""API tokens: checked against the database once per key and process for a few seconds,
forgotten at once when this process changes a token or a user, never remembered when wrong."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from portal.api import authentication
from tests.factories import UserFactory


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    authentication.forget_tokens()
    yield
    authentication.forget_tokens()


@pytest.fixture
def token(db: Any) -> Token:
    return Token.objects.create(user=UserFactory(username="component"))


def get(key: str) -> tuple[int, list[str]]:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    with CaptureQueriesContext(connection) as queries:
        status = client.get("/api/v1/runs/").status_code
    return status, [q["sql"] for q in queries if '"authtoken_token"' in q["sql"]]


def test_a_key_is_read_once_then_remembered(token: Token) -> None:
    status, reads = get(token.key)
    assert status == 200 and len(reads) == 1
    status, reads = get(token.key)
    assert status == 200 and reads == []


def test_a_token_deleted_or_a_user_deactivated_here_stops_working_at_once(token: Token) -> None:
    assert get(token.key)[0] == 200
    token.user.is_active = False
    token.user.save()
    assert get(token.key)[0] == 401
    token.user.is_active = True
    token.user.save()
    assert get(token.key)[0] == 200
    token.delete()
    assert get(token.key)[0] == 401


def test_a_token_deleted_elsewhere_works_here_until_the_cache_time_ends(
    token: Token, settings: Any
) -> None:
    settings.PORTAL_TOKEN_CACHE_SECONDS = 0.5
    assert get(token.key)[0] == 200
    Token.objects.filter(pk=token.pk)._raw_delete(connection.alias)  # no signal: another process
    assert get(token.key)[0] == 200
    time.sleep(0.6)
    assert get(token.key)[0] == 401


def test_wrong_keys_are_never_remembered(token: Token) -> None:
    for _ in range(2):
        status, reads = get("0" * 40)
        assert status == 401 and len(reads) == 1


def test_no_cache_time_reads_every_time(token: Token, settings: Any) -> None:
    settings.PORTAL_TOKEN_CACHE_SECONDS = 0
    for _ in range(2):
        status, reads = get(token.key)
        assert status == 200 and len(reads) == 1
