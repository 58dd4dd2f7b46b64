"""The preview (and the plan a submission stores) knows of the datasets the API shows the
run's project: its own and the fleet-wide ones, never another project's name, size, replicas
or residency. Over REST as an ordinary member of ``eo``, with ``climate``'s dataset in the
inventory."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.conf import settings
from django.urls import reverse
from rest_framework.test import APIClient

from sites.models import Site
from tests.factories import DatasetFactory, DatasetReplicaFactory, ProjectFactory, SiteFactory

pytestmark = pytest.mark.django_db

GB = 2**30


@pytest.fixture
def inventory(project: Any) -> dict[str, Any]:
    north = SiteFactory(name="site-north", region="eu-north")
    west = SiteFactory(name="site-west", region="us-west")
    climate = ProjectFactory(name="climate")
    for name, owner, uri, site in (
        ("climate-secret", climate, "s3://climate-private/runs/", north),
        ("eo-scenes", project, "s3://eo-bucket/scenes/", north),
        ("public-dem", None, "s3://open/dem/", west),
    ):
        ds = DatasetFactory(
            name=name, project=owner, uri_prefix=uri, residency=[site.region], bytes=50 * GB
        )
        DatasetReplicaFactory(dataset=ds, site=site, uri=f"{uri}replica/", bytes=50 * GB)
    return {"north": north, "west": west}


def reads(uri: str, named: str | None = None) -> dict[str, Any]:
    annotations = {f"{settings.PORTAL_LABEL_DOMAIN}/datasets": named} if named else {}
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "probe-"},
        "spec": {
            "entrypoint": "probe",
            "arguments": {"parameters": [{"name": "input", "value": uri}]},
            "templates": [
                {
                    "name": "probe",
                    "metadata": {"annotations": annotations},
                    "inputs": {"parameters": [{"name": "input"}]},
                    "container": {"image": "alpine", "args": ["{{inputs.parameters.input}}"]},
                }
            ],
        },
    }


def preview(client: APIClient, body: dict[str, Any]) -> Any:
    answer = client.post(
        "/api/v1/runs/preview/?project=eo", json.dumps(body), content_type="application/json"
    )
    assert answer.status_code == 200, answer.content
    return answer.json()


def test_another_projects_dataset_is_unknown_to_the_preview(
    scientist_api: APIClient, inventory: dict[str, Site]
) -> None:
    """The reproducer: a member named another project's dataset, or a URI under its prefix,
    and the preview told its name, where its replicas are, its size and its residency."""
    for body in (
        reads("s3://climate-private/runs/2026/"),
        reads("anything", named="climate-secret"),
    ):
        plan = preview(scientist_api, body)
        text = json.dumps(plan)
        for secret in ("climate-secret", "eu-north", "50.0 GiB", "50 GiB", "residency"):
            assert secret not in text, secret
        (unit,) = plan["units"]
        # It is planned as a unit that reads nothing registered: both sites eligible, no
        # bytes to move, "no input data".
        assert {c["site"] for c in unit["candidates"] if c["eligible"]} == {
            "site-north",
            "site-west",
        }
        assert all(c["bytes_to_move"] == 0 for c in unit["candidates"])
        assert all("no input data" in c["why"] for c in unit["candidates"])


def test_the_projects_own_and_fleet_wide_datasets_still_bind_and_attract(
    scientist_api: APIClient, inventory: dict[str, Site]
) -> None:
    (own,) = preview(scientist_api, reads("s3://eo-bucket/scenes/tile-1"))["units"]
    assert own["site"] == "site-north" and "eo-scenes" in json.dumps(own["candidates"])
    west = next(c for c in own["candidates"] if c["site"] == "site-west")
    assert not west["eligible"] and "eo-scenes must stay in eu-north" in west["why"]
    (shared,) = preview(scientist_api, reads("s3://open/dem/n47"))["units"]
    assert shared["site"] == "site-west" and "public-dem" in json.dumps(shared["candidates"])


def test_the_stored_plan_of_a_submission_is_scoped_too(
    scientist_api: APIClient, inventory: dict[str, Site]
) -> None:
    answer = scientist_api.post(
        "/api/v1/runs/?project=eo",
        json.dumps(reads("s3://climate-private/runs/2026/")),
        content_type="application/json",
    )
    assert answer.status_code == 201, answer.content
    decisions = scientist_api.get(f"/api/v1/runs/{answer.json()['id']}/decisions/").json()
    text = json.dumps(decisions) + json.dumps(answer.json())
    assert "climate-secret" not in text and "eu-north" not in text


def test_fleet_staff_see_the_dataset_in_that_projects_preview(
    staff_api: APIClient, inventory: dict[str, Site]
) -> None:
    answer = staff_api.post(
        "/api/v1/runs/preview/?project=climate",
        json.dumps(reads("s3://climate-private/runs/2026/")),
        content_type="application/json",
    )
    assert answer.status_code == 200, answer.content
    (unit,) = answer.json()["units"]
    assert unit["site"] == "site-north" and "climate-secret" in json.dumps(unit["candidates"])


def test_the_submit_pages_preview_is_scoped_too(
    client_for: Any, scientist: Any, project: Any, inventory: dict[str, Any]
) -> None:
    page = client_for(scientist).post(
        reverse("ui-submit-preview"),
        {"manifest": json.dumps(reads("s3://climate-private/runs/2026/")), "project": project.name},
    )
    assert page.status_code == 200
    body = page.content.decode()
    assert "no input data" in body
    assert "climate-secret" not in body and "eu-north" not in body
