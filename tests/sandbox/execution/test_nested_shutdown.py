"""A Workflow's nested fan-out of really running steps ends at once when the Workflow is
stopped, terminated or deleted on karmada-apiserver: the member kills its pods' processes and
creates no pod after."""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.fixtures_sandbox import SandboxServer
from tests.sandbox.conftest import NS, SITE_LABEL, site_policy
from tests.sandbox.execution.conftest import needs_bwrap

pytestmark = needs_bwrap


@pytest.fixture
def custom(executing: SandboxServer) -> client.CustomObjectsApi:
    api = client.CustomObjectsApi(executing.api_client())
    with contextlib.suppress(client.ApiException):  # made by an earlier test
        api.create_namespaced_custom_object(
            "policy.karmada.io", "v1alpha1", NS, "propagationpolicies", site_policy("site-b")
        )
    return api


def nested(name: str, seconds: str) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": name, "labels": {SITE_LABEL: "site-b"}},
        "spec": {
            "entrypoint": "main",
            "onExit": "bye",
            "templates": [
                {
                    "name": "main",
                    "steps": [[{"name": "o", "template": "inner", "withItems": [0, 1]}]],
                },
                {
                    "name": "inner",
                    "steps": [[{"name": "i", "template": "sleep", "withSequence": {"count": "2"}}]],
                },
                {
                    "name": "sleep",
                    "container": {"image": "alpine:3.23", "command": ["sleep", seconds]},
                },
                {"name": "bye", "container": {"image": "alpine:3.23", "command": ["true"]}},
            ],
        },
    }


def sleeping(seconds: str) -> int:
    """The steps' own processes (the sandbox's time-scaled ``sleep``), not the bubblewrap
    processes whose command lines carry them."""
    count = 0
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                args = (proc / "cmdline").read_bytes().split(b"\0")
                count += args[-2:] == [seconds.encode(), b""] and args[-3].endswith(b"/sleep")
    return count


def member_copy(server: SandboxServer, name: str) -> dict[str, Any] | None:
    return next(
        (w for w in server.member_workflows("site-b") if w["metadata"]["name"] == name), None
    )


@pytest.mark.parametrize("how", ["Stop", "Terminate", "delete"])
def test_a_nested_fan_out_is_killed_at_once(
    executing: SandboxServer, custom: client.CustomObjectsApi, how: str
) -> None:
    name = f"nested-{how.lower()}-{uuid.uuid4().hex[:6]}"
    # Divided by the time scale, still far longer than any test: only a kill ends it.
    seconds = str(3_600_000 + int(uuid.uuid4().int % 10_000))
    custom.create_namespaced_custom_object(
        "argoproj.io", "v1alpha1", NS, "workflows", nested(name, seconds)
    )
    executing.wait_for(lambda: sleeping(seconds) == 4, timeout=60, what="four sleeping steps")
    if how == "delete":
        custom.delete_namespaced_custom_object("argoproj.io", "v1alpha1", NS, "workflows", name)
    else:
        custom.patch_namespaced_custom_object(
            "argoproj.io", "v1alpha1", NS, "workflows", name, {"spec": {"shutdown": how}}
        )
    executing.wait_for(lambda: sleeping(seconds) == 0, timeout=60, what="the steps killed")
    if how == "delete":
        executing.wait_for(lambda: member_copy(executing, name) is None, what="the copy gone")
        return
    status = executing.wait_for(
        lambda: (w := member_copy(executing, name))
        and w["status"].get("finishedAt")
        and w["status"],
        what="the copy to end",
    )
    assert status["phase"] == "Failed"
    assert status["message"] == f"Stopped with strategy '{how}'"
    sleepers = [
        n for n in status["nodes"].values() if n["type"] == "Pod" and n["templateName"] == "sleep"
    ]
    assert len(sleepers) == 4  # none created after the stop
    assert all(n["phase"] == "Failed" for n in sleepers), [
        (n["name"], n["phase"], n.get("message")) for n in sleepers
    ]
    # Stop runs the exit handler (its pod is created after the stop); Terminate does not.
    assert (f"{name}.onExit" in {n["name"] for n in status["nodes"].values()}) == (how == "Stop")
