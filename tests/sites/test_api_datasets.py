"""GET|POST /api/v1/datasets/, GET|PATCH|DELETE /api/v1/datasets/{id}/."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from sites.models import Dataset, DatasetReplica, Project, Site
from tests.sites.datasets import LIST, detail, names, new_dataset, paths

pytestmark = pytest.mark.django_db


# --- authentication and visibility ----------------------------------------------------------


def test_it_answers_401_without_credentials(api_client: APIClient, project_dataset: Dataset):
    for response in (
        api_client.get(LIST),
        api_client.get(detail(project_dataset)),
        api_client.post(LIST, new_dataset(), format="json"),
        api_client.patch(detail(project_dataset), {"format": "x"}, format="json"),
        api_client.delete(detail(project_dataset)),
    ):
        assert response.status_code == 401
        assert "detail" in response.json()
    assert Dataset.objects.filter(pk=project_dataset.pk, format="zarr").exists()
    assert not Dataset.objects.filter(name="sentinel-2").exists()


def test_staff_see_every_dataset(staff_api: APIClient, all_datasets: None):
    assert names(staff_api.get(LIST)) == [
        "foreign-data",
        "hosted-data",
        "project-data",
        "public-data",
    ]


def test_a_scientist_sees_their_projects_and_fleet_wide_datasets(
    scientist_api: APIClient, all_datasets: None
):
    assert names(scientist_api.get(LIST)) == ["project-data", "public-data"]


def test_an_operator_sees_datasets_stored_at_their_site(
    operator_api: APIClient, all_datasets: None
):
    assert names(operator_api.get(LIST)) == ["hosted-data", "public-data"]


def test_an_outsider_sees_only_fleet_wide_datasets(outsider_api: APIClient, all_datasets: None):
    assert names(outsider_api.get(LIST)) == ["public-data"]


def test_an_invisible_dataset_is_404_for_every_method(
    outsider_api: APIClient, foreign_dataset: Dataset
):
    url = detail(foreign_dataset)
    assert outsider_api.get(url).status_code == 404
    assert outsider_api.patch(url, {"format": "x"}, format="json").status_code == 404
    assert outsider_api.delete(url).status_code == 404
    foreign_dataset.refresh_from_db()
    assert foreign_dataset.format == "zarr"


def test_it_shows_replicas_and_residency(scientist_api: APIClient, project_dataset: Dataset):
    body = scientist_api.get(detail(project_dataset)).json()
    assert body["project"] == "eo"
    assert body["residency"] == ["eu-west"]
    assert body["replicas"] == [
        {"site": "site-other", "uri": "s3://other/p/", "bytes": 5, "state": "Ready"}
    ]


# --- create ---------------------------------------------------------------------------------


def test_a_member_registers_a_dataset_with_its_replicas(
    scientist_api: APIClient, operated_site: Site, other_site: Site
):
    response = scientist_api.post(LIST, new_dataset(), format="json")
    assert response.status_code == 201, response.content
    dataset = Dataset.objects.get(name="sentinel-2")
    assert response.json()["id"] == dataset.pk
    assert dataset.project is not None and dataset.project.name == "eo"
    assert dataset.residency == ["eu-west", "eu-north"]
    replicas = {r.site.name: (r.uri, r.bytes, r.state) for r in dataset.replicas.all()}
    assert replicas == {
        "site-op": ("s3://op/s2/", 1000, "Ready"),
        "site-other": ("s3://other/s2/", 1000, "Copying"),
    }
    assert [r["site"] for r in response.json()["replicas"]] == ["site-op", "site-other"]


def test_a_replica_state_defaults_to_ready(scientist_api: APIClient, operated_site: Site):
    body = new_dataset(replicas=[{"site": "site-op"}])
    response = scientist_api.post(LIST, body, format="json")
    assert response.status_code == 201, response.content
    assert DatasetReplica.objects.get(dataset__name="sentinel-2").state == "Ready"


def test_a_non_member_cannot_create_a_dataset_in_a_project(
    outsider_api: APIClient, project: Project, operated_site: Site, other_site: Site
):
    response = outsider_api.post(LIST, new_dataset(), format="json")
    assert response.status_code == 403
    assert not Dataset.objects.filter(name="sentinel-2").exists()


def test_an_operator_cannot_create_a_dataset_in_a_project_they_are_not_in(
    operator_api: APIClient, project: Project, other_site: Site
):
    response = operator_api.post(LIST, new_dataset(), format="json")
    assert response.status_code == 403
    assert not Dataset.objects.filter(name="sentinel-2").exists()


def test_only_staff_create_fleet_wide_datasets(
    scientist_api: APIClient, staff_api: APIClient, operated_site: Site, other_site: Site
):
    body = new_dataset(project=None)
    assert scientist_api.post(LIST, body, format="json").status_code == 403
    assert not Dataset.objects.exists()
    response = staff_api.post(LIST, body, format="json")
    assert response.status_code == 201
    assert Dataset.objects.get().project is None


def test_a_dataset_without_project_key_is_fleet_wide(
    scientist_api: APIClient, operated_site: Site, other_site: Site
):
    body = new_dataset()
    del body["project"]
    assert scientist_api.post(LIST, body, format="json").status_code == 403


def test_it_rejects_replica_at_unknown_site(
    scientist_api: APIClient, project: Project, operated_site: Site
):
    body = new_dataset(replicas=[{"site": "site-op"}, {"site": "nowhere", "uri": "s3://x"}])
    response = scientist_api.post(LIST, body, format="json")
    assert response.status_code == 400
    assert paths(response) == ["replicas[1].site"]
    assert not Dataset.objects.exists()
    assert not DatasetReplica.objects.exists()


def test_it_rejects_two_replicas_at_one_site(
    scientist_api: APIClient, project: Project, operated_site: Site
):
    body = new_dataset(replicas=[{"site": "site-op"}, {"site": "site-op"}])
    response = scientist_api.post(LIST, body, format="json")
    assert response.status_code == 400
    assert paths(response) == ["replicas[1].site"]
    assert not Dataset.objects.exists()


def test_it_rejects_a_duplicate_name(
    scientist_api: APIClient, project_dataset: Dataset, operated_site: Site
):
    response = scientist_api.post(
        LIST, new_dataset(name="project-data", replicas=[]), format="json"
    )
    assert response.status_code == 400
    assert paths(response) == ["name"]
    assert Dataset.objects.count() == 1


def test_it_rejects_an_unknown_project(scientist_api: APIClient, operated_site: Site):
    response = scientist_api.post(LIST, new_dataset(project="nope", replicas=[]), format="json")
    assert response.status_code == 400
    assert paths(response) == ["project"]


@pytest.mark.parametrize(
    ("overrides", "path"),
    [
        pytest.param({"name": ""}, "name", id="empty-name"),
        pytest.param({"name": None}, "name", id="null-name"),
        pytest.param({"name": "x" * 254}, "name", id="long-name"),
        pytest.param({"name": "a\x00b"}, "name", id="nul-in-name"),
        pytest.param({"name": ["a"]}, "name", id="list-name"),
        pytest.param({"bytes": -1}, "bytes", id="negative-bytes"),
        pytest.param({"bytes": 2**63}, "bytes", id="bytes-over-bigint"),
        pytest.param({"bytes": 10**400}, "bytes", id="astronomical-bytes"),
        pytest.param({"bytes": "lots"}, "bytes", id="text-bytes"),
        pytest.param({"bytes": 1.5}, "bytes", id="fractional-bytes"),
        pytest.param({"residency": "eu-west"}, "residency", id="residency-string"),
        pytest.param({"residency": [1]}, "residency[0]", id="residency-number"),
        pytest.param({"residency": [{"a": 1}]}, "residency[0]", id="residency-object"),
        pytest.param({"residency": ["eu west"]}, "residency[0]", id="residency-space"),
        pytest.param({"residency": ["a\x00"]}, "residency[0]", id="residency-nul"),
        pytest.param({"residency": ["eu", "eu"]}, "residency", id="residency-repeats"),
        pytest.param({"project": 7}, "project", id="project-number"),
        pytest.param({"project": {"name": "eo"}}, "project", id="project-object"),
        pytest.param({"project": "eo\x00"}, "project", id="project-nul"),
        pytest.param({"replicas": "site-op"}, "replicas", id="replicas-string"),
        pytest.param({"replicas": {"site": "site-op"}}, "replicas", id="replicas-object"),
        pytest.param({"replicas": [7]}, "replicas[0]", id="replica-number"),
        pytest.param({"replicas": [{}]}, "replicas[0].site", id="replica-without-site"),
        pytest.param({"replicas": [{"site": None}]}, "replicas[0].site", id="replica-null-site"),
        pytest.param({"replicas": [{"site": ["x"]}]}, "replicas[0].site", id="replica-list"),
        pytest.param({"replicas": [{"site": "s\x00"}]}, "replicas[0].site", id="replica-nul"),
        pytest.param(
            {"replicas": [{"site": "site-op", "bytes": -5}]},
            "replicas[0].bytes",
            id="replica-negative-bytes",
        ),
        pytest.param(
            {"replicas": [{"site": "site-op", "bytes": 2**64}]},
            "replicas[0].bytes",
            id="replica-huge-bytes",
        ),
        pytest.param(
            {"replicas": [{"site": "site-op", "state": "Teleporting"}]},
            "replicas[0].state",
            id="replica-bad-state",
        ),
        pytest.param(
            {"replicas": [{"site": "site-op", "sight": "x"}]},
            "replicas[0].sight",
            id="replica-unknown-key",
        ),
        pytest.param({"replica": []}, "replica", id="unknown-field"),
        pytest.param({"id": 5}, "id", id="read-only-id"),
    ],
)
def test_it_rejects_bad_input_with_the_field_path(
    scientist_api: APIClient,
    operated_site: Site,
    other_site: Site,
    project: Project,
    overrides: dict,
    path: str,
):
    response = scientist_api.post(LIST, new_dataset(**overrides), format="json")
    assert response.status_code == 400, response.content
    assert path in paths(response), response.json()
    assert all(set(e) == {"path", "message"} for e in response.json()["errors"])
    assert not Dataset.objects.exists()
    assert not DatasetReplica.objects.exists()


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        pytest.param("nope", "application/json", id="not-json"),
        pytest.param('{"name": ', "application/json", id="truncated"),
        pytest.param("{" * 50_000, "application/json", id="deep-open-objects"),
        pytest.param('{"a":' * 30_000 + "1" + "}" * 30_000, "application/json", id="deep"),
        pytest.param("[]", "application/json", id="empty-list"),
        pytest.param("null", "application/json", id="null"),
        pytest.param("42", "application/json", id="number"),
        pytest.param('{"bytes": Infinity, "name": "x"}', "application/json", id="infinity"),
        pytest.param("name=x&project=eo", "application/x-www-form-urlencoded", id="form"),
        pytest.param("name: x", "application/yaml", id="yaml"),
        pytest.param(b"\xff\xfe\x00", "application/json", id="binary"),
        pytest.param('{"name": "\\ud800"}', "application/json", id="surrogate-name"),
        pytest.param(
            '{"name": "x", "project": "eo", "replicas": [{"site": "\\udc00"}]}',
            "application/json",
            id="surrogate-site",
        ),
        pytest.param('{"name": "x", "residency": ["\\ud800"]}', "application/json", id="sur-reg"),
        pytest.param('{"\\ud800": 1}', "application/json", id="surrogate-key"),
    ],
)
def test_it_never_answers_500_to_a_hostile_body(
    scientist_api: APIClient, project: Project, body: str | bytes, content_type: str
):
    response = scientist_api.generic("POST", LIST, body, content_type=content_type)
    assert response.status_code in {400, 415}, response.content
    assert not Dataset.objects.exists()


# --- update and delete ----------------------------------------------------------------------


def test_a_member_changes_fields_and_replaces_replicas(
    scientist_api: APIClient, project_dataset: Dataset, operated_site: Site
):
    response = scientist_api.patch(
        detail(project_dataset),
        {"format": "cog", "replicas": [{"site": "site-op", "uri": "s3://op/p/", "bytes": 9}]},
        format="json",
    )
    assert response.status_code == 200, response.content
    project_dataset.refresh_from_db()
    assert project_dataset.format == "cog"
    assert [(r.site.name, r.uri, r.bytes) for r in project_dataset.replicas.all()] == [
        ("site-op", "s3://op/p/", 9)
    ]
    assert response.json()["replicas"] == [
        {"site": "site-op", "uri": "s3://op/p/", "bytes": 9, "state": "Ready"}
    ]


def test_a_patch_without_replicas_keeps_them(scientist_api: APIClient, project_dataset: Dataset):
    response = scientist_api.patch(detail(project_dataset), {"bytes": 77}, format="json")
    assert response.status_code == 200
    assert project_dataset.replicas.count() == 1
    project_dataset.refresh_from_db()
    assert project_dataset.bytes == 77


def test_an_empty_replica_list_removes_them_all(scientist_api: APIClient, project_dataset: Dataset):
    response = scientist_api.patch(detail(project_dataset), {"replicas": []}, format="json")
    assert response.status_code == 200
    assert project_dataset.replicas.count() == 0


def test_a_bad_replica_in_a_patch_changes_nothing(
    scientist_api: APIClient, project_dataset: Dataset
):
    response = scientist_api.patch(
        detail(project_dataset),
        {"format": "cog", "replicas": [{"site": "site-other"}, {"site": "gone"}]},
        format="json",
    )
    assert response.status_code == 400
    assert paths(response) == ["replicas[1].site"]
    project_dataset.refresh_from_db()
    assert project_dataset.format == "zarr"
    assert [(r.site.name, r.uri) for r in project_dataset.replicas.all()] == [
        ("site-other", "s3://other/p/")
    ]


def test_a_member_may_keep_the_name_of_their_dataset(
    scientist_api: APIClient, project_dataset: Dataset
):
    response = scientist_api.patch(detail(project_dataset), {"name": "project-data"}, format="json")
    assert response.status_code == 200


@pytest.mark.parametrize("persona", ["operator_api", "outsider_api"])
def test_seeing_a_dataset_is_not_enough_to_change_it(
    request: pytest.FixtureRequest, persona: str, all_datasets: None
):
    client: APIClient = request.getfixturevalue(persona)
    dataset = Dataset.objects.get(
        name="hosted-data" if persona == "operator_api" else "public-data"
    )
    assert client.get(detail(dataset)).status_code == 200
    assert client.patch(detail(dataset), {"format": "x"}, format="json").status_code == 403
    assert client.delete(detail(dataset)).status_code == 403
    dataset.refresh_from_db()
    assert dataset.format == "zarr"


def test_a_member_cannot_move_a_dataset_to_a_project_they_are_not_in(
    scientist_api: APIClient, project_dataset: Dataset, foreign_dataset: Dataset
):
    response = scientist_api.patch(
        detail(project_dataset), {"project": "other-team"}, format="json"
    )
    assert response.status_code == 403
    project_dataset.refresh_from_db()
    assert project_dataset.project is not None and project_dataset.project.name == "eo"


def test_a_member_cannot_make_a_dataset_fleet_wide(
    scientist_api: APIClient, project_dataset: Dataset
):
    response = scientist_api.patch(detail(project_dataset), {"project": None}, format="json")
    assert response.status_code == 403
    project_dataset.refresh_from_db()
    assert project_dataset.project is not None


def test_staff_change_any_dataset(staff_api: APIClient, foreign_dataset: Dataset):
    response = staff_api.patch(detail(foreign_dataset), {"project": None}, format="json")
    assert response.status_code == 200
    foreign_dataset.refresh_from_db()
    assert foreign_dataset.project is None


def test_a_member_deletes_a_dataset_and_its_replicas(
    scientist_api: APIClient, project_dataset: Dataset
):
    response = scientist_api.delete(detail(project_dataset))
    assert response.status_code == 204
    assert not Dataset.objects.exists()
    assert not DatasetReplica.objects.exists()


def test_put_is_not_offered(scientist_api: APIClient, project_dataset: Dataset):
    response = scientist_api.put(detail(project_dataset), new_dataset(), format="json")
    assert response.status_code == 405
