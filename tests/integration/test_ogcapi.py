"""OGC API - Processes with the field's clients (OWSLib, ogc-api-processes-client) against the
live stack (PostgreSQL, Redis, a Celery worker, the watcher, the webhook) on a sandbox that
really runs the steps: the demo pipeline as a process, executed, followed and read back."""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

import pytest
import requests
from django.contrib.auth.models import User
from ogc_api_processes_client.api.result_api import ResultApi
from ogc_api_processes_client.api_client_wrapper import ApiClientWrapper
from ogc_api_processes_client.configuration import Configuration
from ogc_api_processes_client.models.execute import Execute
from ogc_api_processes_client.models.status_info import StatusInfo
from owslib.ogcapi.processes import Processes

from portal import services
from portal.api_tokens import api_token_create
from portal.models import UnitRun, WorkflowRun
from tests.fixtures_stack import Stack, wait_for

pytestmark = [pytest.mark.integration]

EXCEPTIONS = "http://www.opengis.net/def/exceptions/ogcapi-processes-1/1.0"


def _template(name: str, source: str) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {"name": name},
        "spec": {
            "entrypoint": "main",
            "arguments": {"parameters": [{"name": "reason", "description": "why"}]},
            "templates": [
                {
                    "name": "main",
                    "inputs": {"parameters": [{"name": "reason"}]},
                    "script": {"image": "python:3", "command": ["python"], "source": source},
                }
            ],
        },
    }


@pytest.fixture
def scientist(live_executing: Stack) -> User:
    return User.objects.get(username="scientist")


@pytest.fixture
def key(scientist: User) -> str:
    return api_token_create(user=scientist, replace=True)


@pytest.fixture
def root(live_server: Any) -> str:
    return f"{live_server.url}/ogcapi"


def _get(url: str, key: str, scheme: str = "Bearer") -> requests.Response:
    return requests.get(url, headers={"Authorization": f"{scheme} {key}"}, timeout=30)


def _until(url: str, key: str, wanted: set[str], timeout: float = 180) -> dict[str, Any]:
    def status() -> dict[str, Any]:
        info: dict[str, Any] = _get(url, key).json()
        return info if info["status"] in wanted else {}

    try:
        return wait_for(status, timeout, f"the job to be {wanted}")
    except AssertionError:
        runs = list(WorkflowRun.objects.values_list("pk", "status", "message"))
        units = list(UnitRun.objects.values_list("run_id", "name", "phase", "site", "message"))
        raise AssertionError(f"{url}: runs {runs}, units {units}") from None


