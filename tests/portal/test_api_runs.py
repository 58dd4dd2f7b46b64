"""Runs over REST: preview, submit, list, detail, actions (DESIGN section 9), with their
permission boundaries and bad input. Karmada is not involved: nothing here needs a worker."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework import serializers
from rest_framework.test import APIClient

from portal.api.serializers import UnitRunSerializer, WorkflowRunSerializer
from portal.models import PlacementDecision, UnitRun, WorkflowRun
from sites.models import Site

ROOT = Path(__file__).resolve().parents[2]
DEMO = (ROOT / "examples" / "eo-pipeline.yaml").read_text()
EXAMPLES = ROOT.parent / "shared" / "reference" / "argo" / "examples"


@pytest.fixture
def demo(db: Any) -> None:
    call_command("load_demo", verbosity=0)


def client_for(username: str) -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.get(username=username))
    return client


@pytest.fixture
def sci(demo: None) -> APIClient:
    return client_for("scientist")


@pytest.fixture
def outsider_client(demo: None, outsider_api: APIClient) -> APIClient:
    """The shared outsider, with the demo fleet loaded: its project exists, they are not in it."""
    return outsider_api


def preview(
    client: APIClient,
    body: str | bytes,
    content_type: str = "application/yaml",
    query: str = "?project=eo-demo",
) -> Any:
    return client.post(f"/api/v1/runs/preview/{query}", data=body, content_type=content_type)


def test_it_previews_the_demo_at_three_sites_and_stores_nothing(sci: APIClient) -> None:
    response = preview(sci, DEMO)
    assert response.status_code == 200, response.content
    units = {u["name"]: u for u in response.json()["units"]}
    assert units["ingest"]["site"] == "site-a" and units["ingest"]["timing"] == "submit"
    assert "data locality" in units["ingest"]["reason"]
    assert units["preprocess"]["site"] is None and units["preprocess"]["timing"] == "runtime"
    assert units["inference"]["site"] == "site-c"
    assert units["inference"]["depends"] == "preprocess"
    for candidate in units["ingest"]["candidates"]:
        assert set(candidate) == {
            "site",
            "eligible",
            "why",
            "score",
            "bytes_to_move",
            "est_transfer_s",
        }
    b = next(c for c in units["ingest"]["candidates"] if c["site"] == "site-b")
    assert b["bytes_to_move"] > 0 and b["est_transfer_s"] > 0
    assert WorkflowRun.objects.count() == 0 and UnitRun.objects.count() == 0


def test_it_previews_json_and_the_manifest_wrapper(sci: APIClient) -> None:
    doc = yaml.safe_load(DEMO)
    assert preview(sci, json.dumps(doc), "application/json").status_code == 200
    wrapped = json.dumps({"manifest": doc, "project": "eo-demo"})
    response = preview(sci, wrapped, "application/json", query="")
    assert response.status_code == 200, response.content
    assert len(response.json()["units"]) == 3


def test_ingest_follows_its_dataset_when_the_replica_moves(sci: APIClient) -> None:
    from sites.models import DatasetReplica

    DatasetReplica.objects.filter(dataset__name="sentinel2-l1c").update(
        site=Site.objects.get(name="site-b")
    )
    units = {u["name"]: u for u in preview(sci, DEMO).json()["units"]}
    assert units["ingest"]["site"] == "site-b"


@pytest.mark.parametrize("change", [{"cordoned": True}, {"ready": False}])
def test_a_cordoned_or_unready_site_is_never_chosen_and_says_why(
    sci: APIClient, change: dict[str, bool]
) -> None:
    Site.objects.filter(name="site-a").update(**change)
    units = {u["name"]: u for u in preview(sci, DEMO).json()["units"]}
    assert units["ingest"]["site"] != "site-a"
    a = next(c for c in units["ingest"]["candidates"] if c["site"] == "site-a")
    assert a["eligible"] is False
    assert ("cordoned" if "cordoned" in change else "not ready") in a["why"]


def test_a_gpu_unit_with_no_gpu_site_is_refused_at_submit_with_reasons(sci: APIClient) -> None:
    Site.objects.filter(name="site-c").update(cordoned=True)
    units = {u["name"]: u for u in preview(sci, DEMO).json()["units"]}
    assert units["inference"]["site"] is None
    assert all(not c["eligible"] for c in units["inference"]["candidates"])
    response = sci.post("/api/v1/runs/?project=eo-demo", data=DEMO, content_type="application/yaml")
    assert response.status_code == 400
    assert response.json()["errors"][0]["path"] == "units.inference"
    assert WorkflowRun.objects.count() == 0


def test_every_reference_example_previews_or_is_refused_with_paths(
    sci: APIClient, capsys: pytest.CaptureFixture[str]
) -> None:
    if not EXAMPLES.is_dir():
        pytest.skip(f"reference examples not found at {EXAMPLES}")
    counts = {200: 0, 400: 0}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        response = preview(sci, path.read_bytes(), query="")
        assert response.status_code in counts, (path.name, response.status_code, response.content)
        counts[response.status_code] += 1
        if response.status_code == 400:
            errors = response.json()["errors"]
            assert errors and all({"path", "message"} <= set(e) for e in errors), path.name
    with capsys.disabled():
        print(f"\nreference examples: {counts[200]} previewed, {counts[400]} refused with paths")
    assert counts[200] > counts[400]


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ("a: &a [*a, *a]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b, *b]\n", 400),
        ("- just\n- a list\n", 400),
        ("kind: Workflow\n", 400),
        ("{not yaml: [", 400),
        ("", 400),
        ("\x00\x01binary", 400),
    ],
)
def test_it_refuses_bad_documents_with_a_4xx(sci: APIClient, body: str, status: int) -> None:
    response = preview(sci, body)
    assert response.status_code == status, response.content
    assert response.json()["errors"]


def test_a_billion_laughs_document_is_refused(sci: APIClient) -> None:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    response = preview(sci, "\n".join(lines))
    assert response.status_code == 400
    assert "expands" in json.dumps(response.json()).lower()


def test_a_10mb_body_is_refused_before_it_is_read(sci: APIClient) -> None:
    response = preview(sci, b"x" * (10 * 1024 * 1024))
    assert response.status_code == 413
    assert "limit" in response.json()["errors"][0]["message"]


def test_unknown_project_and_parameters_name_the_field(sci: APIClient) -> None:
    response = preview(sci, DEMO, query="?project=not-mine")
    assert response.status_code == 400
    assert response.json()["errors"][0]["path"] == "project"
    wrapped = json.dumps({"manifest": yaml.safe_load(DEMO), "arguments": {"nope": "1"}})
    response = preview(sci, wrapped, "application/json", query="")
    assert response.status_code == 400
    assert response.json()["errors"][0]["path"] == "arguments.nope"


def test_a_project_the_user_is_not_in_is_refused(outsider_client: APIClient) -> None:
    response = preview(outsider_client, DEMO)
    assert response.status_code == 400
    assert response.json()["errors"][0]["path"] == "project"


def test_runs_need_credentials(demo: None) -> None:
    anonymous = APIClient()
    assert (
        anonymous.post(
            "/api/v1/runs/preview/", data=DEMO, content_type="application/yaml"
        ).status_code
        == 401
    )
    assert anonymous.get("/api/v1/runs/").status_code == 401


def test_submit_stores_the_run_its_units_and_its_decisions(sci: APIClient) -> None:
    response = sci.post("/api/v1/runs/?project=eo-demo", data=DEMO, content_type="application/yaml")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "Pending" and body["project"] == "eo-demo"
    assert body["name"].startswith("eo-pipeline-")
    units = {u["name"]: u for u in body["units"]}
    assert units["ingest"]["site"] == "site-a" and units["ingest"]["timing"] == "submit"
    assert units["preprocess"]["site"] == "" and units["preprocess"]["timing"] == "runtime"
    assert all(u["phase"] == "Pending" and u["attempt"] == 1 for u in units.values())
    run = WorkflowRun.objects.get(pk=body["id"])
    assert PlacementDecision.objects.filter(run=run, source="rule").count() == 2
    decisions = sci.get(f"/api/v1/runs/{run.pk}/decisions/").json()
    assert {d["unit"] for d in decisions} == {"ingest", "inference"}
    assert all(len(d["candidates"]) == 3 for d in decisions)


def test_an_invalid_submission_stores_nothing(sci: APIClient) -> None:
    broken = DEMO.replace("depends: ingest", "depends: nowhere")
    response = sci.post(
        "/api/v1/runs/?project=eo-demo", data=broken, content_type="application/yaml"
    )
    assert response.status_code == 400
    assert any("depends" in e["path"] for e in response.json()["errors"])
    assert WorkflowRun.objects.count() == 0 and UnitRun.objects.count() == 0


def test_the_list_filters_and_the_outsider_sees_nothing(
    sci: APIClient, outsider_client: APIClient
) -> None:
    run_id = sci.post(
        "/api/v1/runs/?project=eo-demo", data=DEMO, content_type="application/yaml"
    ).json()["id"]
    assert [r["id"] for r in sci.get("/api/v1/runs/").json()["results"]] == [run_id]
    assert sci.get("/api/v1/runs/?status=Pending").json()["count"] == 1
    assert sci.get("/api/v1/runs/?status=Succeeded").json()["count"] == 0
    assert sci.get("/api/v1/runs/?site=site-a").json()["count"] == 1
    assert sci.get("/api/v1/runs/?project=eo-demo").json()["count"] == 1
    assert sci.get("/api/v1/runs/?status=Bogus").status_code == 400
    assert outsider_client.get("/api/v1/runs/").json()["count"] == 0
    assert outsider_client.get(f"/api/v1/runs/{run_id}/").status_code == 404
    assert outsider_client.get(f"/api/v1/runs/{run_id}/decisions/").status_code == 404
    assert outsider_client.post(f"/api/v1/runs/{run_id}/stop/").status_code == 404


def test_actions_that_the_state_does_not_allow_are_409(sci: APIClient) -> None:
    run_id = sci.post(
        "/api/v1/runs/?project=eo-demo", data=DEMO, content_type="application/yaml"
    ).json()["id"]
    assert sci.post(f"/api/v1/runs/{run_id}/retry/").status_code == 409
    assert sci.post(f"/api/v1/runs/{run_id}/stop/").status_code == 200
    assert sci.post(f"/api/v1/runs/{run_id}/stop/").status_code == 409
    assert WorkflowRun.objects.get(pk=run_id).status == "Stopped"


@pytest.mark.parametrize(
    ("body", "said"), [("{not json", "the body must be JSON"), ("[1]", "a JSON object")]
)
@pytest.mark.parametrize("action", ["stop", "resume"])
def test_an_action_body_that_is_not_a_json_object_is_a_400_and_changes_nothing(
    sci: APIClient, action: str, body: str, said: str
) -> None:
    run_id = sci.post(
        "/api/v1/runs/?project=eo-demo", data=DEMO, content_type="application/yaml"
    ).json()["id"]
    answer = sci.post(
        f"/api/v1/runs/{run_id}/{action}/", data=body, content_type="application/json"
    )
    assert answer.status_code == 400
    assert said in str(answer.json())
    assert WorkflowRun.objects.get(pk=run_id).status != "Stopped"


def test_every_change_to_the_planner_tables_is_seen_by_the_next_plan(sci: APIClient) -> None:
    """The planner inputs are reused while their tables are unchanged; any write (an update,
    even a second one to the same row in the same transaction; a delete; an insert) is seen."""
    from placement import selectors
    from placement.models import PlacementRule

    def ingest_site() -> str | None:
        return {u["name"]: u for u in preview(sci, DEMO).json()["units"]}["ingest"]["site"]

    assert ingest_site() == "site-a"
    first = selectors.planner_inputs()
    assert selectors.planner_inputs() is first  # nothing changed: reused
    Site.objects.filter(name="site-a").update(cordoned=True)
    assert ingest_site() != "site-a"
    Site.objects.filter(name="site-a").update(cordoned=False)
    assert ingest_site() == "site-a"
    Site.objects.filter(name="site-a").update(cordoned=True)  # same row, same transaction
    assert ingest_site() != "site-a"
    Site.objects.filter(name="site-a").update(cordoned=False)
    rules = PlacementRule.objects.count()
    PlacementRule.objects.all().delete()
    assert len(selectors.planner_inputs().rules.rules) == 0 < rules


def test_a_named_workflow_submitted_twice_gets_a_second_name(sci: APIClient) -> None:
    doc = yaml.safe_load(DEMO)
    doc["metadata"] = {"name": "named-run"}
    body = json.dumps(doc)
    names = []
    for _ in range(2):
        response = sci.post(
            "/api/v1/runs/?project=eo-demo", data=body, content_type="application/json"
        )
        assert response.status_code == 201, response.content
        names.append(response.json()["name"])
    assert names[0] == "named-run"
    assert names[1].startswith("named-run-") and len(names[1]) == len("named-run-") + 6
    assert WorkflowRun.objects.count() == 2
    assert UnitRun.objects.filter(run__name=names[1]).count() == 3


def test_the_submit_answer_matches_the_stored_run(sci: APIClient) -> None:
    response = sci.post("/api/v1/runs/?project=eo-demo", data=DEMO, content_type="application/yaml")
    assert response.status_code == 201
    fresh = sci.get(f"/api/v1/runs/{response.json()['id']}/").json()
    assert response.json() == fresh


def test_run_serializers_built_once_per_class_answer_as_a_fresh_build(sci: APIClient) -> None:
    for _ in range(2):  # generateName: two runs with two names
        sci.post("/api/v1/runs/?project=eo-demo", data=DEMO, content_type="application/yaml")
    first, second = WorkflowRun.objects.order_by("pk")
    a, b = WorkflowRunSerializer(first), WorkflowRunSerializer(second)
    # Each instance owns its fields, bound to it, even when built from the class's prototype.
    assert a.fields["name"] is not b.fields["name"]
    assert a.fields["name"].parent is a and b.fields["units"].parent is b
    assert a.data["name"] != b.data["name"]
    for cls, run in ((WorkflowRunSerializer, first), (UnitRunSerializer, first.units.first())):
        fresh = serializers.ModelSerializer.get_fields(cls(run))
        cached = cls(run).get_fields()
        assert {k: type(v) for k, v in cached.items()} == {k: type(v) for k, v in fresh.items()}
        assert {k: v.source for k, v in cached.items()} == {k: v.source for k, v in fresh.items()}


def test_the_units_list_answers_as_drfs_own_fields_would(sci: APIClient) -> None:
    response = sci.post("/api/v1/runs/?project=eo-demo", data=DEMO, content_type="application/yaml")
    run = WorkflowRun.objects.get(pk=response.json()["id"])
    first, _, _ = run.units.order_by("position")
    # Every kind of value the fast list meets: times (aware, with microseconds), an int,
    # JSON outputs, empty and non-empty text.
    first.started_at = timezone.now().replace(microsecond=123456)
    first.finished_at = first.started_at + timedelta(seconds=61)
    first.outputs = {"parameters": [{"name": "n", "value": "3"}], "result": "ok"}
    first.message, first.attempt = "done", 2
    first.save()
    units = list(run.units.order_by("position"))
    fast = UnitRunSerializer(units, many=True).data
    generic = [
        serializers.ModelSerializer.to_representation(UnitRunSerializer(u), u) for u in units
    ]
    assert fast == generic
    assert fast[0]["started_at"].endswith("Z") and fast[0]["attempt"] == 2


def test_a_submission_inserts_its_units_and_decisions_as_rows(sci: APIClient) -> None:
    with CaptureQueriesContext(connection) as queries:
        response = sci.post(
            "/api/v1/runs/?project=eo-demo", data=DEMO, content_type="application/yaml"
        )
    assert response.status_code == 201
    inserts = [q["sql"] for q in queries if q["sql"].startswith("INSERT")]
    bulk = [
        sql for sql in inserts if '"portal_unitrun"' in sql or '"portal_placementdecision"' in sql
    ]
    assert len(bulk) == 2
    # VALUES rows, not UNNEST arrays: psycopg escapes JSON into array literals in Python.
    assert all(" VALUES " in sql and "UNNEST" not in sql for sql in bulk), bulk
    run = WorkflowRun.objects.get(pk=response.json()["id"])
    spec = run.units.get(name="ingest").spec
    assert spec["name"] == "ingest" and isinstance(spec["upstream"], list)
    assert all(d.candidates for d in PlacementDecision.objects.filter(run=run))


def test_the_preview_expands_loops_known_at_submission_and_warns_of_the_rest(
    sci: APIClient,
) -> None:
    if not EXAMPLES.is_dir():
        pytest.skip("the reference examples are not here")
    # parallelism-nested: withParam over an entrypoint input, one row and decision per item.
    known = preview(sci, (EXAMPLES / "parallelism-nested.yaml").read_text()).json()
    assert [u["name"] for u in known["units"]] == [
        f"parallel-worker({i}:{i + 1})" for i in range(4)
    ]
    assert all(u["site"] for u in known["units"]) and known["warnings"] == []
    # parameter-aggregation-dag: loops over earlier outputs are one row each, with a warning
    # naming the field.
    body = preview(sci, (EXAMPLES / "parameter-aggregation-dag.yaml").read_text()).json()
    assert {"divide-by-2", "print"} <= {u["name"] for u in body["units"]}
    assert [w["path"] for w in body["warnings"]] == [
        "spec.templates[0].dag.tasks[3].withParam",
        "spec.templates[0].dag.tasks[4].withParam",
    ]
    assert all(w["message"] for w in body["warnings"])
