"""The Argo Server face with the real clients against the live stack (worker, watcher, the
sandbox fleet): Hera's WorkflowsService, the generated argo-workflows SDK, and the argo CLI's
HTTP exchange for ``argo submit --watch`` / ``argo get`` / ``argo logs``. No mock of the
portal's own API: every call goes over HTTP to the live server."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any, cast

import pytest
from argo_workflows.api.workflow_service_api import WorkflowServiceApi
from argo_workflows.api.workflow_template_service_api import WorkflowTemplateServiceApi
from argo_workflows.api_client import ApiClient
from argo_workflows.configuration import Configuration
from argo_workflows.exceptions import NotFoundException
from argo_workflows.model.container import Container
from argo_workflows.model.io_argoproj_workflow_v1alpha1_template import (
    IoArgoprojWorkflowV1alpha1Template,
)
from argo_workflows.model.io_argoproj_workflow_v1alpha1_workflow_spec import (
    IoArgoprojWorkflowV1alpha1WorkflowSpec,
)
from argo_workflows.model.io_argoproj_workflow_v1alpha1_workflow_template import (
    IoArgoprojWorkflowV1alpha1WorkflowTemplate,
)
from argo_workflows.model.io_argoproj_workflow_v1alpha1_workflow_template_create_request import (
    IoArgoprojWorkflowV1alpha1WorkflowTemplateCreateRequest,
)
from argo_workflows.model.io_argoproj_workflow_v1alpha1_workflow_terminate_request import (
    IoArgoprojWorkflowV1alpha1WorkflowTerminateRequest,
)
from argo_workflows.model.object_meta import ObjectMeta
from django.contrib.auth.models import User
from hera.exceptions import BadRequest
from hera.workflows import Container as HeraContainer
from hera.workflows import Workflow, WorkflowsService
from hera.workflows.models import Workflow as WorkflowModel
from hera.workflows.models import WorkflowResubmitRequest, WorkflowStopRequest

from portal.choices import RunStatus
from portal.models import WorkflowRun
from tests import argo_swagger
from tests.factories import api_key
from tests.fixtures_stack import Stack, wait_for
from tests.integration.hera_demo import eo_pipeline

pytestmark = [pytest.mark.integration]

NS = "eo-demo"
DOMAIN = "portal.multisite.io"


@pytest.fixture
def token(live: Stack) -> str:
    user = User.objects.get(username="scientist")
    return api_key(user)


@pytest.fixture
def hera(live_server: Any, token: str) -> WorkflowsService:
    # The one line a Hera user changes: the host (and their portal token).
    return WorkflowsService(host=f"{live_server.url}/argo", token=token, namespace=NS)


def test_hera_submits_the_demo_and_waits_for_it_to_succeed_site_by_site(
    hera: WorkflowsService,
) -> None:
    workflow = eo_pipeline(hera)
    created = cast(WorkflowModel, workflow.create())
    assert created.metadata.namespace == NS and created.status is not None
    done = cast(WorkflowModel, workflow.wait(poll_interval=1))
    assert done.status is not None and done.status.phase == "Succeeded", done.status
    assert done.status.progress == "3/3"
    nodes = done.status.nodes or {}
    sites = {n.display_name: n.host_node_name for n in nodes.values() if n.type == "Pod"}
    assert sites == {"ingest": "site-a", "preprocess": "site-b", "inference": "site-c"}
    for node in nodes.values():
        if node.type == "Pod":
            assert (node.message or "").startswith(f"[{node.host_node_name}]")
    annotated = json.loads((done.metadata.annotations or {})[f"{DOMAIN}/node-sites"])
    assert {nodes[i].display_name: site for i, site in annotated.items()} == sites
    run = WorkflowRun.objects.get(name=done.metadata.name)
    assert run.project is not None and run.project.name == NS
    assert run.status == RunStatus.SUCCEEDED


def test_hera_lints_stops_and_resubmits(hera: WorkflowsService) -> None:
    linted = cast(WorkflowModel, eo_pipeline(hera).lint())
    assert linted.spec.entrypoint == "pipeline"
    broken = Workflow(
        generate_name="broken-",
        namespace=NS,
        entrypoint="missing",
        workflows_service=hera,
        templates=[HeraContainer(name="echo", image="alpine")],
    )
    with pytest.raises(BadRequest, match="entrypoint"):
        broken.lint()

    # Long enough (in sandbox time) to be running when it is stopped.
    slow = eo_pipeline(hera, {f"{DOMAIN}/sandbox-duration": "3600s"})
    name = str(slow.create().metadata.name)
    stopped = hera.stop_workflow(name, WorkflowStopRequest(name=name, namespace=NS))
    assert stopped.status is not None and stopped.status.phase == "Failed"
    assert stopped.status.message == "Stopped with strategy 'Stop'"
    assert stopped.spec.shutdown == "Stop"
    assert WorkflowRun.objects.get(name=name).status == RunStatus.STOPPED

    again = hera.resubmit_workflow(name, WorkflowResubmitRequest(name=name, namespace=NS))
    new = str(again.metadata.name)
    assert new != name
    assert (again.metadata.labels or {})["workflows.argoproj.io/resubmitted-from-workflow"] == name
    assert WorkflowRun.objects.get(name=new).resubmitted_from == WorkflowRun.objects.get(name=name)
    hera.stop_workflow(new, WorkflowStopRequest(name=new, namespace=NS))


@pytest.fixture
def sdk(live_server: Any, token: str) -> Iterator[ApiClient]:
    config = Configuration(host=f"{live_server.url}/argo")
    config.api_key["BearerToken"] = token
    config.api_key_prefix["BearerToken"] = "Bearer"
    with ApiClient(config) as client:
        yield client


def test_the_sdk_lists_gets_and_deletes_workflows_in_the_projects_namespace(
    live: Stack, hera: WorkflowsService, sdk: ApiClient
) -> None:
    name = eo_pipeline(hera, {f"{DOMAIN}/sandbox-duration": "3600s"}).create().metadata.name
    run_id = WorkflowRun.objects.get(name=name).pk
    # Its first step workflow exists on Karmada before it is stopped and deleted.
    wait_for(lambda: live.workflows(run_id), what="the first step workflow")
    api = WorkflowServiceApi(sdk)
    listed = api.list_workflows(NS, list_options_label_selector="app=eo-pipeline")
    assert name in [w.metadata.name for w in listed["items"]]
    got = api.get_workflow(NS, name)
    assert got.metadata.name == name and got.status.phase == "Running"
    api.terminate_workflow(
        NS, name, IoArgoprojWorkflowV1alpha1WorkflowTerminateRequest(name=name, namespace=NS)
    )
    api.delete_workflow(NS, name)
    assert not WorkflowRun.objects.filter(name=name).exists()
    with pytest.raises(NotFoundException):
        api.get_workflow(NS, name)
    # Its step workflows go with it: nothing is left on Karmada that no run names.
    wait_for(lambda: not live.workflows(run_id), what="the step workflows to be deleted")


def test_a_template_created_with_the_sdk_is_in_the_catalogue(
    sdk: ApiClient, live_server: Any, token: str
) -> None:
    request = IoArgoprojWorkflowV1alpha1WorkflowTemplateCreateRequest(
        namespace=NS,
        template=IoArgoprojWorkflowV1alpha1WorkflowTemplate(
            metadata=ObjectMeta(name="sdk-echo"),
            spec=IoArgoprojWorkflowV1alpha1WorkflowSpec(
                entrypoint="echo",
                templates=[
                    IoArgoprojWorkflowV1alpha1Template(
                        name="echo", container=Container(image="alpine", command=["true"])
                    )
                ],
            ),
        ),
    )
    created = WorkflowTemplateServiceApi(sdk).create_workflow_template(NS, request)
    assert created.metadata.name == "sdk-echo" and created.metadata.namespace == NS
    portal = urllib.request.Request(
        f"{live_server.url}/api/v1/workflow-templates/sdk-echo/",
        headers={"Authorization": f"Token {token}"},
    )
    with urllib.request.urlopen(portal) as response:
        entry = json.loads(response.read())
    assert entry["project"] == NS and entry["templates"] == ["echo"]


# The argo CLI's side of `argo submit --watch hello.yaml`, `argo get <name>` and
# `argo logs <name>` against Argo Server, as its HTTP client sends them
# (pkg/apiclient/http1: a request's fields not in the path become the query; streams are read
# with "Accept: text/event-stream", each message a `data: {"result": ...}` line) and as Argo's
# e2e tests call them (test/e2e/argo_server_test.go, TestWorkflowServiceStream).
HELLO = {
    "apiVersion": "argoproj.io/v1alpha1",
    "kind": "Workflow",
    "metadata": {"generateName": "hello-world-"},
    "spec": {
        "entrypoint": "main",
        "templates": [
            {
                "name": "main",
                "metadata": {"annotations": {f"{DOMAIN}/sandbox-result": "hello from the portal"}},
                "container": {"image": "argoproj/argosay:v2", "args": ["echo", "hello"]},
            }
        ],
    },
}
EXCHANGE = [
    # argo submit: CreateWorkflow
    ("POST", "/api/v1/workflows/{namespace}", {}, {"namespace": NS, "workflow": HELLO}),
    # --watch: WatchWorkflows until the workflow has finished (the CLI watches again on EOF)
    (
        "STREAM",
        "/api/v1/workflow-events/{namespace}",
        {
            "listOptions.fieldSelector": "metadata.name={name}",
            "listOptions.resourceVersion": "0",
        },
        None,
    ),
    # argo get
    ("GET", "/api/v1/workflows/{namespace}/{name}", {}, None),
    # argo logs: WorkflowLogs with the CLI's default container
    ("STREAM", "/api/v1/workflows/{namespace}/{name}/log", {"logOptions.container": "main"}, None),
]
SWAGGER_PATHS = {
    "/api/v1/workflows/{namespace}": "post",
    "/api/v1/workflow-events/{namespace}": "get",
    "/api/v1/workflows/{namespace}/{name}": "get",
    "/api/v1/workflows/{namespace}/{name}/log": "get",
}


def _call(
    base: str, token: str, method: str, path: str, query: dict[str, str], body: Any
) -> urllib.request.Request:
    url = f"{base}{path}?{urllib.parse.urlencode(query)}"
    headers = {"Authorization": f"Bearer {token}"}
    if method == "STREAM":
        headers["Accept"] = "text/event-stream"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    verb = "GET" if method == "STREAM" else method
    return urllib.request.Request(url, data=data, headers=headers, method=verb)


def _events(request: urllib.request.Request) -> Iterator[dict[str, Any]]:
    with urllib.request.urlopen(request) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        for raw in response:
            line = raw.decode().rstrip("\n")
            if len(line) <= len("data: "):
                continue  # the blank line after each event
            assert line.startswith("data: "), line
            yield json.loads(line[len("data: ") :])


def test_the_argo_clis_submit_watch_get_and_logs_are_answered_as_it_expects(
    live_server: Any, token: str
) -> None:
    base = f"{live_server.url}/argo"
    name = ""
    watched: list[dict[str, Any]] = []
    logged: list[dict[str, Any]] = []
    for method, template, query, body in EXCHANGE:
        path = template.format(namespace=NS, name=name)
        query = {k: v.format(name=name) for k, v in query.items()}
        operation = argo_swagger.swagger()["paths"][template][SWAGGER_PATHS[template]]
        # The recorded request is one Argo's swagger declares: its query names and its body.
        declared = {p["name"]: p for p in operation["parameters"]}
        assert set(query) <= set(declared), set(query) - set(declared)
        if body is not None:
            argo_swagger.check(declared["body"]["schema"]["$ref"].rsplit("/", 1)[-1], body)
        ok = operation["responses"]["200"]["schema"]
        if method == "STREAM":
            stream_schema = {**ok, "definitions": argo_swagger.swagger()["definitions"]}
            seen = watched if "workflow-events" in template else logged
            while True:
                for message in _events(_call(base, token, method, path, query, body)):
                    argo_swagger.validator_for(stream_schema).validate(message)
                    seen.append(message["result"])
                finished = seen and seen[-1].get("object", {}).get("status", {}).get("finishedAt")
                if "workflow-events" not in template or finished:
                    break
            continue
        with urllib.request.urlopen(_call(base, token, method, path, query, body)) as response:
            answer = json.loads(response.read())
        argo_swagger.check(ok["$ref"].rsplit("/", 1)[-1], answer)
        name = name or answer["metadata"]["name"]
        if method == "GET":
            got = answer
    assert watched[0]["type"] == "ADDED"
    assert all(e["object"]["metadata"]["name"] == name for e in watched)
    assert watched[-1]["object"]["status"]["phase"] == "Succeeded"
    assert got["status"]["phase"] == "Succeeded"
    node = got["status"]["nodes"][name]
    assert node["type"] == "Pod" and node["hostNodeName"] in {"site-a", "site-b", "site-c"}
    assert [e["content"] for e in logged] == ["hello from the portal"]
    assert logged[0]["podName"]


def test_an_unknown_workflow_is_a_grpc_not_found_for_the_cli(live_server: Any, token: str) -> None:
    request = _call(
        f"{live_server.url}/argo", token, "GET", f"/api/v1/workflows/{NS}/nope", {}, None
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request)
    assert caught.value.code == 404
    body = json.loads(caught.value.read())
    assert body == {"code": 5, "message": 'workflows.argoproj.io "nope" not found'}