def test_owslib_lists_describes_executes_and_reads_the_results(
    root: str, key: str, live_executing: Stack
) -> None:
    processes = Processes(root, headers={"Authorization": f"Bearer {key}"})
    conformance = processes.conformance()["conformsTo"]
    for name in ("core", "ogc-process-description", "json", "oas30", "job-list", "dismiss"):
        assert f"http://www.opengis.net/spec/ogcapi-processes-1/1.0/conf/{name}" in conformance
    assert processes.api()["openapi"].startswith("3.0")
    assert [p["id"] for p in processes.processes()] == ["eo-pipeline"]

    described = processes.process("eo-pipeline")
    assert described["jobControlOptions"] == ["async-execute", "dismiss"]
    model = described["inputs"]["model"]
    assert model["schema"] == {
        "type": "string",
        "enum": ["cloud-segmentation-v3", "land-cover-v2"],
        "default": "cloud-segmentation-v3",
    }
    assert model["description"] == "Model the inference step runs"
    assert set(described["outputs"]) == {"inference.masks", "inference.result"}

    created = processes.execute("eo-pipeline", {"model": "land-cover-v2"}, async_=True)
    assert created["status"] == "accepted" and created["processID"] == "eo-pipeline"
    location = processes.response_headers["Location"]
    assert location == f"{root}/jobs/{created['jobID']}"

    info = _until(location, key, {"successful", "failed", "dismissed"})
    assert info["status"] == "successful", info
    assert info["progress"] == 100
    # Placement stays visible: each unit's site and why, and links to the run and decisions.
    sites = {p["unit"]: p["site"] for p in info["placement"]}
    assert sites == {"ingest": "site-a", "preprocess": "site-b", "inference": "site-c"}
    rels = {(link["rel"], link["type"]) for link in info["links"]}
    assert ("alternate", "text/html") in rels
    assert ("http://www.opengis.net/def/rel/ogc/1.0/results", "application/json") in rels
    run = WorkflowRun.objects.get(pk=int(info["jobID"]))
    assert run.arguments == {} and run.project is not None and run.project.name == "eo-demo"

    results = processes._request(path=f"jobs/{info['jobID']}/results")
    assert '"model": "land-cover-v2"' in results["inference.result"]
    masks = results["inference.masks"]
    assert masks["href"].startswith("http://s3.site-c.sandbox.invalid/site-c-artifacts/")
    assert "X-Amz-Signature=" in masks["href"]
    assert "Secret" not in str(masks) and "secret" not in str(masks)
    # The link downloads the object itself (a client reaches the repository's endpoint; here
    # its listener, by its name), and nothing else: another key with it is refused.
    got = _download(live_executing, masks["href"])
    assert got.status_code == 200 and got.content[:2] == b"\x1f\x8b"  # gzip
    other = _download(
        live_executing, masks["href"].replace("/site-c-artifacts/", "/site-c-artifacts/x")
    )
    assert other.status_code == 403 and b"SignatureDoesNotMatch" in other.content


def _download(stack: Stack, url: str) -> requests.Response:
    """GET a pre-signed URL from the repository whose endpoint name its host is."""
    split = urllib.parse.urlsplit(url)
    listing = stack.sandbox.request("GET", "/_sandbox/repositories")
    repos = listing["items"] if isinstance(listing, dict) else listing
    listener = next(r["url"] for r in repos if r["endpoint"] == split.hostname)
    target = f"{listener.rstrip('/')}{split.path}?{split.query}"
    return requests.get(target, headers={"Host": split.netloc}, timeout=30)


def test_ogc_api_processes_client_does_the_same_round_trip(root: str, key: str) -> None:
    client = ApiClientWrapper(
        configuration=Configuration(host=root),
        header_name="Authorization",
        header_value=f"Token {key}",
    )
    assert [p.id for p in client.get_processes().processes] == ["eo-pipeline"]
    process = client.get_process_description("eo-pipeline")
    assert process.inputs is not None and "scene-uri" in process.inputs
    # No inputs: the defaults apply. (This client's models cannot hold a string input: its
    # oneOf of str and bytes matches both and pydantic refuses the value as ambiguous.)
    created: Any = client.execute("eo-pipeline", Execute(inputs={}))
    assert isinstance(created, StatusInfo) and created.status.value == "accepted"
    job = created.job_id
    wait_for(
        lambda: client.get_status(job).status.value in ("successful", "failed"),
        180,
        "the job to finish",
    )
    status = client.get_status(job)
    assert status.status.value == "successful", status
    # Read raw: the client's InlineOrRefData cannot hold a string value either (same oneOf).
    raw = ResultApi(client.api_client).get_result_without_preload_content(job)
    assert raw.status == 200
    results = json.loads(raw.data)
    assert '"model": "cloud-segmentation-v3"' in results["inference.result"]
    assert results["inference.masks"]["href"].startswith(
        "http://s3.site-c.sandbox.invalid/site-c-artifacts/"
    )
    jobs = client.get_jobs()
    assert job in [j.job_id for j in jobs.jobs]


