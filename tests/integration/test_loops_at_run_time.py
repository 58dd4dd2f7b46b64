"""Loops known only at run time, through the whole stack: a
``withSequence`` whose count is an earlier step's output, expanded once that output is known;
its ``when`` decided per item with ``{{item}}`` bound; an expression tag in the arguments."""

from __future__ import annotations

import pytest
import yaml
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from portal.models import PlacementDecision, UnitRun, WorkflowRun
from tests.fixtures_stack import Stack, wait_for

pytestmark = [pytest.mark.integration]

RESULT = "portal.multisite.io/sandbox-result"

WORKFLOW = {
    "apiVersion": "argoproj.io/v1alpha1",
    "kind": "Workflow",
    "metadata": {"generateName": "seq-from-output-"},
    "spec": {
        "entrypoint": "main",
        "arguments": {"parameters": [{"name": "skip", "value": "2"}]},
        "templates": [
            {
                "name": "main",
                "steps": [
                    [{"name": "count", "template": "count"}],
                    [
                        {
                            "name": "fan",
                            "template": "echo",
                            "arguments": {
                                "parameters": [{"name": "msg", "value": "{{=asInt(item) * 10}}"}]
                            },
                            "withSequence": {
                                "start": "1",
                                "count": "{{steps.count.outputs.result}}",
                            },
                            "when": "{{item}} != {{workflow.parameters.skip}}",
                        }
                    ],
                ],
            },
            {
                "name": "count",
                "metadata": {"annotations": {RESULT: "3"}},
                "container": {"image": "alpine:3.23", "command": ["sh", "-c", "echo 3"]},
            },
            {
                "name": "echo",
                "inputs": {"parameters": [{"name": "msg"}]},
                "container": {
                    "image": "alpine:3.23",
                    "command": ["echo", "{{inputs.parameters.msg}}"],
                },
            },
        ],
    },
}


@pytest.fixture
def api(live: Stack) -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.get(username="scientist"))
    return client


def test_a_sequence_from_an_output_expands_once_known_with_when_per_item(
    live: Stack, api: APIClient
) -> None:
    body = yaml.safe_dump(WORKFLOW)
    preview = api.post(
        "/api/v1/runs/preview/?project=eo-demo", data=body, content_type="application/yaml"
    )
    assert preview.status_code == 200, preview.content
    # Not known at submission: one row for the loop, and the preview says so.
    assert [u["name"] for u in preview.json()["units"]] == ["count", "fan"]
    assert any(w["path"].endswith(".withSequence") for w in preview.json()["warnings"])

    response = api.post("/api/v1/runs/?project=eo-demo", data=body, content_type="application/yaml")
    assert response.status_code == 201, response.content
    run_id = response.json()["id"]
    run = wait_for(
        lambda: WorkflowRun.objects.filter(pk=run_id, finished_at__isnull=False).first(),
        120,
        "the run to finish",
    )
    units = {u.name: u for u in UnitRun.objects.filter(run_id=run_id)}
    # Succeeded also says each item's "{{=asInt(item) * 10}}" argument was evaluated: an
    # expression that cannot be would have ended its unit in Error.
    assert run.status == "Succeeded", (run.message, {n: u.message for n, u in units.items()})
    items = {n: u for n, u in units.items() if n.startswith("fan(")}
    assert sorted(items) == ["fan(0:1)", "fan(1:2)", "fan(2:3)"]
    phases = {n: u.phase for n, u in items.items()}
    assert phases == {"fan(0:1)": "Succeeded", "fan(1:2)": "Skipped", "fan(2:3)": "Succeeded"}
    assert units["fan"].phase == "Succeeded"
    # One decision per item that ran, as for a loop known at submission.
    decided = set(
        PlacementDecision.objects.filter(run_id=run_id).values_list("unit__name", flat=True)
    )
    assert {"fan(0:1)", "fan(2:3)"} <= decided
