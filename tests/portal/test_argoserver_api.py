"""The Argo Server face (/argo/api/v1/...) without a worker: shapes checked against Argo's
swagger, the namespace = project boundary, Bearer and Token, errors as gRPC statuses, and bad
input refused with nothing stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from portal.argoserver.workflows import node_id
from portal.choices import RunStatus, UnitPhase
from portal.models import RunEvent, UnitRun, WorkflowRun, WorkflowTemplate
from sites.models import Project
from tests import argo_swagger
from tests.factories import api_key

ROOT = Path(__file__).resolve().parents[2]
DEMO = yaml.safe_load((ROOT / "examples" / "eo-pipeline.yaml").read_text())
NS = "eo-demo"
DOMAIN = "portal.multisite.io"


@pytest.fixture
def demo(db: Any) -> None:
    call_command("load_demo", verbosity=0)


def bearer(username: str, scheme: str = "Bearer") -> Client:
    user = User.objects.get(username=username)
    return Client(HTTP_AUTHORIZATION=f"{scheme} {api_key(user)}")


@pytest.fixture
def argo(demo: None) -> Client:
    return bearer("scientist")


def post(client: Client, path: str, body: Any) -> Any:
    return client.post(path, data=json.dumps(body), content_type="application/json")


def put(client: Client, path: str, body: Any | None = None) -> Any:
    return client.put(path, data=json.dumps(body or {}), content_type="application/json")


def create(client: Client, workflow: dict[str, Any] | None = None) -> dict[str, Any]:
    response = post(client, f"/argo/api/v1/workflows/{NS}", {"workflow": workflow or DEMO})
    assert response.status_code == 200, response.content
    return dict(response.json())


def gone_wrong(response: Any, status: int, code: int) -> str:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"code", "message"} and body["code"] == code, body
    argo_swagger.check("grpc.gateway.runtime.Error", body)
    return str(body["message"])


def test_it_creates_the_workflow_in_the_project_and_answers_it_as_argo_shows_it(
    argo: Client,
) -> None:
    wf = create(argo)
    argo_swagger.check("Workflow", wf)
    run = WorkflowRun.objects.get(name=wf["metadata"]["name"])
    assert run.project is not None and run.project.name == NS
    meta = wf["metadata"]
    assert meta["namespace"] == NS and meta["generateName"] == "eo-pipeline-"
    assert meta["labels"]["app"] == "eo-pipeline"
    assert meta["labels"]["workflows.argoproj.io/creator"] == "scientist"
    assert meta["labels"]["workflows.argoproj.io/completed"] == "false"
    assert meta["labels"][f"{DOMAIN}/run"] == str(run.pk)
    assert wf["spec"]["entrypoint"] == "pipeline"
    assert wf["spec"]["templates"][:3] == DEMO["spec"]["templates"][:3]
    # A quantity comes back as Kubernetes writes it: a string.
    gpu = wf["spec"]["templates"][3]["script"]["resources"]["limits"]["nvidia.com/gpu"]
    assert gpu == "1"
    status = wf["status"]
    assert status["phase"] == "Running" and status["progress"] == "0/3"
    name = run.name
    root = status["nodes"][name]
    assert root["type"] == "DAG" and root["templateName"] == "pipeline"
    ingest = status["nodes"][node_id(name, f"{name}.ingest")]
    preprocess = status["nodes"][node_id(name, f"{name}.preprocess")]
    assert root["children"] == [ingest["id"]] and ingest["children"] == [preprocess["id"]]
    assert ingest["boundaryID"] == name and ingest["displayName"] == "ingest"
    assert ingest["type"] == "Pod" and ingest["templateName"] == "ingest"
    # Argo's NodeID: <workflow>-<fnv32a(node name)>.
    assert ingest["id"].startswith(f"{name}-") and ingest["id"][len(name) + 1 :].isdigit()


def test_each_node_names_its_site_in_the_annotation_host_and_message(argo: Client) -> None:
    wf = create(argo)
    run = WorkflowRun.objects.get(name=wf["metadata"]["name"])
    UnitRun.objects.filter(run=run, name="ingest").update(
        site="site-a", phase=UnitPhase.SUCCEEDED, message="done"
    )
    got = argo.get(f"/argo/api/v1/workflows/{NS}/{run.name}").json()
    ingest_id = node_id(run.name, f"{run.name}.ingest")
    sites = json.loads(got["metadata"]["annotations"][f"{DOMAIN}/node-sites"])
    assert sites[ingest_id] == "site-a"
    node = got["status"]["nodes"][ingest_id]
    assert node["hostNodeName"] == "site-a" and node["message"] == "[site-a] done"
    assert node["phase"] == "Succeeded" and got["status"]["progress"] == "1/3"


def test_bearer_and_token_both_authenticate_and_nothing_else_does(demo: None) -> None:
    for scheme in ("Bearer", "Token"):
        assert bearer("scientist", scheme).get(f"/argo/api/v1/workflows/{NS}").status_code == 200
    assert "token not valid" in gone_wrong(Client().get(f"/argo/api/v1/workflows/{NS}"), 401, 16)
    wrong = Client(HTTP_AUTHORIZATION="Bearer not-a-token")
    gone_wrong(wrong.get(f"/argo/api/v1/workflows/{NS}"), 401, 16)


def test_another_projects_namespace_is_forbidden_and_stores_nothing(demo: None) -> None:
    User.objects.create_user("outsider", password="x")
    outsider = bearer("outsider")
    message = gone_wrong(outsider.get(f"/argo/api/v1/workflows/{NS}"), 403, 7)
    assert f'namespace "{NS}"' in message
    gone_wrong(post(outsider, f"/argo/api/v1/workflows/{NS}", {"workflow": DEMO}), 403, 7)
    gone_wrong(outsider.get("/argo/api/v1/workflows/no-such-project"), 403, 7)
    assert not WorkflowRun.objects.exists()


def test_bad_workflows_are_invalid_arguments_naming_the_field(argo: Client) -> None:
    bad = {**DEMO, "spec": {**DEMO["spec"], "entrypoint": "nowhere"}}
    message = gone_wrong(post(argo, f"/argo/api/v1/workflows/{NS}", {"workflow": bad}), 400, 3)
    assert "spec.entrypoint" in message
    gone_wrong(post(argo, f"/argo/api/v1/workflows/{NS}", {}), 400, 3)
    gone_wrong(post(argo, f"/argo/api/v1/workflows/{NS}", {"workflow": "x"}), 400, 3)
    raw = argo.post(f"/argo/api/v1/workflows/{NS}", data="{", content_type="application/json")
    gone_wrong(raw, 400, 3)
    other_ns = {**DEMO, "metadata": {**DEMO["metadata"], "namespace": "elsewhere"}}
    gone_wrong(post(argo, f"/argo/api/v1/workflows/{NS}", {"workflow": other_ns}), 400, 3)
    assert not WorkflowRun.objects.exists()


def test_a_taken_name_is_already_exists_and_a_dry_run_stores_nothing(argo: Client) -> None:
    named = {**DEMO, "metadata": {"name": "my-run"}}
    create(argo, named)
    again = post(argo, f"/argo/api/v1/workflows/{NS}", {"workflow": named})
    assert "already exists" in gone_wrong(again, 409, 6)
    dry = {**DEMO, "metadata": {"name": "dry"}}
    answer = post(argo, f"/argo/api/v1/workflows/{NS}", {"workflow": dry, "serverDryRun": True})
    assert answer.status_code == 200 and answer.json()["metadata"]["name"] == "dry"
    assert list(WorkflowRun.objects.values_list("name", flat=True)) == ["my-run"]


def test_lint_answers_the_workflow_or_the_problem(argo: Client) -> None:
    ok = post(argo, f"/argo/api/v1/workflows/{NS}/lint", {"workflow": DEMO})
    assert ok.status_code == 200 and ok.json()["spec"]["entrypoint"] == "pipeline"
    argo_swagger.check("Workflow", ok.json())
    bad = {**DEMO, "spec": {**DEMO["spec"], "templates": []}}
    gone_wrong(post(argo, f"/argo/api/v1/workflows/{NS}/lint", {"workflow": bad}), 400, 3)
    assert not WorkflowRun.objects.exists()


def test_list_selects_by_label_and_field_and_keeps_only_the_fields_asked(argo: Client) -> None:
    a = create(argo)["metadata"]["name"]
    b = create(argo, {**DEMO, "metadata": {"generateName": "other-", "labels": {"x": "y"}}})
    b_name = b["metadata"]["name"]
    url = f"/argo/api/v1/workflows/{NS}"
    listed = argo.get(url).json()
    argo_swagger.check("WorkflowList", listed)
    assert {w["metadata"]["name"] for w in listed["items"]} == {a, b_name}
    by_label = argo.get(url, {"listOptions.labelSelector": "x=y"}).json()
    assert [w["metadata"]["name"] for w in by_label["items"]] == [b_name]
    not_label = argo.get(url, {"listOptions.labelSelector": "x!=y,app in (eo-pipeline)"}).json()
    assert [w["metadata"]["name"] for w in not_label["items"]] == [a]
    by_field = argo.get(url, {"listOptions.fieldSelector": f"metadata.name={a}"}).json()
    assert [w["metadata"]["name"] for w in by_field["items"]] == [a]
    slim = argo.get(url, {"fields": "items.metadata.name,items.status.phase"}).json()
    assert slim["items"][0].keys() == {"metadata", "status"}
    assert slim["items"][0]["metadata"].keys() == {"name"}
    page = argo.get(url, {"listOptions.limit": "1"}).json()
    assert len(page["items"]) == 1 and page["metadata"]["continue"] == "1"
    gone_wrong(argo.get(url, {"listOptions.labelSelector": "a in b"}), 400, 3)
    gone_wrong(argo.get(url, {"listOptions.fieldSelector": "spec.x=1"}), 400, 3)
    gone_wrong(argo.get(url, {"listOptions.limit": "many"}), 400, 3)


def test_an_unknown_workflow_is_not_found(argo: Client) -> None:
    message = gone_wrong(argo.get(f"/argo/api/v1/workflows/{NS}/nope"), 404, 5)
    assert message == 'workflows.argoproj.io "nope" not found'
    gone_wrong(argo.get(f"/argo/api/v1/workflows/{NS}/@latest"), 404, 5)
    create(argo)
    newest = create(argo)["metadata"]["name"]
    assert argo.get(f"/argo/api/v1/workflows/{NS}/@latest").json()["metadata"]["name"] == newest


def test_suspend_resume_and_stop_change_the_run_as_argo_shows_it(argo: Client) -> None:
    name = create(argo)["metadata"]["name"]
    url = f"/argo/api/v1/workflows/{NS}/{name}"
    suspended = put(argo, f"{url}/suspend")
    assert suspended.status_code == 200 and suspended.json()["spec"]["suspend"] is True
    resumed = put(argo, f"{url}/resume")
    assert resumed.status_code == 200 and "suspend" not in resumed.json()["spec"]
    stopped = put(argo, f"{url}/stop", {"name": name, "namespace": NS})
    assert stopped.status_code == 200, stopped.content
    status = stopped.json()["status"]
    assert status["phase"] == "Failed" and status["message"] == "Stopped with strategy 'Stop'"
    assert stopped.json()["spec"]["shutdown"] == "Stop"
    assert WorkflowRun.objects.get(name=name).status == RunStatus.STOPPED
    # Stopping what has ended: refused (FailedPrecondition), not a 500.
    gone_wrong(put(argo, f"{url}/terminate"), 400, 9)
    gone_wrong(put(argo, f"{url}/stop", {"nodeFieldSelector": "displayName=x"}), 400, 3)


def test_delete_refuses_an_active_run_and_removes_an_ended_one(argo: Client) -> None:
    name = create(argo)["metadata"]["name"]
    url = f"/argo/api/v1/workflows/{NS}/{name}"
    assert "stop or terminate" in gone_wrong(argo.delete(url), 400, 9)
    put(argo, f"{url}/terminate")
    deleted = argo.delete(url)
    assert deleted.status_code == 200 and deleted.json() == {}
    assert not WorkflowRun.objects.filter(name=name).exists()
    assert not RunEvent.objects.exists()
    gone_wrong(argo.delete(url), 404, 5)


def test_resubmit_answers_the_new_workflow(argo: Client) -> None:
    name = create(argo)["metadata"]["name"]
    put(argo, f"/argo/api/v1/workflows/{NS}/{name}/terminate")
    again = put(argo, f"/argo/api/v1/workflows/{NS}/{name}/resubmit", {"memoized": False})
    assert again.status_code == 200, again.content
    new = again.json()["metadata"]
    assert new["name"] != name
    assert new["labels"]["workflows.argoproj.io/resubmitted-from-workflow"] == name
    bad = put(argo, f"/argo/api/v1/workflows/{NS}/{name}/resubmit", {"parameters": ["a=b"]})
    gone_wrong(bad, 400, 3)


TEMPLATE = {
    "apiVersion": "argoproj.io/v1alpha1",
    "kind": "WorkflowTemplate",
    "metadata": {"name": "eo-tools"},
    "spec": {"templates": [{"name": "echo", "container": {"image": "alpine"}}]},
}


def catalogue(client: Client) -> list[dict[str, Any]]:
    """The portal's own REST list of the catalogue (paginated or not)."""
    body = client.get("/api/v1/workflow-templates/").json()
    return list(body["results"] if isinstance(body, dict) else body)


