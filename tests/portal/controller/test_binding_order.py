"""What the watcher sees of a step workflow's binding, against the sandbox over HTTP: the
older states a lagging watch delivers after the resync recorded the outcome are not re-runs,
and a step whose pod waits says why on its unit until it runs."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from portal import services
from portal.choices import FINAL_UNIT, UnitPhase
from portal.controller.advance import run_advance
from portal.controller.bindings import Folded, binding_observe, bindings_observe
from portal.karmada import lists, resources
from portal.models import UnitRun, WorkflowRun
from tests.fixtures_sandbox import SandboxServer
from tests.portal.controller.test_step_lifecycle import (  # noqa: F401 - the fixture
    NS,
    fleet,
    submit,
)


def _bound(binding: dict[str, Any]) -> str:
    return str(((binding.get("spec") or {}).get("resource") or {}).get("name") or "")


def _phase(binding: dict[str, Any]) -> str:
    aggregated = (binding.get("status") or {}).get("aggregatedStatus") or [{}]
    return str(((aggregated[0] or {}).get("status") or {}).get("phase") or "")


def test_older_binding_states_after_the_recorded_outcome_are_not_re_runs(
    fleet: SandboxServer,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The watch delivers every state of a binding in order and lags under a fan-out; the
    resync's list reads the newest. Folding the list first and the watch's states after is
    what a 200-item fan-out did 120-140 times, each logged as a re-run."""
    run = submit(fleet, duration="1500s")  # 1.5 s at the fixture's time scale
    _, version = lists.list_objects(resources.RESOURCE_BINDING)
    run_advance(run.pk)
    name = run.units.get().workflow_name
    states = []
    for _kind, binding in lists.watch(resources.RESOURCE_BINDING, version, timeout_seconds=60):
        if _bound(binding) != name:
            continue
        states.append(binding)
        if _phase(binding) in ("Succeeded", "Failed", "Error"):
            break
    assert "Running" in {_phase(b) for b in states}, "the watch saw the step running"

    bindings_observe(lists.list_objects(resources.RESOURCE_BINDING)[0])  # the resync
    unit = run.units.get()
    assert unit.phase == UnitPhase.SUCCEEDED
    recorded = (unit.finished_at, unit.outputs, unit.message)
    with caplog.at_level(logging.WARNING, logger="portal.controller.bindings"):
        for binding in states:  # the watcher, behind
            assert binding_observe(binding) is None
    assert "ignored a re-run" not in caplog.text
    unit.refresh_from_db()
    assert (unit.phase, unit.finished_at, unit.outputs, unit.message) == (
        UnitPhase.SUCCEEDED,
        *recorded,
    )


def _what_is_folded(binding: dict[str, Any]) -> tuple[str, Any]:
    clusters = (binding.get("spec") or {}).get("clusters") or [{}]
    aggregated = (binding.get("status") or {}).get("aggregatedStatus") or [{}]
    return (clusters[0].get("name", ""), (aggregated[0] or {}).get("status"))


