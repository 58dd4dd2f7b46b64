"""/api/v1/datasets/: its filters and pages, what a list costs in queries, and a name two
requests take at once."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from sites.api.serializers import DatasetSerializer
from sites.models import Dataset, Project, Site
from tests.factories import DatasetFactory, DatasetReplicaFactory, SiteFactory
from tests.sites.datasets import LIST, names, new_dataset, paths

pytestmark = pytest.mark.django_db


# --- filters and pagination -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("project=eo", ["project-data"]),
        ("project=other-team", ["foreign-data"]),
        ("site=site-op", ["hosted-data"]),
        ("site=site-other", ["project-data"]),
        ("name=public-data", ["public-data"]),
        ("format=zarr", ["foreign-data", "hosted-data", "project-data", "public-data"]),
        ("format=netcdf", []),
        ("site=nowhere", []),
    ],
)
def test_it_filters_datasets(
    staff_api: APIClient, all_datasets: None, query: str, expected: list[str]
):
    assert names(staff_api.get(f"{LIST}?{query}")) == expected


def test_a_site_with_several_replicas_lists_each_dataset_once(
    staff_api: APIClient, project_dataset: Dataset, operated_site: Site
):
    DatasetReplicaFactory(dataset=project_dataset, site=operated_site)
    other = SiteFactory(name="third")
    DatasetReplicaFactory(dataset=project_dataset, site=other)
    assert names(staff_api.get(f"{LIST}?site=site-op")) == ["project-data"]
    assert staff_api.get(f"{LIST}?site=site-op").json()["count"] == 1


def test_filters_never_widen_visibility(outsider_api: APIClient, all_datasets: None):
    assert names(outsider_api.get(f"{LIST}?project=other-team")) == []
    assert names(outsider_api.get(f"{LIST}?site=site-op")) == []


def test_it_paginates_datasets(staff_api: APIClient, all_datasets: None):
    first = staff_api.get(f"{LIST}?limit=3").json()
    assert first["count"] == 4
    assert len(first["results"]) == 3
    assert first["next"] is not None
    second = staff_api.get(f"{LIST}?limit=3&offset=3").json()
    assert [d["name"] for d in second["results"]] == ["public-data"]
    assert second["previous"] is not None


def test_a_name_taken_by_a_concurrent_request_is_400_not_500(
    scientist_api: APIClient, project_dataset: Dataset, monkeypatch: pytest.MonkeyPatch
):
    # Both requests passed the serializer's unique check before either stored its dataset.
    monkeypatch.setattr(DatasetSerializer, "validate_name", lambda self, value: value)
    response = scientist_api.post(
        LIST, new_dataset(name="project-data", replicas=[]), format="json"
    )
    assert response.status_code == 400
    assert paths(response) == ["name"]
    assert Dataset.objects.count() == 1


def test_listing_datasets_costs_the_same_queries_for_many(
    scientist_api: APIClient, project: Project, other_site: Site, django_assert_max_num_queries
):
    for index in range(15):
        dataset = DatasetFactory(name=f"bulk-{index}", project=project)
        DatasetReplicaFactory(dataset=dataset, site=other_site)
    # auth token, user, count, page, replicas + sites (prefetch); no query per dataset.
    with django_assert_max_num_queries(8):
        response = scientist_api.get(LIST)
    assert response.json()["count"] == 15