def test_workflow_templates_are_the_projects_catalogue(argo: Client) -> None:
    url = f"/argo/api/v1/workflow-templates/{NS}"
    # Another project's template of the same name is that project's: no clash, not listed.
    elsewhere = Project.objects.create(name="elsewhere")
    WorkflowTemplate.objects.create(name="eo-tools", project=elsewhere, manifest=TEMPLATE)
    created = post(argo, url, {"namespace": NS, "template": TEMPLATE})
    assert created.status_code == 200, created.content
    argo_swagger.check("WorkflowTemplate", created.json())
    row = WorkflowTemplate.objects.get(name="eo-tools", project__name=NS)
    assert row.project is not None and row.project.name == NS
    listed = argo.get(url).json()
    argo_swagger.check("WorkflowTemplateList", listed)
    assert [t["metadata"]["name"] for t in listed["items"]] == ["eo-tools"]
    one = argo.get(f"{url}/eo-tools").json()
    assert one["metadata"]["namespace"] == NS and one["spec"] == TEMPLATE["spec"]
    assert "eo-tools" in {t["name"] for t in catalogue(bearer("scientist", "Token"))}
    gone_wrong(post(argo, url, {"template": TEMPLATE}), 409, 6)
    uses = {
        **DEMO,
        "metadata": {"generateName": "uses-"},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {
                    "name": "main",
                    "steps": [
                        [{"name": "e", "templateRef": {"name": "eo-tools", "template": "echo"}}]
                    ],
                }
            ],
        },
    }
    assert post(argo, f"/argo/api/v1/workflows/{NS}/lint", {"workflow": uses}).status_code == 200
    bad = {**TEMPLATE, "metadata": {"name": "Not_A_DNS_Name"}}
    assert "metadata.name" in gone_wrong(post(argo, url, {"template": bad}), 400, 3)
    gone_wrong(argo.get(f"{url}/nope"), 404, 5)


