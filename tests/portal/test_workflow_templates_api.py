"""The WorkflowTemplate catalogue over REST: list/create/replace/delete by project,
and a templateRef to a missing template says what is missing and how to add it."""

from __future__ import annotations

import json

import pytest
import yaml

from portal.models import WorkflowTemplate
from tests.factories import ProjectFactory

URL = "/api/v1/workflow-templates/"


def wft(name: str = "eo-tools", templates: tuple[str, ...] = ("echo",)) -> dict:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {"name": name},
        "spec": {
            "templates": [
                {"name": t, "container": {"image": "alpine", "command": ["echo", t]}}
                for t in templates
            ]
        },
    }


def using(name: str = "eo-tools", template: str = "echo") -> dict:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "uses-"},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {
                    "name": "main",
                    "dag": {
                        "tasks": [
                            {"name": "a", "templateRef": {"name": name, "template": template}}
                        ]
                    },
                }
            ],
        },
    }


def post(client, body, **kw):
    return client.post(URL, json.dumps(body), content_type="application/json", **kw)


@pytest.mark.django_db
def test_a_member_adds_lists_replaces_and_deletes_a_template_of_the_project(scientist_api):
    r = post(scientist_api, {"project": "eo", "manifest": wft()})
    assert r.status_code == 201, r.content
    assert r.json()["name"] == "eo-tools"
    assert r.json()["project"] == "eo"
    assert r.json()["templates"] == ["echo"]
    assert [t["name"] for t in scientist_api.get(URL).json()["results"]] == ["eo-tools"]
    r = scientist_api.put(
        URL + "eo-tools/",
        yaml.safe_dump(wft(templates=("echo", "count"))),
        content_type="application/yaml",
    )
    assert r.status_code == 200, r.content
    assert scientist_api.get(URL + "eo-tools/").json()["templates"] == ["echo", "count"]
    assert scientist_api.delete(URL + "eo-tools/").status_code == 204
    assert not WorkflowTemplate.objects.exists()


@pytest.mark.django_db
def test_a_submission_resolves_against_what_the_api_stored(scientist_api):
    assert post(scientist_api, {"project": "eo", "manifest": wft()}).status_code == 201
    r = scientist_api.post(
        "/api/v1/runs/preview/", json.dumps(using()), content_type="application/json"
    )
    assert r.status_code == 200, r.content


@pytest.mark.django_db
def test_a_missing_template_names_itself_and_how_to_add_it(scientist_api):
    r = scientist_api.post(
        "/api/v1/runs/preview/", json.dumps(using("nope")), content_type="application/json"
    )
    assert r.status_code == 400
    (err,) = r.json()["errors"]
    assert err["path"].endswith("templateRef.name")
    assert "'nope'" in err["message"] and "POST /api/v1/workflow-templates/" in err["message"]
    post(scientist_api, {"project": "eo", "manifest": wft()})
    r = scientist_api.post(
        "/api/v1/runs/preview/",
        json.dumps(using(template="absent")),
        content_type="application/json",
    )
    (err,) = r.json()["errors"]
    assert "'absent'" in err["message"]
    assert "PUT /api/v1/workflow-templates/eo-tools/" in err["message"]


@pytest.mark.django_db
def test_outsiders_neither_see_nor_change_a_projects_templates(scientist_api, outsider_api):
    post(scientist_api, {"project": "eo", "manifest": wft()})
    assert outsider_api.get(URL).json()["results"] == []
    assert outsider_api.get(URL + "eo-tools/").status_code == 404
    assert outsider_api.delete(URL + "eo-tools/").status_code == 404
    # Writing into a project one is not a member of, or fleet-wide, is refused.
    assert post(outsider_api, {"project": "eo", "manifest": wft("other")}).status_code == 403
    assert post(outsider_api, wft("other")).status_code == 403
    assert WorkflowTemplate.objects.count() == 1


@pytest.mark.django_db
def test_a_member_of_another_project_cannot_move_or_delete_it(api_client_for, scientist_api):
    from tests.factories import UserFactory

    other = UserFactory(username="other")
    ProjectFactory(name="sar").members.add(other)
    ProjectFactory(name="eo2")
    post(scientist_api, {"project": "eo", "manifest": wft()})
    r = scientist_api.put(
        URL + "eo-tools/",
        json.dumps({"project": "eo2", "manifest": wft()}),
        content_type="application/json",
    )
    assert r.status_code == 403
    assert api_client_for(other).delete(URL + "eo-tools/").status_code == 404


@pytest.mark.django_db
def test_fleet_staff_write_fleet_wide_templates_that_everyone_reads(staff_api, outsider_api):
    assert post(staff_api, wft("shared")).status_code == 201
    assert [t["name"] for t in outsider_api.get(URL).json()["results"]] == ["shared"]


@pytest.mark.django_db
def test_bad_input_is_a_400_with_paths(scientist_api, api_client):
    assert api_client.get(URL).status_code == 401
    r = post(scientist_api, {"project": "eo", "manifest": {**wft(), "kind": "Workflow"}})
    assert r.status_code == 400 and r.json()["errors"][0]["path"] == "kind"
    assert post(scientist_api, {"project": "nope", "manifest": wft()}).status_code == 400
    post(scientist_api, {"project": "eo", "manifest": wft()})
    r = post(scientist_api, {"project": "eo", "manifest": wft()})
    assert r.status_code == 400 and "PUT" in r.json()["errors"][0]["message"]
    r = scientist_api.put(
        URL + "eo-tools/", json.dumps(wft("renamed")), content_type="application/json"
    )
    assert r.status_code == 400 and r.json()["errors"][0]["path"] == "metadata.name"
    r = scientist_api.post(URL, b"{not json", content_type="application/json")
    assert r.status_code == 400


@pytest.mark.django_db
def test_the_catalogue_is_in_the_openapi_schema(scientist_api):
    r = scientist_api.get("/api/schema/", HTTP_ACCEPT="application/json")
    paths = (
        json.loads(r.content)["paths"]
        if r.content[:1] == b"{"
        else yaml.safe_load(r.content)["paths"]
    )
    assert "/api/v1/workflow-templates/" in paths
    assert set(paths["/api/v1/workflow-templates/{name}/"]) >= {"get", "put", "delete"}
