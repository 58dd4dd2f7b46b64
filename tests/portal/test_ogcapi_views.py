"""The OGC API - Processes face without a stack: documents, refusals and paging (the clients'
round trips against the live stack are in tests/integration/test_ogcapi.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from portal import services
from portal.api_tokens import api_token_create
from portal.models import WorkflowRun
from portal.ogcapi import processes

EXCEPTIONS = "http://www.opengis.net/def/exceptions/ogcapi-processes-1/1.0"


@pytest.fixture
def demo(db: Any) -> None:
    call_command("load_demo", verbosity=0)


@pytest.fixture
def bearer(demo: None) -> Client:
    key = api_token_create(user=User.objects.get(username="scientist"), replace=True)
    return Client(HTTP_AUTHORIZATION=f"Bearer {key}")


def test_landing_conformance_and_api_answer_without_a_login(demo: None) -> None:
    client = Client()
    landing = client.get("/ogcapi/").json()
    rels = {link["rel"] for link in landing["links"]}
    assert {"service-desc", "http://www.opengis.net/def/rel/ogc/1.0/conformance"} <= rels
    assert client.get("/ogcapi/conformance").status_code == 200
    api = client.get("/ogcapi/api")
    assert api["Content-Type"] == "application/vnd.oai.openapi+json;version=3.0"
    assert "/jobs/{jobID}/results" in api.json()["paths"]
    refused = client.get("/ogcapi/processes")
    assert refused.status_code == 401
    assert refused["Content-Type"] == "application/problem+json"


def test_an_unknown_process_is_no_such_process(bearer: Client) -> None:
    for response in (
        bearer.get("/ogcapi/processes/nope"),
        bearer.post("/ogcapi/processes/nope/execution", "{}", content_type="application/json"),
    ):
        assert response.status_code == 404
        assert response.json()["type"] == f"{EXCEPTIONS}/no-such-process"


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"inputs": {"model": "gpt"}}, "inputs.model"),
        ({"inputs": {"colour": "red"}}, "inputs.colour"),
        ({"inputs": {"model": ["a"]}}, "inputs.model"),
        ({"inputs": ["model"]}, "inputs"),
        (["not", "an", "object"], ""),
        ({"inputs": {"project": "nope"}}, "project"),
    ],
)
def test_bad_inputs_are_a_400_naming_the_field_and_store_nothing(
    bearer: Client, body: Any, path: str
) -> None:
    response = bearer.post(
        "/ogcapi/processes/eo-pipeline/execution", body, content_type="application/json"
    )
    assert response.status_code == 400, response.content
    problem = response.json()
    assert problem["type"] == f"{EXCEPTIONS}/invalid-parameter-value"
    assert problem["errors"][0]["path"] == path
    assert not WorkflowRun.objects.exists()


def test_execute_creates_the_run_from_the_catalogue_and_lists_it_with_next_links(
    bearer: Client,
) -> None:
    ids = []
    for model in ("land-cover-v2", "cloud-segmentation-v3", "land-cover-v2"):
        response = bearer.post(
            "/ogcapi/processes/eo-pipeline/execution",
            {"inputs": {"model": {"value": model}}},
            content_type="application/json",
        )
        assert response.status_code == 201, response.content
        assert response["Location"].endswith(f"/ogcapi/jobs/{response.json()['jobID']}")
        ids.append(response.json()["jobID"])
    run = WorkflowRun.objects.get(pk=int(ids[0]))
    assert run.manifest["spec"]["workflowTemplateRef"] == {"name": "eo-pipeline"}
    assert run.project is not None and run.project.name == "eo-demo"
    assert {u.name: u.site for u in run.units.all()}["ingest"] == "site-a"

    page = bearer.get("/ogcapi/jobs?limit=2&processID=eo-pipeline").json()
    assert [j["jobID"] for j in page["jobs"]] == ids[::-1][:2]
    # A list carries counts, the job itself its placement: unit, site, phase, reason.
    assert "placement" not in page["jobs"][0] and page["jobs"][0]["progress"] == 0
    one = bearer.get(f"/ogcapi/jobs/{ids[0]}").json()
    assert [(p["unit"], p["site"]) for p in one["placement"]] == [
        ("ingest", "site-a"),
        ("preprocess", None),
        ("inference", "site-c"),
    ]
    assert one["message"] == "0 of 3 steps done" and one["status"] == "accepted"
    (nxt,) = [link["href"] for link in page["links"] if link["rel"] == "next"]
    rest = bearer.get(nxt).json()
    assert [j["jobID"] for j in rest["jobs"]] == [ids[0]]
    assert not [link for link in rest["links"] if link["rel"] == "next"]
    assert bearer.get("/ogcapi/jobs?status=successful").json()["jobs"] == []
    assert len(bearer.get("/ogcapi/jobs?status=accepted,running").json()["jobs"]) == 3
    assert bearer.get("/ogcapi/jobs?processID=other").json()["jobs"] == []
    for query in ("limit=0", "limit=x", "status=done"):
        bad = bearer.get(f"/ogcapi/jobs?{query}")
        assert bad.status_code == 400, query
    assert bearer.get("/ogcapi/jobs/abc").status_code == 404


def test_outputs_are_the_final_tasks_or_what_the_entrypoint_declares() -> None:
    manifest = {
        "spec": {
            "entrypoint": "dag",
            "templates": [
                {
                    "name": "dag",
                    "dag": {"tasks": [{"name": "a", "template": "t"}]},
                    "outputs": {
                        "parameters": [
                            {
                                "name": "count",
                                "valueFrom": {"parameter": "{{tasks.a.outputs.parameters.n}}"},
                            }
                        ],
                        "artifacts": [{"name": "data", "from": "{{tasks.a.outputs.artifacts.d}}"}],
                    },
                },
                {"name": "t", "container": {"image": "x"}},
            ],
        }
    }
    specs = processes.output_specs(manifest)
    assert [(s.id, s.kind, s.task, s.name) for s in specs] == [
        ("count", "parameter", "a", "n"),
        ("data", "artifact", "a", "d"),
    ]


def test_a_body_past_the_limit_is_413_and_not_json_is_400(bearer: Client, settings: Any) -> None:
    settings.PORTAL_MAX_BODY_BYTES = 100
    url = "/ogcapi/processes/eo-pipeline/execution"
    big = '{"inputs": {"model": "' + "x" * 200 + '"}}'
    assert bearer.post(url, big, content_type="application/json").status_code == 413
    bad = bearer.post(url, "inputs: [", content_type="application/yaml")
    assert bad.status_code == 400
    assert bad.json()["type"] == f"{EXCEPTIONS}/invalid-parameter-value"
    assert not WorkflowRun.objects.exists()


def test_a_projects_own_template_of_the_same_name_is_the_process_its_members_run(
    bearer: Client,
) -> None:
    """As a run resolves ``templateRef``: the project's entry before the fleet-wide one, and
    one process per name."""
    scientist = User.objects.get(username="scientist")
    services.workflow_template_create(
        user=scientist,
        body={
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "WorkflowTemplate",
            "metadata": {"name": "eo-pipeline"},
            "spec": {
                "entrypoint": "main",
                "arguments": {"parameters": [{"name": "only-here", "value": "1"}]},
                "templates": [{"name": "main", "container": {"image": "alpine"}}],
            },
        },
        project="eo-demo",
    )
    assert [p["id"] for p in bearer.get("/ogcapi/processes").json()["processes"]] == ["eo-pipeline"]
    described = bearer.get("/ogcapi/processes/eo-pipeline").json()
    assert set(described["inputs"]) == {"only-here", "project"}
    created = bearer.post(
        "/ogcapi/processes/eo-pipeline/execution",
        {"inputs": {"only-here": "2"}},
        content_type="application/json",
    )
    assert created.status_code == 201, created.content
    run = WorkflowRun.objects.get(pk=int(created.json()["jobID"]))
    assert [u.name for u in run.units.all()] == ["main"]
