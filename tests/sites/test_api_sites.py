"""GET /api/v1/sites/, GET|PATCH /api/v1/sites/{name}/."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from sites.models import Site
from tests.factories import SiteFactory

pytestmark = pytest.mark.django_db

LIST = "/api/v1/sites/"


def detail(name: str) -> str:
    return f"/api/v1/sites/{name}/"


def paths(response) -> list[str]:
    return [error["path"] for error in response.json()["errors"]]


# --- authentication and permissions ----------------------------------------------------------


def test_it_answers_401_without_credentials(api_client: APIClient, operated_site: Site):
    for response in (
        api_client.get(LIST),
        api_client.get(detail(operated_site.name)),
        api_client.patch(detail(operated_site.name), {"cordoned": True}, format="json"),
    ):
        assert response.status_code == 401
        assert "detail" in response.json()
    operated_site.refresh_from_db()
    assert operated_site.cordoned is False


def test_it_answers_401_for_a_bad_token(api_client: APIClient, operated_site: Site):
    api_client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    assert api_client.get(LIST).status_code == 401


def test_every_authenticated_user_reads_every_site(
    outsider_api: APIClient, operated_site: Site, other_site: Site
):
    response = outsider_api.get(LIST)
    assert response.status_code == 200
    assert [s["name"] for s in response.json()["results"]] == ["site-op", "site-other"]
    assert outsider_api.get(detail("site-other")).status_code == 200


def test_it_answers_404_for_an_unknown_site(outsider_api: APIClient):
    assert outsider_api.get(detail("no-such-site")).status_code == 404


def test_it_shows_capacity_readiness_and_placement_facts(outsider_api: APIClient):
    SiteFactory(
        name="gpu-site",
        region="eu-north",
        zone="eu-north-1",
        provider="aws",
        capabilities=["gpu", "nvidia-a100"],
        ready=True,
        cpu_allocatable=8000,
        cpu_allocated=10000,
        gpu_allocatable=8,
        gpu_allocated=3,
        pods_allocatable=110,
        pods_allocated=100,
        memory_allocatable=1000,
        memory_allocated=250,
    )
    body = outsider_api.get(detail("gpu-site")).json()
    assert body["region"] == "eu-north"
    assert body["zone"] == "eu-north-1"
    assert body["provider"] == "aws"
    assert body["capabilities"] == ["gpu", "nvidia-a100"]
    assert body["ready"] is True
    assert body["schedulable"] is True
    assert body["sync_mode"] == "Push"
    assert "last_sync" in body
    assert body["capacity"] == {
        "cpu": {"allocatable": 8000, "allocated": 10000, "free": 0},
        "memory": {"allocatable": 1000, "allocated": 250, "free": 750},
        "gpu": {"allocatable": 8, "allocated": 3, "free": 5},
        "pods": {"allocatable": 110, "allocated": 100, "free": 10},
    }


def test_the_operator_cordons_their_site(operator_api: APIClient, operated_site: Site):
    response = operator_api.patch(detail("site-op"), {"cordoned": True}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["cordoned"] is True
    assert response.json()["schedulable"] is False
    operated_site.refresh_from_db()
    assert operated_site.cordoned is True


def test_cordoning_is_logged_with_who_did_it(
    operator_api: APIClient, operated_site: Site, caplog: pytest.LogCaptureFixture
):
    caplog.set_level("INFO", logger="sites.services")
    operator_api.patch(detail("site-op"), {"cordoned": True}, format="json")
    assert "site site-op cordoned by operator" in caplog.text


def test_an_operator_cannot_change_a_site_they_do_not_operate(
    operator_api: APIClient, other_site: Site
):
    response = operator_api.patch(detail("site-other"), {"cordoned": True}, format="json")
    assert response.status_code == 403
    other_site.refresh_from_db()
    assert other_site.cordoned is False


@pytest.mark.parametrize("persona", ["scientist_api", "outsider_api"])
def test_users_who_operate_nothing_cannot_change_sites(
    request: pytest.FixtureRequest, persona: str, operated_site: Site
):
    client: APIClient = request.getfixturevalue(persona)
    response = client.patch(detail("site-op"), {"labels": {"a": "b"}}, format="json")
    assert response.status_code == 403
    operated_site.refresh_from_db()
    assert operated_site.labels == {}


def test_staff_change_any_site(staff_api: APIClient, other_site: Site):
    response = staff_api.patch(detail("site-other"), {"labels": {"tier": "gold"}}, format="json")
    assert response.status_code == 200
    other_site.refresh_from_db()
    assert other_site.labels == {"tier": "gold"}


@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_sites_cannot_be_created_replaced_or_deleted_over_the_api(
    staff_api: APIClient, operated_site: Site, method: str
):
    url = LIST if method == "post" else detail("site-op")
    response = getattr(staff_api, method)(url, {"name": "x"}, format="json")
    assert response.status_code == 405
    assert Site.objects.filter(name="site-op").exists()


# --- writes ---------------------------------------------------------------------------------


def test_the_operator_sets_labels_and_overrides(operator_api: APIClient, operated_site: Site):
    overrides = {
        "artifact_repository": {"s3": {"bucket": "artifacts", "endpoint": "minio:9000"}},
        "artifact_store": {
            "endpoint": "s3.site-op.example.org:9000",
            "bucket": "site-op-artifacts",
            "credentials_secret": "site-op-artifacts-credentials",
        },
        "gpu_node_selector": {"nvidia.com/gpu.present": "true"},
        "image_registry_mirror": "mirror.example.org",
    }
    labels = {"tier": "gold", "portal.multisite.io/zone": "north", "empty": ""}
    response = operator_api.patch(
        detail("site-op"), {"labels": labels, "overrides": overrides}, format="json"
    )
    assert response.status_code == 200, response.json()
    operated_site.refresh_from_db()
    assert operated_site.labels == labels
    assert operated_site.overrides == overrides


def test_labels_replace_the_old_ones_whole(operator_api: APIClient, operated_site: Site):
    operated_site.labels = {"old": "x"}
    operated_site.save()
    operator_api.patch(detail("site-op"), {"labels": {"new": "y"}}, format="json")
    operated_site.refresh_from_db()
    assert operated_site.labels == {"new": "y"}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("region", "mars"),
        ("ready", False),
        ("name", "renamed"),
        ("capabilities", ["gpu"]),
        ("capacity", {}),
    ],
)
def test_it_rejects_writes_to_fields_karmada_owns(
    operator_api: APIClient, operated_site: Site, field: str, value: object
):
    response = operator_api.patch(detail("site-op"), {field: value}, format="json")
    assert response.status_code == 400
    assert paths(response) == [field]
    operated_site.refresh_from_db()
    assert operated_site.region == "eu-west"
    assert operated_site.ready is True


def test_it_rejects_unknown_fields(operator_api: APIClient, operated_site: Site):
    response = operator_api.patch(detail("site-op"), {"cordon": True}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0] == {"path": "cordon", "message": "Unknown field."}


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"labels": ["a"]}, "labels"),
        ({"labels": "tier=gold"}, "labels"),
        ({"labels": {"tier": 3}}, "labels.tier"),
        ({"labels": {"bad key!": "x"}}, "labels.bad key!"),
        ({"labels": {"-leading": "x"}}, "labels.-leading"),
        ({"labels": {"k": "v" * 64}}, "labels.k"),
        ({"labels": {"k": "has space"}}, "labels.k"),
        ({"labels": {"Bad_Prefix/k": "v"}}, "labels.Bad_Prefix/k"),
        ({"labels": {"/k": "v"}}, "labels./k"),
        ({"labels": {"k": {"nested": "junk"}}}, "labels.k"),
        ({"overrides": []}, "overrides"),
        ({"overrides": {"replicas": 3}}, "overrides.replicas"),
        ({"overrides": {"artifact_repository": "s3://x"}}, "overrides.artifact_repository"),
        ({"overrides": {"gpu_node_selector": ["gpu"]}}, "overrides.gpu_node_selector"),
        ({"overrides": {"gpu_node_selector": {"gpu": 1}}}, "overrides.gpu_node_selector.gpu"),
        ({"overrides": {"image_registry_mirror": 5}}, "overrides.image_registry_mirror"),
        ({"overrides": {"image_registry_mirror": "a b"}}, "overrides.image_registry_mirror"),
        (
            {"overrides": {"artifact_repository": {"s3": "a\x00b"}}},
            "overrides.artifact_repository.s3",
        ),
        ({"overrides": {"artifact_store": "s3://x"}}, "overrides.artifact_store"),
        (
            {"overrides": {"artifact_store": {"endpoint": "s3.x"}}},
            "overrides.artifact_store.bucket",
        ),
        (
            {"overrides": {"artifact_store": {"bucket": "Bad_Bucket"}}},
            "overrides.artifact_store.bucket",
        ),
        (
            {"overrides": {"artifact_store": {"bucket": "b12", "endpoint": "https://s3.x"}}},
            "overrides.artifact_store.endpoint",
        ),
        (
            {"overrides": {"artifact_store": {"bucket": "b12", "credentials_secret": "A B"}}},
            "overrides.artifact_store.credentials_secret",
        ),
        (
            {"overrides": {"artifact_store": {"bucket": "b12", "proxy": "socks5://p:1080"}}},
            "overrides.artifact_store.proxy",
        ),
        (
            {"overrides": {"artifact_store": {"bucket": "b12", "region": "Eu West!"}}},
            "overrides.artifact_store.region",
        ),
        ({"cordoned": "maybe"}, "cordoned"),
        ({"cordoned": None}, "cordoned"),
    ],
)
def test_it_rejects_bad_operator_fields_with_their_path(
    operator_api: APIClient, operated_site: Site, body: dict, path: str
):
    response = operator_api.patch(detail("site-op"), body, format="json")
    assert response.status_code == 400, response.content
    assert path in paths(response)
    operated_site.refresh_from_db()
    assert operated_site.labels == {}
    assert operated_site.overrides == {}
    assert operated_site.cordoned is False


def test_a_bad_field_stores_nothing_of_the_good_ones(operator_api: APIClient, operated_site: Site):
    response = operator_api.patch(
        detail("site-op"), {"cordoned": True, "labels": {"ok": "x", "bad": 1}}, format="json"
    )
    assert response.status_code == 400
    operated_site.refresh_from_db()
    assert operated_site.cordoned is False
    assert operated_site.labels == {}


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        pytest.param("not json", "application/json", id="not-json"),
        pytest.param("{", "application/json", id="truncated"),
        pytest.param("[" * 100_000 + "]" * 100_000, "application/json", id="deep-nesting"),
        pytest.param('{"labels": NaN}', "application/json", id="nan"),
        pytest.param("[1, 2]", "application/json", id="list-body"),
        pytest.param('"just a string"', "application/json", id="string-body"),
        pytest.param("cordoned=true", "application/x-www-form-urlencoded", id="form"),
        pytest.param("<site/>", "application/xml", id="xml"),
        pytest.param('{"\\ud800": 1}', "application/json", id="surrogate-key"),
        pytest.param('{"labels": {"\\udfff": "x"}}', "application/json", id="surrogate-label"),
        pytest.param(
            '{"overrides": {"artifact_repository": {"s3": "\\ud800"}}}',
            "application/json",
            id="surrogate-in-artifact-repository",
        ),
        pytest.param('{"overrides": {"\\ud800": 1}}', "application/json", id="surrogate-override"),
    ],
)
def test_it_never_answers_500_to_a_hostile_body(
    operator_api: APIClient, operated_site: Site, body: str, content_type: str
):
    response = operator_api.generic("PATCH", detail("site-op"), body, content_type=content_type)
    assert response.status_code in {400, 415}, response.content
    operated_site.refresh_from_db()
    assert operated_site.cordoned is False


# --- filters and pagination -----------------------------------------------------------------


@pytest.fixture
def fleet(db) -> None:
    SiteFactory(name="a", region="eu", provider="aws", ready=True)
    SiteFactory(name="b", region="eu", provider="gcp", ready=False)
    SiteFactory(name="c", region="us", provider="aws", ready=True, cordoned=True)


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("region=eu", ["a", "b"]),
        ("ready=true", ["a", "c"]),
        ("ready=false", ["b"]),
        ("cordoned=true", ["c"]),
        ("provider=aws", ["a", "c"]),
        ("name=b", ["b"]),
        ("region=eu&provider=aws", ["a"]),
        ("region=mars", []),
    ],
)
def test_it_filters_sites(outsider_api: APIClient, fleet: None, query: str, names: list[str]):
    response = outsider_api.get(f"{LIST}?{query}")
    assert response.status_code == 200
    assert [s["name"] for s in response.json()["results"]] == names


def test_it_rejects_a_bad_filter_value(outsider_api: APIClient, fleet: None):
    response = outsider_api.get(f"{LIST}?ready=banana")
    assert response.status_code == 400
    assert paths(response) == ["ready"]


def test_it_paginates_sites(outsider_api: APIClient, fleet: None):
    first = outsider_api.get(f"{LIST}?limit=2").json()
    assert first["count"] == 3
    assert [s["name"] for s in first["results"]] == ["a", "b"]
    assert first["next"] is not None
    second = outsider_api.get(f"{LIST}?limit=2&offset=2").json()
    assert [s["name"] for s in second["results"]] == ["c"]
    assert second["next"] is None


@pytest.mark.parametrize(
    "query", ["limit=99999999999999999999999", "offset=99999999999999999999999", "limit=-1"]
)
def test_it_survives_absurd_pagination_numbers(outsider_api: APIClient, fleet: None, query: str):
    response = outsider_api.get(f"{LIST}?{query}")
    assert response.status_code == 200


def test_listing_sites_costs_the_same_queries_for_many(
    outsider_api: APIClient, django_assert_max_num_queries
):
    for index in range(20):
        SiteFactory(name=f"bulk-{index}")
    with django_assert_max_num_queries(4):
        response = outsider_api.get(LIST)
    assert response.json()["count"] == 20
