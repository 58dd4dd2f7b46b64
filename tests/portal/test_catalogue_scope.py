"""A run resolves ``templateRef`` in its project's catalogue, then the fleet-wide one, never in
another project's: over REST, as ordinary members of two projects (``eo`` and ``sar``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from portal.models import WorkflowRun, WorkflowTemplate
from sites.models import Project
from tests.factories import ProjectFactory, SiteFactory, UserFactory

URL = "/api/v1/workflow-templates/"

pytestmark = pytest.mark.django_db


def wft(name: str, says: str, kind: str = "WorkflowTemplate") -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {
            "templates": [
                {"name": "echo", "container": {"image": "alpine", "command": ["echo", says]}}
            ]
        },
    }


def using(name: str, cluster: bool = False) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": name, "template": "echo"}
    if cluster:
        ref["clusterScope"] = True
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "uses-"},
        "spec": {
            "entrypoint": "main",
            "templates": [{"name": "main", "dag": {"tasks": [{"name": "a", "templateRef": ref}]}}],
        },
    }


def post(client: APIClient, body: dict[str, Any], project: str | None = None) -> Any:
    wrapped = {"manifest": body, **({"project": project} if project else {})}
    return client.post(URL, json.dumps(wrapped), content_type="application/json")


def submit(client: APIClient, body: dict[str, Any], project: str) -> Any:
    return client.post(
        f"/api/v1/runs/?project={project}", json.dumps(body), content_type="application/json"
    )


def ran(response: Any) -> list[str]:
    """The command the submitted run's unit runs (what the templateRef resolved to)."""
    assert response.status_code == 201, response.content
    run = WorkflowRun.objects.get(pk=response.json()["id"])
    (unit,) = run.units.all()
    return list(run.compiled["templates"][unit.template]["container"]["command"])


@pytest.fixture
def sar(db: Any) -> Project:
    project: Any = ProjectFactory(name="sar")
    return project


@pytest.fixture
def sar_api(api_client_for: Any, sar: Project) -> APIClient:
    rival: Any = UserFactory(username="rival")
    sar.members.add(rival)
    return api_client_for(rival)


@pytest.fixture(autouse=True)
def a_site(db: Any) -> None:
    SiteFactory(name="site-a", ready=True, cpu_allocatable=64000, memory_allocatable=2**37)


def test_a_template_of_another_project_is_neither_run_nor_read(
    scientist_api: APIClient, sar_api: APIClient
) -> None:
    assert post(scientist_api, wft("eo-tools", "eo's own code"), "eo").status_code == 201
    answer = submit(sar_api, using("eo-tools"), "sar")
    assert answer.status_code == 400
    (error,) = answer.json()["errors"]
    assert error["path"].endswith("templateRef.name")
    assert "no WorkflowTemplate named 'eo-tools'" in error["message"]
    assert "eo's own code" not in answer.content.decode()
    preview = sar_api.post(
        "/api/v1/runs/preview/?project=sar",
        json.dumps(using("eo-tools")),
        content_type="application/json",
    )
    assert preview.status_code == 400
    assert sar_api.get(URL + "eo-tools/").status_code == 404
    assert not WorkflowRun.objects.exists()


def test_a_squatted_name_runs_each_projects_own_code(
    scientist_api: APIClient, sar_api: APIClient
) -> None:
    """The name ``eo-tools`` taken by ``sar`` first neither blocks ``eo`` from its own nor runs
    inside ``eo``'s runs."""
    assert post(sar_api, wft("eo-tools", "squatter"), "sar").status_code == 201
    assert post(scientist_api, wft("eo-tools", "genuine"), "eo").status_code == 201
    assert ran(submit(scientist_api, using("eo-tools"), "eo")) == ["echo", "genuine"]
    assert ran(submit(sar_api, using("eo-tools"), "sar")) == ["echo", "squatter"]
    # Each member reads and replaces only their own project's entry of that name.
    mine = scientist_api.get(URL + "eo-tools/").json()
    assert mine["project"] == "eo" and "genuine" in json.dumps(mine["manifest"])
    assert [t["project"] for t in scientist_api.get(URL).json()["results"]] == ["eo"]
    assert sar_api.delete(URL + "eo-tools/").status_code == 204
    assert WorkflowTemplate.objects.values_list("project__name", flat=True).get() == "eo"


def test_a_project_resolves_its_own_before_the_fleet_wide_one(
    scientist_api: APIClient, sar_api: APIClient, staff_api: APIClient
) -> None:
    assert post(staff_api, wft("shared", "fleet")).status_code == 201
    assert post(scientist_api, wft("shared", "eo's"), "eo").status_code == 201
    assert ran(submit(scientist_api, using("shared"), "eo")) == ["echo", "eo's"]
    assert ran(submit(sar_api, using("shared"), "sar")) == ["echo", "fleet"]
    # The same name, fleet-wide and in a project: the project's by default, ?project= says.
    assert scientist_api.get(URL + "shared/").json()["project"] == "eo"
    assert scientist_api.get(URL + "shared/?project=").json()["project"] is None
    # A member cannot replace or remove the fleet-wide entry.
    assert scientist_api.delete(URL + "shared/?project=").status_code == 403
    # A second fleet-wide entry of that name is refused, naming the field.
    again = post(staff_api, wft("shared", "again"))
    assert again.status_code == 400 and again.json()["errors"][0]["path"] == "metadata.name"


def test_only_fleet_staff_create_cluster_workflow_templates(
    scientist_api: APIClient, sar_api: APIClient, staff_api: APIClient
) -> None:
    cluster = wft("cluster-tools", "members'", kind="ClusterWorkflowTemplate")
    inside = post(scientist_api, cluster, "eo")
    assert inside.status_code == 400
    assert inside.json()["errors"][0]["path"] == "project"
    assert "fleet-wide" in inside.json()["errors"][0]["message"]
    outside = post(scientist_api, cluster)
    assert outside.status_code == 403
    assert "fleet staff" in outside.json()["detail"]
    assert not WorkflowTemplate.objects.exists()
    refused = submit(sar_api, using("cluster-tools", cluster=True), "sar")
    assert refused.status_code == 400
    assert "no ClusterWorkflowTemplate named 'cluster-tools'" in refused.content.decode()
    # Fleet staff write it, and it resolves for every project.
    assert (
        post(staff_api, wft("cluster-tools", "staff's", "ClusterWorkflowTemplate")).status_code
        == 201
    )
    assert ran(submit(sar_api, using("cluster-tools", cluster=True), "sar")) == ["echo", "staff's"]


def test_a_project_template_of_the_same_name_does_not_shadow_a_cluster_template(
    scientist_api: APIClient, staff_api: APIClient
) -> None:
    assert post(staff_api, wft("tools", "cluster", "ClusterWorkflowTemplate")).status_code == 201
    assert post(scientist_api, wft("tools", "project"), "eo").status_code == 201
    assert ran(submit(scientist_api, using("tools", cluster=True), "eo")) == ["echo", "cluster"]
    assert ran(submit(scientist_api, using("tools"), "eo")) == ["echo", "project"]


def test_a_name_in_two_of_ones_projects_asks_which(
    scientist: Any, scientist_api: APIClient, sar: Project
) -> None:
    sar.members.add(scientist)
    assert post(scientist_api, wft("tools", "eo"), "eo").status_code == 201
    assert post(scientist_api, wft("tools", "sar"), "sar").status_code == 201
    answer = scientist_api.get(URL + "tools/")
    assert answer.status_code == 400
    assert answer.json()["errors"][0]["path"] == "project"
    assert scientist_api.get(URL + "tools/?project=sar").json()["project"] == "sar"