def test_info_version_and_userinfo_are_argos_shapes(argo: Client) -> None:
    for path, definition in (
        ("info", "InfoResponse"),
        ("version", "Version"),
        ("userinfo", "GetUserInfoResponse"),
    ):
        response = argo.get(f"/argo/api/v1/{path}")
        assert response.status_code == 200
        argo_swagger.check(definition, response.json())
    assert argo.get("/argo/api/v1/userinfo").json()["groups"] == [NS]


STEPS: dict[str, Any] = {
    "apiVersion": "argoproj.io/v1alpha1",
    "kind": "Workflow",
    "metadata": {"generateName": "steps-"},
    "spec": {
        "entrypoint": "main",
        "templates": [
            {
                "name": "main",
                "steps": [
                    [{"name": "a", "template": "echo"}],
                    [{"name": "b", "template": "echo"}, {"name": "c", "template": "echo"}],
                ],
            },
            {"name": "echo", "container": {"image": "alpine", "command": ["true"]}},
        ],
    },
}


def test_steps_get_argos_step_group_nodes(argo: Client) -> None:
    wf = create(argo, STEPS)
    name = wf["metadata"]["name"]
    nodes = wf["status"]["nodes"]
    group0, group1 = node_id(name, f"{name}[0]"), node_id(name, f"{name}[1]")
    assert nodes[name]["type"] == "Steps" and nodes[name]["children"] == [group0]
    assert nodes[group0]["type"] == "StepGroup"
    a = node_id(name, f"{name}[0].a")
    assert nodes[group0]["children"] == [a] and nodes[a]["children"] == [group1]
    assert set(nodes[group1]["children"]) == {
        node_id(name, f"{name}[1].b"),
        node_id(name, f"{name}[1].c"),
    }


