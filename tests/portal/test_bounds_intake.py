# Bounded intake through the portal: the API, the webhook and the
# worker refuse oversized loops, unreadable expressions and dense DAGs cleanly, and the parameter
# form reads a document once.

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.cache import cache
from django.urls import reverse

from portal import forms, services
from portal.choices import UnitPhase
from portal.controller.advance import run_advance
from portal.models import UnitRun, WorkflowRun
from tests.factories import SiteFactory
from tests.portal.admission.helpers import answer, direct_workflow, post, review

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _sites(db) -> None:
    for name in ("site-a", "site-b"):
        SiteFactory(name=name)


def workflow(*tasks: dict[str, Any], arguments: list[dict[str, Any]] | None = None) -> dict:
    doc: dict[str, Any] = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "bounds-"},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {"name": "main", "dag": {"tasks": list(tasks)}},
                {"name": "leaf", "container": {"image": "alpine"}},
            ],
        },
    }
    if arguments:
        doc["spec"]["arguments"] = {"parameters": arguments}
    return doc


def task(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "template": "leaf", **fields}


def dense(n: int) -> dict:
    names = [f"t{i}" for i in range(n)]
    return workflow(*(task(t, dependencies=names[:i]) for i, t in enumerate(names)))


def preview(api, doc: dict):
    return api.post("/api/v1/runs/preview/", data=json.dumps(doc), content_type="application/json")


@pytest.mark.parametrize(
    ("sequence", "field"),
    [
        ({"count": "20000000"}, "count"),
        ({"count": "1000000000"}, "count"),
        ({"end": "9" * 5000}, "end"),  # a 400, not a 500: int() refuses more than 4,300 digits
    ],
)
@pytest.mark.parametrize("endpoint", ["/api/v1/runs/preview/", "/api/v1/runs/"])
def test_the_api_refuses_a_huge_sequence_naming_the_field(
    scientist_api, sequence: dict, field: str, endpoint: str
) -> None:
    doc = workflow(task("a", withSequence=sequence))
    response = scientist_api.post(endpoint, data=json.dumps(doc), content_type="application/json")
    assert response.status_code == 400
    paths = [e["path"] for e in response.json()["errors"]]
    assert paths == [f"spec.templates[0].dag.tasks[0].withSequence.{field}"]
    assert WorkflowRun.objects.count() == 0


def test_the_api_refuses_a_when_it_could_not_evaluate_with_its_path(scientist_api) -> None:
    nested = "(" * 300 + "{{tasks.a.outputs.result}} == x" + ")" * 300
    response = preview(scientist_api, workflow(task("a"), task("b", depends="a", when=nested)))
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error["path"] == "spec.templates[0].dag.tasks[1].when"
    assert "nested deeper than 32 levels" in error["message"]


def test_the_api_refuses_a_dense_dag_by_its_edges(scientist_api, settings) -> None:
    settings.PORTAL_MAX_DEPENDENCY_EDGES = 100
    response = preview(scientist_api, dense(20))  # 190 edges
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error["path"] == "spec.templates[0].dag.tasks"
    assert "190 dependencies between tasks; the limit is 100" in error["message"]
    settings.PORTAL_MAX_DEPENDENCY_EDGES = 200
    assert preview(scientist_api, dense(20)).status_code == 200


def test_the_webhook_leaves_a_huge_or_dense_workflow_to_the_fallback(client, settings) -> None:
    settings.PORTAL_WEBHOOK_TOKEN = "t"
    settings.PORTAL_MAX_DEPENDENCY_EDGES = 10
    huge = direct_workflow()
    huge["spec"]["templates"][0]["steps"][0][0]["withSequence"] = {"count": "20000000"}
    for obj in (huge, {**dense(10), "metadata": {"name": "dense-x"}}):  # 45 edges
        response = post(
            client, review(obj, namespace="argo"), auth=False, path="/webhooks/placement/t/"
        )
        _, patch = answer(response)
        assert patch is None


def test_the_worker_errors_a_withparam_over_the_unit_limit(scientist, settings) -> None:
    settings.PORTAL_MAX_UNITS = 10
    doc = workflow(task("a"), task("b", depends="a", withParam="{{tasks.a.outputs.result}}"))
    run = services.run_submit(user=scientist, body=doc)
    UnitRun.objects.filter(run=run, name="a").update(
        phase=UnitPhase.SUCCEEDED,
        workflow_name="a-1",
        outputs={"result": json.dumps(list(range(50)))},
    )
    run_advance(run.pk)
    b = UnitRun.objects.get(run=run, name="b")
    assert b.phase == UnitPhase.ERROR
    assert "50 items; the run can take at most 8 more units" in b.message
    assert UnitRun.objects.filter(run=run).count() == 2  # nothing was built


def test_the_worker_errors_a_templated_sequence_over_the_unit_limit(scientist, settings) -> None:
    settings.PORTAL_MAX_UNITS = 10
    doc = workflow(
        task("a"),
        task("b", depends="a", withSequence={"count": "{{tasks.a.outputs.result}}"}),
    )
    run = services.run_submit(user=scientist, body=doc)
    UnitRun.objects.filter(run=run, name="a").update(
        phase=UnitPhase.SUCCEEDED, workflow_name="a-1", outputs={"result": "1000000000"}
    )
    run_advance(run.pk)
    b = UnitRun.objects.get(run=run, name="b")
    assert b.phase == UnitPhase.ERROR
    assert "1000000000 items" in b.message


def test_the_parameter_form_reads_a_document_once(client_for, scientist, monkeypatch) -> None:
    cache.clear()
    reads: list[str] = []
    real = forms._read_parameters

    def counting(text: str) -> Any:
        reads.append(text)
        return real(text)

    monkeypatch.setattr(forms, "_read_parameters", counting)
    browser = client_for(scientist)
    doc = json.dumps(workflow(task("a"), arguments=[{"name": "colour", "value": "blue"}]))
    for typed in ("b", "bl", "blu"):
        response = browser.post(
            reverse("ui-submit-parameters"),
            {"manifest": doc, "param-colour": typed},
            HTTP_HX_REQUEST="true",
        )
        assert response.status_code == 200
        assert 'name="param-colour"' in response.content.decode()
    assert len(reads) == 1
    changed = doc.replace('"colour"', '"shade"')
    body = browser.post(
        reverse("ui-submit-parameters"), {"manifest": changed}, HTTP_HX_REQUEST="true"
    ).content.decode()
    assert 'name="param-shade"' in body
    assert len(reads) == 2


def test_error_lines_are_found_from_one_composition(monkeypatch) -> None:
    calls: list[str] = []
    real = forms._compose

    def counting(text: str) -> Any:
        calls.append(text)
        return real(text)

    monkeypatch.setattr(forms, "_compose", counting)
    text = "kind: Workflow\nspec:\n  templates:\n  - name: a\n  - name: b\n"
    errors = [
        {"path": "spec.templates[0].name", "message": "x"},
        {"path": "spec.templates[1].name", "message": "y"},
    ]
    shown = forms.shown_errors(text, errors)
    assert [e.line for e in shown] == [4, 5]
    assert len(calls) == 1
    # A document nested deeper than the parser allows gets no line, and no crash.
    deep = "a: " + "[" * 5000 + "]" * 5000 + "\n"
    assert forms.shown_errors(deep + "b: 1\n", [{"path": "a", "message": "m"}])[0].line is None
