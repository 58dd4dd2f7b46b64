"""Declared output sizes over REST: a malformed ``output-sizes`` annotation is
a 400 naming the field at preview and at submission; a valid one shows in the candidate rows of
the units that read the outputs."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from django.core.management import call_command
from rest_framework.test import APIClient

from portal.models import WorkflowRun

KEY = "portal.multisite.io/output-sizes"
PATH = f'spec.templates[1].metadata.annotations["{KEY}"]'


@pytest.fixture
def sci(db: Any) -> APIClient:
    call_command("load_demo", verbosity=0)
    client = APIClient()
    client.force_authenticate(User.objects.get(username="scientist"))
    return client


def pipeline(sizes: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "sized-"},
            "spec": {
                "entrypoint": "main",
                "templates": [
                    {
                        "name": "main",
                        "dag": {
                            "tasks": [
                                {"name": "make", "template": "make"},
                                {"name": "use", "template": "use", "depends": "make"},
                            ]
                        },
                    },
                    {
                        "name": "make",
                        "metadata": {"annotations": {KEY: sizes}},
                        "container": {"image": "busybox"},
                        "outputs": {"artifacts": [{"name": "tiles", "path": "/out/tiles"}]},
                    },
                    {"name": "use", "container": {"image": "busybox"}},
                ],
            },
        }
    )


@pytest.mark.parametrize("url", ["/api/v1/runs/preview/?project=eo-demo", "/api/v1/runs/"])
def test_an_invalid_declaration_is_a_400_naming_the_field(sci: APIClient, url: str) -> None:
    response = sci.post(url, data=pipeline("tiles=huge"), content_type="application/yaml")
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert [e["path"] for e in errors] == [PATH]
    assert "'huge' for 'tiles' is not a size" in errors[0]["message"]
    assert not WorkflowRun.objects.exists()


def test_a_declared_size_shows_in_the_candidate_rows(sci: APIClient) -> None:
    response = sci.post(
        "/api/v1/runs/preview/?project=eo-demo",
        data=pipeline("tiles=30Gi"),
        content_type="application/yaml",
    )
    assert response.status_code == 200, response.content
    use = next(u for u in response.json()["units"] if u["name"] == "use")
    make_site = next(u for u in response.json()["units"] if u["name"] == "make")["site"]
    moved = [c for c in use["candidates"] if c["site"] != make_site]
    assert moved and all("upstream output 30 GiB (declared)" in c["why"] for c in moved)
    assert all(c["bytes_to_move"] == 30 * 2**30 for c in moved)
