"""The lifetime of a step workflow against the sandbox over HTTP: the
portal deletes a finished step workflow on karmada-apiserver once it has recorded the outcome,
a user's ttlStrategy is not inherited, and a copy a member deleted and Karmada re-created does
not count twice."""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.utils import timezone

from portal import services
from portal.choices import FINAL_UNIT, UnitPhase
from portal.controller.advance import run_advance
from portal.controller.bindings import bindings_observe
from portal.controller.cleanup import step_workflows_cleanup
from portal.karmada import client, errors, lists, resources
from portal.models import PlacementDecision, UnitRun, WorkflowRun
from tests.fixtures_sandbox import SandboxHTTPError, SandboxServer
from tests.fixtures_stack import demo_on

PROXY = "/apis/cluster.karmada.io/v1alpha1/clusters/{cluster}/proxy"
NS = "portal"


@pytest.fixture
def fleet(sandbox: SandboxServer, db: Any, settings: Any) -> Iterator[SandboxServer]:
    with demo_on(sandbox, settings, PORTAL_WEBHOOK_REGISTER=False):
        yield sandbox


def one_step(sandbox: SandboxServer, duration: str = "1s", **spec: Any) -> str:
    """A one-step workflow that reads the demo's dataset (so it is placed at site-a at
    submission) and prints a result."""
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "once-"},
            "spec": {
                "entrypoint": "main",
                **spec,
                "templates": [
                    {
                        "name": "main",
                        "metadata": {
                            "annotations": {
                                "portal.multisite.io/datasets": "sentinel2-l1c",
                                sandbox.annotation("duration"): duration,
                                sandbox.annotation("result"): "done",
                            }
                        },
                        "container": {"image": "busybox", "resources": {"requests": {"cpu": "1"}}},
                    }
                ],
            },
        }
    )


def run_to_the_end(sandbox: SandboxServer, run: WorkflowRun) -> UnitRun:
    """What the worker and the watcher would do, in this process: push, fold bindings in."""
    run_advance(run.pk)

    def ended() -> UnitRun | None:
        items, _ = lists.list_objects(resources.RESOURCE_BINDING)
        bindings_observe(items)
        unit = run.units.get()
        return unit if unit.phase in FINAL_UNIT else None

    unit = sandbox.wait_for(ended, what="the step to end")
    assert unit is not None
    return unit


def member_copy(sandbox: SandboxServer, site: str, name: str) -> dict[str, Any] | None:
    """The member's copy, read through Karmada's cluster proxy."""
    path = PROXY.format(cluster=site) + f"/apis/argoproj.io/v1alpha1/namespaces/{NS}/workflows/"
    try:
        found: dict[str, Any] = sandbox.request("GET", path + name)
    except SandboxHTTPError as err:
        if err.status == 404:
            return None
        raise
    return found


def submit(sandbox: SandboxServer, duration: str = "1s", **spec: Any) -> WorkflowRun:
    user = get_user_model().objects.get(username="scientist")
    return services.run_submit(user=user, body=one_step(sandbox, duration, **spec))


def test_a_users_ttl_strategy_is_not_inherited_by_step_workflows(fleet) -> None:
    run = submit(
        fleet, ttlStrategy={"secondsAfterCompletion": 1}, podGC={"strategy": "OnPodCompletion"}
    )
    run_advance(run.pk)
    unit = run.units.get()
    spec = client.get(resources.WORKFLOW, unit.workflow_name)["spec"]
    assert "ttlStrategy" not in spec
    # Pods of a failed step stay for their logs; pods are not propagated, so no re-run.
    assert spec["podGC"] == {"strategy": "OnPodSuccess"}


def test_a_step_the_member_deleted_after_completion_is_not_counted_twice(fleet, caplog) -> None:
    run = submit(fleet)
    unit = run_to_the_end(fleet, run)
    assert unit.phase == UnitPhase.SUCCEEDED
    recorded = (unit.finished_at, unit.outputs)
    decisions = PlacementDecision.objects.filter(unit=unit).count()
    first = fleet.wait_for(lambda: member_copy(fleet, unit.site, unit.workflow_name), what="copy")

    # Timestamps have whole seconds and a step here lasts a fraction of one: a copy re-created
    # within the second its first run started would report the very same start, end and
    # outcome, and no one (the portal or a person) could tell it ran twice. Delete it once
    # the clock has passed that second, so the re-run is observable.
    assert unit.started_at is not None
    next_second = unit.started_at + datetime.timedelta(seconds=1)
    while timezone.now() < next_second:
        time.sleep(0.05)
    # `argo delete` at the site: Karmada re-creates the copy from its Work and it runs again.
    path = (
        PROXY.format(cluster=unit.site) + f"/apis/argoproj.io/v1alpha1/namespaces/{NS}/workflows/"
    )
    fleet.request("DELETE", path + unit.workflow_name)

    def ran_again() -> bool:
        copy = member_copy(fleet, unit.site, unit.workflow_name)
        return bool(copy and copy["metadata"]["uid"] != first["metadata"]["uid"])

    fleet.wait_for(ran_again, what="the copy re-created by Karmada")
    with caplog.at_level(logging.WARNING, logger="portal.controller.bindings"):

        def seen_and_ignored() -> bool:
            bindings_observe(lists.list_objects(resources.RESOURCE_BINDING)[0])
            return "ignored a re-run" in caplog.text

        fleet.wait_for(seen_and_ignored, what="the re-run seen and ignored")
    unit.refresh_from_db()
    assert unit.phase == UnitPhase.SUCCEEDED
    assert (unit.finished_at, unit.outputs) == recorded
    assert PlacementDecision.objects.filter(unit=unit).count() == decisions

    # Deleted at the control plane, the member's copy goes with its Work and stays gone.
    assert step_workflows_cleanup(keep_seconds=0) == 1
    fleet.wait_for(
        lambda: member_copy(fleet, unit.site, unit.workflow_name) is None,
        what="the member's copy removed with its Work",
    )


def test_finished_step_workflows_are_gone_from_karmada_after_the_keep_time(fleet) -> None:
    run = submit(fleet)
    unit = run_to_the_end(fleet, run)
    assert client.get(resources.WORKFLOW, unit.workflow_name)

    assert step_workflows_cleanup(keep_seconds=3600) == 0  # kept for debugging
    assert step_workflows_cleanup(keep_seconds=0) == 1
    with pytest.raises(errors.NotFound):
        client.get(resources.WORKFLOW, unit.workflow_name)
    unit.refresh_from_db()
    assert unit.workflow_deleted_at is not None
    assert step_workflows_cleanup(keep_seconds=0) == 0  # done once
    fleet.wait_for(
        lambda: not any(
            b["spec"]["resource"]["name"] == unit.workflow_name
            for b in lists.list_objects(resources.RESOURCE_BINDING)[0]
        ),
        what="the binding gone",
    )
