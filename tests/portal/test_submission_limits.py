"""Submissions per project are rate-limited: past ``PORTAL_SUBMISSIONS_PER_PROJECT`` in a
window, ``POST /api/v1/runs/`` answers 429 with ``Retry-After`` and an error naming the limit,
and stores nothing; other projects are not held back. Over the API (token auth), with the
Redis-backed cache every web process shares."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.management import call_command
from rest_framework.test import APIClient

from portal.models import WorkflowRun
from sites.models import Project

DEMO = (Path(__file__).resolve().parents[2] / "examples" / "eo-pipeline.yaml").read_text()
WINDOW = 3593  # a window of this test's own: no other test's count lands in it


@pytest.fixture
def limited(db: Any, settings: Any, api_client_for: Any) -> Any:
    call_command("load_demo", verbosity=0)
    settings.PORTAL_SUBMISSIONS_PER_PROJECT = 2
    settings.PORTAL_SUBMISSION_WINDOW_SECONDS = WINDOW
    user = User.objects.get(username="scientist")
    other = Project.objects.create(name="other-project")
    other.members.add(user)
    start = int(time.time() // WINDOW) * WINDOW
    keys = [
        f"submissions:project:{p.pk}:{s}"
        for p in Project.objects.all()
        for s in (start, start + WINDOW)
    ]
    cache.delete_many(keys)
    yield api_client_for(user)
    cache.delete_many(keys)


def submit(client: APIClient, project: str) -> Any:
    return client.post(
        f"/api/v1/runs/?project={project}", data=DEMO, content_type="application/yaml"
    )


def test_a_project_past_its_limit_gets_429_with_retry_after_naming_the_limit(
    limited: APIClient,
) -> None:
    assert submit(limited, "eo-demo").status_code == 201
    assert submit(limited, "eo-demo").status_code == 201
    refused = submit(limited, "eo-demo")
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= WINDOW
    (error,) = refused.json()["errors"]
    assert error["path"] == "project"
    assert "limit of 2 submissions per 3593 s" in error["message"]
    assert "PORTAL_SUBMISSIONS_PER_PROJECT" in error["message"]
    assert WorkflowRun.objects.filter(project__name="eo-demo").count() == 2  # nothing half-stored
    # Another project of the same user is not held back by this one.
    assert [submit(limited, "other-project").status_code for _ in range(3)] == [201, 201, 429]


def test_resubmitting_counts_against_the_same_limit(limited: APIClient) -> None:
    run = submit(limited, "eo-demo").json()
    assert submit(limited, "eo-demo").status_code == 201
    again = limited.post(f"/api/v1/runs/{run['id']}/resubmit/")
    assert again.status_code == 429
    assert int(again["Retry-After"]) >= 1


def test_a_limit_of_zero_turns_it_off(limited: APIClient, settings: Any) -> None:
    settings.PORTAL_SUBMISSIONS_PER_PROJECT = 0
    assert [submit(limited, "eo-demo").status_code for _ in range(4)] == [201] * 4
