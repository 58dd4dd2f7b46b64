"""API tokens: stored as digests only and shown once; sent as ``Token`` or ``Bearer``; checked
against the database once per key and process for a few seconds, forgotten at once when this
process changes a token or a user, never remembered when wrong."""

from __future__ import annotations

import importlib
import io
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.apps import apps
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from portal.api import authentication
from portal.api_tokens import api_token_create
from portal.models import ApiToken
from tests.factories import UserFactory

TABLE = ApiToken._meta.db_table


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    authentication.forget_tokens()
    yield
    authentication.forget_tokens()


@dataclass
class Issued:
    key: str
    token: ApiToken

    @property
    def user(self) -> Any:
        return self.token.user

    def delete(self) -> None:
        self.token.delete()


@pytest.fixture
def token(db: Any) -> Issued:
    user = UserFactory(username="component")
    key = api_token_create(user=user)
    return Issued(key, ApiToken.objects.get(user=user))


def get(key: str, keyword: str = "Token") -> tuple[int, list[str]]:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"{keyword} {key}")
    with CaptureQueriesContext(connection) as queries:
        status = client.get("/api/v1/runs/").status_code
    return status, [q["sql"] for q in queries if f'"{TABLE}"' in q["sql"]]


def test_a_key_is_read_once_then_remembered(token: Issued) -> None:
    status, reads = get(token.key)
    assert status == 200 and len(reads) == 1
    status, reads = get(token.key)
    assert status == 200 and reads == []


def test_a_token_deleted_or_a_user_deactivated_here_stops_working_at_once(token: Issued) -> None:
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
    token: Issued, settings: Any
) -> None:
    settings.PORTAL_TOKEN_CACHE_SECONDS = 0.5
    assert get(token.key)[0] == 200
    # No signal: as if another process deleted it.
    ApiToken.objects.filter(pk=token.token.pk)._raw_delete(connection.alias)
    assert get(token.key)[0] == 200
    time.sleep(0.6)
    assert get(token.key)[0] == 401


def test_wrong_keys_are_never_remembered(token: Issued) -> None:
    for _ in range(2):
        status, reads = get("0" * 40)
        assert status == 401 and len(reads) == 1


def test_no_cache_time_reads_every_time(token: Issued, settings: Any) -> None:
    settings.PORTAL_TOKEN_CACHE_SECONDS = 0
    for _ in range(2):
        status, reads = get(token.key)
        assert status == 200 and len(reads) == 1


def test_the_table_holds_no_usable_key(token: Issued) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {TABLE}")
        rows = cursor.fetchall()
    assert rows and not any(token.key in str(value) for row in rows for value in row)
    # What is stored does not authenticate: neither the digest nor the prefix is a key.
    assert get(token.token.digest)[0] == 401
    assert get(token.token.prefix)[0] == 401
    assert get(token.key)[0] == 200


def test_bearer_is_taken_as_well_as_token(token: Issued) -> None:
    assert get(token.key, "Bearer")[0] == 200
    assert get(token.key, "bearer")[0] == 200
    assert get("0" * 40, "Bearer")[0] == 401
    assert get(token.key, "Basic")[0] in (401, 403)  # not a token scheme: no credentials


def test_drf_create_token_prints_the_key_once(db: Any) -> None:
    UserFactory(username="robot")
    out = io.StringIO()
    call_command("drf_create_token", "robot", stdout=out)
    line = out.getvalue().strip()
    assert line.startswith("Generated token ") and line.endswith(" for user robot")
    key = line.split()[2]
    assert get(key)[0] == 200
    # Asked again, it cannot show the key (it is not stored): it says how to get a new one.
    with pytest.raises(CommandError, match=r"cannot be shown again.*-r robot"):
        call_command("drf_create_token", "robot", stdout=io.StringIO())
    out = io.StringIO()
    call_command("drf_create_token", "-r", "robot", stdout=out)
    new = out.getvalue().split()[2]
    assert new != key and get(new)[0] == 200 and get(key)[0] == 401
    with pytest.raises(CommandError, match="user nobody does not exist"):
        call_command("drf_create_token", "nobody")


def test_clear_keys_from_drf_authtoken_are_migrated_to_digests(db: Any) -> None:
    user = UserFactory(username="legacy")
    old_key = "5f0c1e9a8b7d6c5e4f3a2b1c0d9e8f7a6b5c4d3e"
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, "
            "created timestamptz NOT NULL, user_id integer NOT NULL)"
        )
        cursor.execute("INSERT INTO authtoken_token VALUES (%s, now(), %s)", [old_key, user.pk])
    migration = importlib.import_module("portal.migrations.0013_web_hashed_api_tokens")
    with connection.schema_editor() as editor:
        migration.hash_clear_keys(apps, editor)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM authtoken_token")
        assert cursor.fetchone()[0] == 0  # no clear key left
    assert ApiToken.objects.get(user=user).prefix == old_key[:8]
    assert get(old_key)[0] == 200  # the client's key still works
