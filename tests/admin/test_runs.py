"""The admin shows runs, units and their decisions read-only."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from portal.models import WorkflowRun
from tests.admin.helpers import changelist_names
from tests.factories import (
    PlacementDecisionFactory,
    UnitRunFactory,
    WorkflowRunFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(scientist: User, project) -> WorkflowRun:
    run = WorkflowRunFactory(name="eo-run-1", project=project, owner=scientist, status="Pending")
    PlacementDecisionFactory(
        unit=UnitRunFactory(run=run, name="ingest", planned_site="site-op"), reason="data locality"
    )
    return run


def test_the_run_page_shows_units_and_decisions_read_only(superuser_admin: Client, run):
    response = superuser_admin.get(f"/admin/portal/workflowrun/{run.pk}/change/")
    assert response.status_code == 200
    content = response.content.decode()
    assert "ingest" in content
    assert "data locality" in content
    assert 'name="_save"' not in content


@pytest.mark.parametrize("model", ["workflowrun", "unitrun", "placementdecision", "runevent"])
def test_runs_cannot_be_added_from_the_admin(superuser_admin: Client, model: str):
    assert superuser_admin.get(f"/admin/portal/{model}/add/").status_code == 403


def test_runs_cannot_be_changed_or_deleted_from_the_admin(superuser_admin: Client, run):
    url = f"/admin/portal/workflowrun/{run.pk}/"
    response = superuser_admin.post(f"{url}change/", {"name": "renamed", "status": "Stopped"})
    assert response.status_code == 403
    assert superuser_admin.post(f"{url}delete/", {"post": "yes"}).status_code == 403
    run.refresh_from_db()
    assert (run.name, run.status) == ("eo-run-1", "Pending")


def test_an_operator_views_runs(operator_admin: Client, run):
    assert changelist_names(operator_admin.get("/admin/portal/workflowrun/")) == ["eo-run-1"]
