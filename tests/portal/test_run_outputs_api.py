"""A run's global outputs (``globalName``) in its REST representation."""

from __future__ import annotations

import json

import pytest

from portal.choices import UnitPhase
from portal.models import UnitRun
from tests.portal.helpers import make_run


@pytest.mark.django_db
def test_the_run_reports_its_global_outputs(scientist, scientist_api, project) -> None:
    run = make_run(
        scientist,
        project=project,
        units=[("prepare", "site-a", UnitPhase.SUCCEEDED, []), ("use", "site-b", "Running", [])],
    )
    UnitRun.objects.filter(run=run, name="prepare").update(
        outputs={
            "parameters": [
                {"name": "p", "value": "42", "globalName": "answer"},
                {"name": "local", "value": "not global"},
            ]
        }
    )
    body = scientist_api.get(f"/api/v1/runs/{run.pk}/").json()
    assert body["outputs"]["parameters"] == [{"name": "answer", "value": "42"}]
    # Beside Argo's status.outputs, the outputs of the steps nothing else depends on.
    assert [f["unit"] for f in body["outputs"]["final"]] == ["prepare"]
    assert [u["name"] for u in body["units"]] == ["prepare", "use"]  # the rest keeps its shape
    listed = scientist_api.get("/api/v1/runs/").json()["results"][0]
    assert "outputs" not in listed


@pytest.mark.django_db
def test_workflow_variables_are_the_runs(scientist, project) -> None:
    from portal.selectors import run_variables_of

    run = make_run(
        scientist,
        project=project,
        units=[("a", "site-a", UnitPhase.FAILED, []), ("b", "site-b", "Pending", [])],
    )
    run.compiled = {"labels": {"team": "eo"}}
    v = run_variables_of(run, run.units.all(), namespace="portal")
    assert v["workflow.name"] == run.name
    assert v["workflow.namespace"] == "portal"
    assert v["workflow.labels.team"] == "eo"
    assert v["workflow.uid"] == run_variables_of(run, [], namespace="x")["workflow.uid"]
    assert [f["displayName"] for f in json.loads(v["workflow.failures"])] == ["a"]
