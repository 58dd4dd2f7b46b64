"""A step cannot lead the executing site out of its pod, end to end: submitted over HTTP to
the REST API, with an API key, by an ordinary member of the project; run by the portal
(PostgreSQL, Redis, a Celery worker, the watcher) on a sandbox that really runs the steps. What
gets past the portal's checks (a parameter Argo substitutes at the site) is refused by the site
as kube-apiserver would; links in an artifact stay out of it; an http input does not reach the
portal or the control plane. Each run ends with the site's clear answer on its unit."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User

from placement.models import PlacementRule
from tests.fixtures_stack import Stack, wait_for
from tests.portal import helpers

pytestmark = [pytest.mark.integration]


@dataclass
class Member:
    """The demo's scientist, an ordinary member of eo-demo, over HTTP with an API key."""

    url: str  # the portal's live server
    key: str

    def call(self, method: str, path: str, body: str | None = None) -> tuple[int, Any]:
        request = urllib.request.Request(
            f"{self.url}{path}",
            data=body.encode() if body is not None else None,
            method=method,
            headers={"Authorization": f"Token {self.key}", "Content-Type": "application/yaml"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.load(response)

    def submit(self, body: dict[str, Any] | str) -> int:
        text = body if isinstance(body, str) else yaml.safe_dump(body)
        status, run = self.call("POST", "/api/v1/runs/?project=eo-demo", text)
        assert status == 201, run
        return int(run["id"])

    def finished(self, run_id: int) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            run = self.call("GET", f"/api/v1/runs/{run_id}/")[1]
            return run if run["finished_at"] else None

        return wait_for(done, 120, "the run to finish")


def unit(run: dict[str, Any], name: str) -> dict[str, Any]:
    return next(u for u in run["units"] if u["name"] == name)


@pytest.fixture
def member(live_executing: Stack, api_key_for: Callable[[User], str]) -> Member:
    user = User.objects.get(username="scientist")
    assert not user.is_staff
    portal = live_executing.env["PORTAL_WEBHOOK_URL"].split("/webhooks/")[0]
    return Member(portal, api_key_for(user))


def pin_all(site: str) -> None:
    PlacementRule.objects.update_or_create(
        name="test-pin-all",
        defaults={
            "order": 1,
            "selector": {"task": "*"},
            "timing": "submit",
            "effect": "pin",
            "parameters": {"sites": [site]},
        },
    )


def one_step(template: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "escape-"},
        "spec": {"entrypoint": "main", "templates": [{"name": "main", **template}], **spec},
    }


def test_a_sub_path_a_parameter_makes_go_up_is_refused_by_the_site(
    live_executing: Stack, member: Member
) -> None:
    up = "../../../../../../etc"
    body = one_step(
        {
            "container": {
                "image": "alpine:3.23",
                "command": ["cat", "/w/shadow"],
                "volumeMounts": [
                    {"name": "work", "mountPath": "/w", "subPath": "{{workflow.parameters.p}}"}
                ],
            }
        },
        arguments={"parameters": [{"name": "p", "value": up}]},
        volumeClaimTemplates=[
            {"metadata": {"name": "work"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
        ],
    )
    run = member.finished(member.submit(body))
    assert run["status"] == "Error", run["message"]
    got = unit(run, "main")
    assert got["message"].endswith(
        f'is invalid: spec.containers[1].volumeMounts[0].subPath: Invalid value: "{up}": '
        "must not contain '..'"
    ), got["message"]
    assert "root:" not in str(got["outputs"])


def test_links_that_leave_an_artifact_do_not_travel_with_it(
    live_executing: Stack, member: Member
) -> None:
    pin_all("site-b")
    write = {
        "outputs": {"artifacts": [{"name": "data", "path": "/tmp/out", "archive": {"none": {}}}]},
        "container": {
            "image": "alpine:3.23",
            "command": ["sh", "-c"],
            "args": [
                "mkdir /tmp/out && echo kept > /tmp/out/f && ln -s f /tmp/out/alias"
                " && ln -s /etc/shadow /tmp/out/shadow && ln -s / /tmp/out/root"
            ],
        },
    }
    read = {
        "inputs": {"artifacts": [{"name": "data", "path": "/tmp/in"}]},
        "container": {
            "image": "alpine:3.23",
            "command": ["sh", "-c"],
            "args": ["ls /tmp/in | tr '\\n' ' '; cat /tmp/in/alias"],
        },
    }
    run = member.finished(member.submit(helpers.write_then_read(write, read)))
    assert run["status"] == "Succeeded", run["message"]
    assert unit(run, "read")["outputs"]["result"] == "alias f kept"


def test_an_http_input_does_not_reach_the_portal_or_the_control_plane(
    live_executing: Stack, member: Member
) -> None:
    for url in (f"{member.url}/metrics", f"{live_executing.sandbox.url}/api/v1/secrets"):
        body = one_step(
            {
                "inputs": {"artifacts": [{"name": "x", "path": "/tmp/x", "http": {"url": url}}]},
                "container": {"image": "alpine:3.23", "command": ["cat", "/tmp/x"]},
            }
        )
        run = member.finished(member.submit(body))
        assert run["status"] == "Error", (url, run["message"])
        got = unit(run, "main")
        assert got["message"].endswith("connect: connection refused"), got["message"]
        assert url in got["message"]
        assert "SecretList" not in str(got["outputs"]) and "python_info" not in str(got["outputs"])