def test_a_failed_workflow_ends_failed_with_its_message(
    root: str, key: str, scientist: User
) -> None:
    services.workflow_template_create(
        user=scientist,
        body=_template(
            "cloudy", 'import sys; print("too cloudy: {{inputs.parameters.reason}}"); sys.exit(3)'
        ),
        project="eo-demo",
    )
    response = requests.post(
        f"{root}/processes/cloudy/execution",
        json={"inputs": {"reason": "82% cover"}},
        headers={"Authorization": f"Bearer {key}", "Prefer": "respond-async"},
        timeout=30,
    )
    assert response.status_code == 201, response.text
    info = _until(response.headers["Location"], key, {"successful", "failed", "dismissed"})
    assert info["status"] == "failed"
    # Argo's message for the failed step, with the step's name.
    assert info["message"] == "main: Error (exit code 3)", info["message"]
    results = _get(f"{response.headers['Location']}/results", key)
    assert results.status_code == 500
    problem = results.json()
    assert problem["type"] == f"{EXCEPTIONS}/failed"
    assert problem["detail"] == info["message"]


def test_delete_stops_a_running_job_and_it_ends_dismissed(
    root: str, key: str, scientist: User
) -> None:
    services.workflow_template_create(
        user=scientist,
        body=_template("long", "import time; time.sleep(120)"),
        project="eo-demo",
    )
    created = requests.post(
        f"{root}/processes/long/execution",
        json={"inputs": {"reason": "x"}},
        headers={"Authorization": f"Token {key}"},
        timeout=30,
    )
    assert created.status_code == 201, created.text
    location = created.headers["Location"]
    _until(location, key, {"running"})
    not_ready = _get(f"{location}/results", key)
    assert not_ready.status_code == 404
    assert not_ready.json()["type"] == f"{EXCEPTIONS}/result-not-ready"

    dismissed = requests.delete(location, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert dismissed.status_code == 200
    assert dismissed.json()["status"] == "dismissed"
    run = WorkflowRun.objects.get(pk=int(created.json()["jobID"]))
    assert run.status == "Stopped"
    # The step itself stops: its unit leaves Running.
    wait_for(
        lambda: not UnitRun.objects.filter(run=run, phase__in=["Pending", "Running"]).exists(),
        120,
        "the step to stop",
    )
    assert _get(location, key).json()["status"] == "dismissed"

    listed = _get(f"{root}/jobs?processID=long&status=dismissed", key).json()["jobs"]
    assert [j["jobID"] for j in listed] == [str(run.pk)]
    assert _get(f"{root}/jobs?processID=long&status=running", key).json()["jobs"] == []


def test_an_outsiders_token_gets_404_on_another_projects_job(
    root: str, key: str, scientist: User
) -> None:
    created = requests.post(
        f"{root}/processes/eo-pipeline/execution",
        json={"inputs": {}},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert created.status_code == 201, created.text
    job = created.json()["jobID"]
    outsider = User.objects.create_user("ogc-outsider")
    other = api_token_create(user=outsider)
    for url in (f"{root}/jobs/{job}", f"{root}/jobs/{job}/results"):
        response = _get(url, other)
        assert response.status_code == 404
        assert response.json()["type"] == f"{EXCEPTIONS}/no-such-job"
    assert _get(f"{live_root(root)}/api/v1/runs/{job}/", other, "Token").status_code == 404
    gone = requests.delete(f"{root}/jobs/{job}", headers={"Authorization": f"Bearer {other}"})
    assert gone.status_code == 404
    assert WorkflowRun.objects.get(pk=int(job)).status != "Stopped"
    assert _get(f"{root}/jobs", other).json()["jobs"] == []
    # The outsider sees the fleet-wide demo process, but cannot run it in eo-demo.
    refused = requests.post(
        f"{root}/processes/eo-pipeline/execution",
        json={"inputs": {"project": "eo-demo"}},
        headers={"Authorization": f"Bearer {other}"},
        timeout=30,
    )
    assert refused.status_code == 400
    assert refused.json()["errors"] == [{"path": "project", "message": "unknown project: eo-demo"}]
    requests.delete(f"{root}/jobs/{job}", headers={"Authorization": f"Bearer {key}"}, timeout=30)


def live_root(root: str) -> str:
    return root.removesuffix("/ogcapi")