def test_the_watcher_reads_a_unit_only_when_its_binding_says_something_new(
    fleet: SandboxServer,  # noqa: F811
) -> None:
    """A step's binding changes a dozen times and most changes touch neither its site nor its
    member status, the two parts a fold reads; reading the unit again for each change would
    take most of the watcher's time under a big fan-out."""
    run = submit(fleet, duration="1500s")
    _, version = lists.list_objects(resources.RESOURCE_BINDING)
    run_advance(run.pk)
    unit = run.units.get()
    states = []
    for _kind, binding in lists.watch(resources.RESOURCE_BINDING, version, timeout_seconds=60):
        if _bound(binding) == unit.workflow_name:
            states.append(binding)
            if _phase(binding) in ("Succeeded", "Failed", "Error"):
                break
    folded = Folded()

    # Seen before the unit was claimed (the claim follows the create): not remembered.
    UnitRun.objects.filter(pk=unit.pk).update(workflow_name="")
    assert binding_observe(states[-1], folded=folded) is None
    UnitRun.objects.filter(pk=unit.pk).update(workflow_name=unit.workflow_name)

    reads = 0
    last: tuple[str, Any] | None = None
    for binding in states:
        with CaptureQueriesContext(connection) as queries:
            binding_observe(binding, folded=folded)
        read = any(
            q["sql"].startswith("SELECT") and '"portal_unitrun"' in q["sql"] for q in queries
        )
        _assert_no_json_read(queries)
        seen = _what_is_folded(binding)
        unscheduled = not seen[0] and not isinstance(seen[1], dict)
        # Read exactly when a scheduled binding's site or member status moved.
        assert read == (not unscheduled and seen != last), (seen, last)
        reads += read
        if not unscheduled:
            last = seen
    assert 0 < reads < len(states)
    assert run.units.get().phase == UnitPhase.SUCCEEDED
    with CaptureQueriesContext(connection) as queries:
        assert binding_observe(states[-1], folded=folded) is None
    assert len(queries) == 0  # the final state again (a relist): nothing read
    with CaptureQueriesContext(connection) as queries:  # the resync: without the memory
        bindings_observe(states)
    assert not any(
        '"portal_unitrun"."spec"' in q["sql"] and '"workflow_name" IN' in q["sql"] for q in queries
    )


def _assert_no_json_read(queries: CaptureQueriesContext) -> None:
    """A fold reads no JSON column of the unit it never uses, then or later (a deferred one
    read later is fetched by the unit's id)."""
    unit_reads = [
        q["sql"]
        for q in queries
        if 'WHERE "portal_unitrun"."workflow_name" =' in q["sql"]
        or 'WHERE "portal_unitrun"."id" =' in q["sql"]
    ]
    assert not any(
        f'"portal_unitrun"."{column}"' in sql
        for sql in unit_reads
        for column in ("spec", "outputs", "upstream")
    ), unit_reads


def _claiming(sandbox: SandboxServer) -> str:
    """A one-step workflow at site-a (the demo's dataset) mounting the member's claim
    ``scratch``."""
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "claim-"},
            "spec": {
                "entrypoint": "main",
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "scratch"}}],
                "templates": [
                    {
                        "name": "main",
                        "metadata": {
                            "annotations": {
                                "portal.multisite.io/datasets": "sentinel2-l1c",
                                sandbox.annotation("duration"): "1s",
                            }
                        },
                        "container": {
                            "image": "busybox",
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                        },
                    }
                ],
            },
        }
    )


def _fold(run: WorkflowRun) -> UnitRun:
    bindings_observe(lists.list_objects(resources.RESOURCE_BINDING)[0])
    return run.units.get()


def test_a_unit_whose_pod_waits_says_why_until_it_runs(
    fleet: SandboxServer,  # noqa: F811
) -> None:
    user = get_user_model().objects.get(username="scientist")
    run = services.run_submit(user=user, body=_claiming(fleet))
    run_advance(run.pk)

    unit = fleet.wait_for(
        lambda: (u := _fold(run)).message and u, what="the unit to say why it waits"
    )
    assert unit.phase in (UnitPhase.PENDING, UnitPhase.RUNNING)
    assert unit.message.startswith(f"waiting at {unit.site}: ")
    assert 'persistentvolumeclaim "scratch" not found' in unit.message
    client = APIClient()
    client.force_authenticate(user)
    answer = client.get(f"/api/v1/runs/{run.pk}/units/{unit.name}/")
    assert answer.status_code == 200
    assert 'persistentvolumeclaim "scratch" not found' in answer.json()["message"]
    page = Client()
    page.force_login(user)
    live = page.get(f"/runs/{run.pk}/live/").content.decode()
    assert "persistentvolumeclaim &quot;scratch&quot; not found" in live

    claim = {"kind": "PersistentVolumeClaim", "metadata": {"name": "scratch", "namespace": NS}}
    fleet.request("POST", f"/_sandbox/members/{unit.site}/objects", claim)
    unit = fleet.wait_for(
        lambda: (u := _fold(run)).phase in FINAL_UNIT and u, what="the step to end"
    )
    assert unit.phase == UnitPhase.SUCCEEDED
    assert unit.message == ""
