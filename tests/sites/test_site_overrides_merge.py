"""PATCH /api/v1/sites/{name}/ merges ``overrides`` (JSON merge patch, RFC 7386) and answers
what changed; the artifact store of a site that holds recent outputs is not dropped by
accident."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from portal.choices import RunStatus, UnitPhase
from sites.models import Site
from tests.portal.helpers import make_run

pytestmark = pytest.mark.django_db

STORE = {"endpoint": "s3.site-op.example.org", "bucket": "site-op-artifacts"}
STORED = {
    "artifact_store": STORE,
    "gpu_node_selector": {"nvidia.com/gpu.present": "true"},
    "image_registry_mirror": "registry.example.org",
}


@pytest.fixture
def site(operated_site: Site) -> Site:
    operated_site.overrides = STORED
    operated_site.save()
    return operated_site


def patch(client: APIClient, site: Site, body: dict) -> object:
    return client.patch(f"/api/v1/sites/{site.name}/", body, format="json")


def run_at(site: Site, owner, status: str, finished_ago: timedelta | None = None) -> None:
    run = make_run(owner, status=status, units=[("step", site.name, UnitPhase.RUNNING, [])])
    if finished_ago is not None:
        run.finished_at = timezone.now() - finished_ago
        run.save()


def test_patching_one_override_keeps_the_others_and_answers_the_diff(
    operator_api: APIClient, site: Site
) -> None:
    answer = patch(operator_api, site, {"overrides": {"image_registry_mirror": "mirror.io"}})
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["overrides"] == {**STORED, "image_registry_mirror": "mirror.io"}
    assert body["changes"] == [
        {
            "path": "overrides.image_registry_mirror",
            "op": "replace",
            "old": "registry.example.org",
            "new": "mirror.io",
        }
    ]
    site.refresh_from_db()
    assert site.overrides["artifact_store"] == STORE


def test_a_nested_patch_merges_and_null_deletes_a_key(operator_api: APIClient, site: Site) -> None:
    answer = patch(
        operator_api,
        site,
        {
            "overrides": {
                "gpu_node_selector": {"nvidia.com/gpu.present": None, "gpu": "a100"},
                "image_registry_mirror": None,
                "artifact_repository": {"configMap": "artifact-repositories", "key": "s3"},
            }
        },
    )
    assert answer.status_code == 200, answer.content
    site.refresh_from_db()
    assert site.overrides == {
        "artifact_store": STORE,
        "gpu_node_selector": {"gpu": "a100"},
        "artifact_repository": {"configMap": "artifact-repositories", "key": "s3"},
    }
    ops = {(c["path"], c["op"]) for c in answer.json()["changes"]}
    assert ops == {
        ("overrides.artifact_repository", "add"),
        ("overrides.gpu_node_selector.gpu", "add"),
        ("overrides.gpu_node_selector.nvidia.com/gpu.present", "remove"),
        ("overrides.image_registry_mirror", "remove"),
    }


def test_a_patch_that_changes_nothing_answers_no_changes(
    operator_api: APIClient, site: Site
) -> None:
    answer = patch(operator_api, site, {"overrides": {}, "cordoned": False})
    assert answer.status_code == 200, answer.content
    assert answer.json()["changes"] == []


def test_cordoning_answers_the_change(operator_api: APIClient, site: Site) -> None:
    answer = patch(operator_api, site, {"cordoned": True})
    assert answer.json()["changes"] == [
        {"path": "cordoned", "op": "replace", "old": False, "new": True}
    ]


def test_a_merged_result_that_is_invalid_is_400_naming_the_field_and_nothing_stored(
    operator_api: APIClient, site: Site
) -> None:
    answer = patch(operator_api, site, {"overrides": {"artifact_store": {"bucket": "Bad_B"}}})
    assert answer.status_code == 400
    assert [e["path"] for e in answer.json()["errors"]] == ["overrides.artifact_store.bucket"]
    answer = patch(operator_api, site, {"overrides": ["not", "a", "patch"]})
    assert answer.status_code == 400
    assert [e["path"] for e in answer.json()["errors"]] == ["overrides"]
    site.refresh_from_db()
    assert site.overrides == STORED


@pytest.mark.parametrize("status", [RunStatus.RUNNING, RunStatus.PENDING])
def test_removing_the_artifact_store_of_a_site_with_an_active_run_is_400_naming_it(
    operator_api: APIClient, operator, site: Site, status: str
) -> None:
    run_at(site, operator, status)
    answer = patch(operator_api, site, {"overrides": {"artifact_store": None}, "cordoned": True})
    assert answer.status_code == 400, answer.content
    [error] = answer.json()["errors"]
    assert error["path"] == "overrides.artifact_store"
    assert "force" in error["message"] and "1 active or recent run" in error["message"]
    site.refresh_from_db()
    assert site.overrides == STORED and site.cordoned is False  # all or nothing


def test_replacing_the_whole_overrides_with_null_is_refused_too(
    operator_api: APIClient, operator, site: Site
) -> None:
    run_at(site, operator, RunStatus.SUCCEEDED, finished_ago=timedelta(hours=1))
    answer = patch(operator_api, site, {"overrides": None})
    assert answer.status_code == 400
    assert answer.json()["errors"][0]["path"] == "overrides.artifact_store"


def test_moving_the_artifact_store_of_a_site_with_a_recent_run_is_refused(
    operator_api: APIClient, operator, site: Site
) -> None:
    run_at(site, operator, RunStatus.FAILED, finished_ago=timedelta(hours=2))
    answer = patch(operator_api, site, {"overrides": {"artifact_store": {"bucket": "other"}}})
    assert answer.status_code == 400
    assert "Moving the artifact store" in answer.json()["errors"][0]["message"]
    # Its secret only: the outputs stay where they are.
    answer = patch(
        operator_api, site, {"overrides": {"artifact_store": {"credentials_secret": "creds"}}}
    )
    assert answer.status_code == 200, answer.content


def test_force_removes_the_artifact_store_of_a_site_with_an_active_run(
    operator_api: APIClient, operator, site: Site
) -> None:
    run_at(site, operator, RunStatus.RUNNING)
    answer = patch(operator_api, site, {"overrides": {"artifact_store": None}, "force": True})
    assert answer.status_code == 200, answer.content
    assert answer.json()["changes"] == [
        {"path": "overrides.artifact_store", "op": "remove", "old": STORE}
    ]
    assert "force" not in answer.json()
    site.refresh_from_db()
    assert "artifact_store" not in site.overrides


def test_the_artifact_store_of_a_site_whose_runs_finished_long_ago_is_removed(
    operator_api: APIClient, operator, site: Site, other_site: Site
) -> None:
    run_at(site, operator, RunStatus.SUCCEEDED, finished_ago=timedelta(days=3))
    run_at(other_site, operator, RunStatus.RUNNING)
    answer = patch(operator_api, site, {"overrides": None})
    assert answer.status_code == 200, answer.content
    site.refresh_from_db()
    assert site.overrides == {}
