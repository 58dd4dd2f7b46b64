"""The pages a person meets off the main path: a 404 that is the portal's (also in the demo,
which runs with DEBUG on), the icon, and the admin's title."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

pytestmark = pytest.mark.django_db

DEBUG_PAGE = "you have <code>DEBUG = True</code>"


@pytest.fixture
def demo_settings(settings: Any) -> Any:
    settings.DEBUG = True
    return settings


def test_an_unknown_address_in_the_demo_is_the_portals_plain_404_page(
    demo_settings: Any, client_for: Any, scientist: User
) -> None:
    for client in (Client(), client_for(scientist)):
        answer = client.get("/no/such/page/")
        assert answer.status_code == 404
        page = answer.content.decode()
        assert "Page not found" in page and "/no/such/page/" in page
        assert DEBUG_PAGE not in page and "URLconf" not in page


def test_a_run_that_is_not_yours_in_the_demo_is_the_plain_404_page(
    demo_settings: Any, client_for: Any, scientist: User
) -> None:
    answer = client_for(scientist).get("/runs/987654/")
    assert answer.status_code == 404
    assert "Page not found" in answer.content.decode()
    assert DEBUG_PAGE not in answer.content.decode()


def test_an_address_missing_its_slash_is_still_redirected(
    demo_settings: Any, client_for: Any, scientist: User
) -> None:
    answer = client_for(scientist).get("/fleet")
    assert answer.status_code == 301 and answer["Location"] == "/fleet/"


def test_an_api_404_stays_json(demo_settings: Any, scientist_api: Any) -> None:
    answer = scientist_api.get("/api/v1/runs/987654/")
    assert answer.status_code == 404
    assert "detail" in answer.json()


def test_the_portal_has_an_icon(client_for: Any, scientist: User, superuser: User) -> None:
    answer = Client().get("/favicon.ico")
    assert answer.status_code == 302 and answer["Location"].endswith(".svg")
    for page in (client_for(scientist).get("/runs/"), client_for(superuser).get("/admin/")):
        assert 'rel="icon"' in page.content.decode()


def test_the_admin_is_titled_with_the_portals_name(client_for: Any, superuser: User) -> None:
    page = client_for(superuser).get("/admin/").content.decode()
    assert "Multi-site workflow portal: administration" in page
    assert "Django administration" not in page and "Django site admin" not in page
