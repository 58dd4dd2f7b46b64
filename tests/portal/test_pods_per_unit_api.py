# Work nested inside one unit over REST, as an ordinary project member: the preview shows each
# unit's pod count, and a unit that could create more pods than the limit is refused with the
# path and the count, nothing stored.

from __future__ import annotations

import json
from typing import Any

import pytest

from portal.models import WorkflowRun
from tests.factories import SiteFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _sites(db) -> None:
    for name in ("site-a", "site-b"):
        SiteFactory(name=name)


def nested(items: int, count: int) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "nested-"},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {
                    "name": "main",
                    "dag": {
                        "tasks": [
                            {"name": "fan", "template": "outer"},
                            {"name": "one", "template": "leaf"},
                        ]
                    },
                },
                {
                    "name": "outer",
                    "steps": [
                        [{"name": "o", "template": "inner", "withItems": list(range(items))}]
                    ],
                },
                {
                    "name": "inner",
                    "steps": [
                        [{"name": "i", "template": "leaf", "withSequence": {"count": str(count)}}]
                    ],
                },
                {"name": "leaf", "container": {"image": "alpine"}},
            ],
        },
    }


def post(api, path: str, doc: dict[str, Any]):
    return api.post(path, data=json.dumps(doc), content_type="application/json")


def test_the_preview_shows_each_units_pods(scientist_api) -> None:
    response = post(scientist_api, "/api/v1/runs/preview/", nested(3, 4))
    assert response.status_code == 200
    assert {u["name"]: u["pods"] for u in response.json()["units"]} == {"fan": 12, "one": 1}


@pytest.mark.parametrize("endpoint", ["/api/v1/runs/preview/", "/api/v1/runs/"])
def test_a_unit_over_the_pod_limit_is_refused_naming_the_path_and_the_count(
    scientist_api, settings, endpoint: str
) -> None:
    settings.PORTAL_MAX_PODS_PER_UNIT = 100
    response = post(scientist_api, endpoint, nested(20, 10))
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error["path"] == "spec.templates[0].dag.tasks[0]"
    assert "can create 200 pods" in error["message"]
    assert "the limit is 100 pods per unit" in error["message"]
    assert WorkflowRun.objects.count() == 0
    settings.PORTAL_MAX_PODS_PER_UNIT = 200
    assert post(scientist_api, "/api/v1/runs/preview/", nested(20, 10)).status_code == 200


def test_the_submit_page_preview_shows_the_pods(client_for, scientist) -> None:
    browser = client_for(scientist)
    response = browser.post(
        "/submit/preview/",
        {"manifest": json.dumps(nested(3, 4))},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert "Pods</th>" in body
    assert '<td class="num pods">12</td>' in body