def test_a_single_template_workflow_is_one_node(argo: Client) -> None:
    single = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "hello-"},
        "spec": {"entrypoint": "echo", "templates": STEPS["spec"]["templates"][1:]},
    }
    wf = create(argo, single)
    name = wf["metadata"]["name"]
    assert list(wf["status"]["nodes"]) == [name]
    assert wf["status"]["nodes"][name]["type"] == "Pod"


def test_the_workflow_paths_also_answer_at_the_root(argo: Client) -> None:
    # Hera joins "<portal>/argo" and "api/v1/..." with urljoin, which drops "argo".
    assert argo.get(f"/api/v1/workflows/{NS}").status_code == 200
    assert argo.get("/api/v1/version").status_code == 200


def stream_of(response: Any) -> list[dict[str, Any]]:
    """A grpc-gateway stream read as newline-delimited JSON, each line checked against the
    swagger's stream result of that operation."""
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    text = b"".join(response.streaming_content).decode()
    return [json.loads(line) for line in text.splitlines() if line]


def test_the_watch_of_an_ended_workflow_sends_it_and_ends(argo: Client, settings: Any) -> None:
    settings.PORTAL_ARGO_WATCH_POLL_SECONDS = 0
    name = create(argo)["metadata"]["name"]
    put(argo, f"/argo/api/v1/workflows/{NS}/{name}/terminate")
    url = f"/argo/api/v1/workflow-events/{NS}"
    messages = stream_of(argo.get(url, {"listOptions.fieldSelector": f"metadata.name={name}"}))
    ok = argo_swagger.swagger()["paths"]["/api/v1/workflow-events/{namespace}"]["get"]
    schema = {
        **ok["responses"]["200"]["schema"],
        "definitions": argo_swagger.swagger()["definitions"],
    }
    for message in messages:
        argo_swagger.validator_for(schema).validate(message)
    assert [m["result"]["type"] for m in messages] == ["ADDED"]
    assert messages[0]["result"]["object"]["status"]["phase"] == "Failed"
    missing = argo.get(url, {"listOptions.fieldSelector": "metadata.name=nope"})
    gone_wrong(missing, 404, 5)


