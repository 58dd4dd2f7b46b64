# The fleet pages show the datasets the user may see, exactly as the API does.

from __future__ import annotations

import pytest
from django.urls import reverse

from sites.models import Project, Site
from tests.factories import DatasetFactory, DatasetReplicaFactory, ProjectFactory, SiteFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def other_project() -> Project:
    return ProjectFactory(name="climate")


@pytest.fixture
def site() -> Site:
    return SiteFactory(name="site-x")


@pytest.fixture
def datasets(project: Project, other_project: Project, site: Site) -> None:
    for name, owner, uri in (
        ("eo-scenes", project, "s3://eo-bucket/scenes/"),
        ("climate-secret", other_project, "s3://climate-private/runs/"),
        ("public-dem", None, "s3://open/dem/"),
    ):
        ds = DatasetFactory(name=name, project=owner, uri_prefix=uri, residency=["eu-north"])
        DatasetReplicaFactory(dataset=ds, site=site, uri=f"{uri}replica/")


def _api_names(api_client_for, user) -> set[str]:
    body = api_client_for(user).get("/api/v1/datasets/?limit=100").json()
    return {d["name"] for d in body["results"]}


@pytest.mark.parametrize("page", ["fleet", "site"])
def test_a_member_sees_only_their_projects_and_fleet_wide_datasets(
    page: str, client_for, api_client_for, scientist, datasets, site: Site
) -> None:
    url = reverse("ui-fleet") if page == "fleet" else reverse("ui-site-detail", args=[site.name])
    body = client_for(scientist).get(url).content.decode()
    assert "eo-scenes" in body and "public-dem" in body
    assert "climate-secret" not in body
    assert "climate-private" not in body  # neither the URI prefix nor a replica's URI
    # The page and the API agree.
    assert _api_names(api_client_for, scientist) == {"eo-scenes", "public-dem"}


@pytest.mark.parametrize("page", ["fleet", "site"])
def test_an_outsider_sees_no_project_dataset(
    page: str, client_for, api_client_for, outsider, datasets, site: Site
) -> None:
    url = reverse("ui-fleet") if page == "fleet" else reverse("ui-site-detail", args=[site.name])
    body = client_for(outsider).get(url).content.decode()
    assert "public-dem" in body
    for hidden in ("eo-scenes", "eo-bucket", "climate-secret", "climate-private"):
        assert hidden not in body
    assert _api_names(api_client_for, outsider) == {"public-dem"}


def test_fleet_staff_see_every_dataset(client_for, staff, datasets) -> None:
    body = client_for(staff).get(reverse("ui-fleet")).content.decode()
    for name in ("eo-scenes", "climate-secret", "public-dem"):
        assert name in body


def test_the_fleet_page_needs_a_login(client, datasets) -> None:
    response = client.get(reverse("ui-fleet"))
    assert response.status_code == 302
    assert "climate-secret" not in response.content.decode()
