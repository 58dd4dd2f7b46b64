"""The submit page's preview lists the copies the plan implies, as the REST preview does:
a GPU step at site-c reading what a step pinned to site-a writes reads a copy
made at site-b."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from tests.portal import helpers

HX = {"HTTP_HX_REQUEST": "true"}

WRITE = {
    "outputs": {"artifacts": [{"name": "data", "path": "/tmp/out.txt"}]},
    "container": {"image": "alpine:3.23", "command": ["sh", "-c", "echo x > /tmp/out.txt"]},
}


@pytest.fixture
def scientist(db: Any) -> User:
    call_command("load_demo", verbosity=0)
    helpers.pin("write", "site-a")
    return User.objects.get(username="scientist")


def test_the_preview_page_lists_the_planned_transfer_as_the_rest_preview_does(
    scientist: User,
) -> None:
    body = helpers.write_then_read(WRITE, helpers.READ_ON_GPU)
    api = APIClient()
    api.force_authenticate(scientist)
    rest = api.post("/api/v1/runs/preview/", data=body, content_type="application/yaml")
    assert rest.status_code == 200, rest.content
    (planned,) = rest.json()["transfers"]
    assert (planned["from"], planned["via"], planned["to"]) == ("site-a", "site-b", "site-c")
    client = Client()
    client.force_login(scientist)
    page = client.post(
        reverse("ui-submit-preview"), {"manifest": body, "project": "eo-demo"}, **HX
    ).content.decode()
    table = re.search(r'<table class="table transfers".*?</table>', page, re.S)
    assert table is not None, page
    cells = re.findall(r"<td[^>]*>(.*?)</td>", table.group(0), re.S)
    text = [re.sub(r"<[^>]+>", "", c).strip() for c in cells]
    assert text[:5] == ["write-copy-site-b", "write", "site-a", "site-b", "site-c"]
    assert text[7] == planned["cost"]
    assert "Planned transfers" in page


def test_a_plan_without_copies_shows_no_transfer_table(scientist: User) -> None:
    doc = yaml.safe_load(helpers.write_then_read(WRITE, helpers.READ_ON_GPU))
    del doc["spec"]["templates"][2]["container"]["resources"]  # the reader runs anywhere
    client = Client()
    client.force_login(scientist)
    page = client.post(
        reverse("ui-submit-preview"),
        {"manifest": yaml.safe_dump(doc), "project": "eo-demo"},
        **HX,
    ).content.decode()
    assert "Placement preview" in page and "Planned transfers" not in page


def test_a_transfer_s_timeline_bar_shows_its_bytes_estimated_then_moved() -> None:
    from datetime import UTC, datetime, timedelta

    from portal.templatetags.portal_ui import timeline_svg

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    bar = {
        "name": "write-copy-site-b",
        "kind": "transfer",
        "site": "site-b",
        "phase": "Running",
        "started_at": t0,
        "finished_at": None,
    }
    step = {**bar, "name": "write", "kind": "", "site": "site-a", "phase": "Succeeded"}
    estimated = {"bytes": 2**30, "measured": False}
    svg = timeline_svg([step, {**bar, "moved": estimated}], {}, t0 + timedelta(seconds=60))
    assert svg.count('class="bar-label"') == 1 and ">≈1.0 GiB</text>" in svg
    assert "1.0 GiB estimated" in svg
    moved = {"bytes": 5 * 2**20, "measured": True}
    done = {**bar, "phase": "Succeeded", "finished_at": t0 + timedelta(seconds=30), "moved": moved}
    svg = timeline_svg([step, done], {}, t0 + timedelta(seconds=60))
    assert ">5.0 MiB</text>" in svg and "5.0 MiB moved" in svg