def test_the_watch_of_a_namespace_ends_after_its_time(argo: Client, settings: Any) -> None:
    settings.PORTAL_ARGO_WATCH_SECONDS = 0
    name = create(argo)["metadata"]["name"]
    messages = stream_of(argo.get(f"/argo/api/v1/workflow-events/{NS}"))
    assert [(m["result"]["type"], m["result"]["object"]["metadata"]["name"]) for m in messages] == [
        ("ADDED", name)
    ]


def test_logs_of_a_workflow_that_ran_nothing_are_an_empty_stream(argo: Client) -> None:
    name = create(argo)["metadata"]["name"]
    assert stream_of(argo.get(f"/argo/api/v1/workflows/{NS}/{name}/log")) == []
    bad = argo.get(f"/argo/api/v1/workflows/{NS}/{name}/log", {"logOptions.tailLines": "-1"})
    gone_wrong(bad, 400, 3)


def test_retry_gives_failed_units_a_new_attempt(argo: Client) -> None:
    name = create(argo)["metadata"]["name"]
    url = f"/argo/api/v1/workflows/{NS}/{name}"
    gone_wrong(put(argo, f"{url}/retry"), 400, 9)  # a running workflow has nothing to retry
    run = WorkflowRun.objects.get(name=name)
    UnitRun.objects.filter(run=run, name="ingest").update(phase=UnitPhase.FAILED)
    WorkflowRun.objects.filter(pk=run.pk).update(status=RunStatus.FAILED)
    gone_wrong(put(argo, f"{url}/retry", {"restartSuccessful": True}), 400, 3)
    retried = put(argo, f"{url}/retry", {"name": name, "namespace": NS})
    assert retried.status_code == 200, retried.content
    assert retried.json()["status"]["phase"] == "Running"
    assert UnitRun.objects.get(run=run, name="ingest").attempt == 2


def test_resume_takes_argos_node_field_selector(argo: Client) -> None:
    name = create(argo)["metadata"]["name"]
    url = f"/argo/api/v1/workflows/{NS}/{name}/resume"
    unknown = put(argo, url, {"nodeFieldSelector": "displayName=nowhere"})
    assert "nowhere" in gone_wrong(unknown, 400, 3)
    gone_wrong(put(argo, url, {"nodeFieldSelector": "phase=Running"}), 400, 3)
    # A step that is not running has nothing to resume: FailedPrecondition, not a 500.
    gone_wrong(put(argo, url, {"nodeFieldSelector": f"name={name}.ingest"}), 400, 9)
