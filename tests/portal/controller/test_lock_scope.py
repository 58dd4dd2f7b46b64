"""Mutexes and semaphores are each project's own unless an operator declared them fleet-wide; a
hold ends at its run's deadline and when its unit vanishes; ``spec.priority`` is clamped to the
range the project allows. Runs are submitted over REST by ordinary members of two projects
(the demo's ``eo-demo`` and ``sar``); the advance runs in this process, as the worker would,
against the sandbox fleet over HTTP."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.utils import timezone
from rest_framework.test import APIClient

from portal.choices import RunStatus
from portal.controller import locks
from portal.controller.advance import run_advance
from portal.models import FleetLock, RunEvent, SyncHold, UnitRun, WorkflowRun
from sites.models import Project
from tests.factories import ProjectFactory, UserFactory
from tests.fixtures_sandbox import SandboxServer


@pytest.fixture
def eo(demo_fleet: SandboxServer, api_client_for: Any) -> APIClient:
    client: APIClient = api_client_for(get_user_model().objects.get(username="scientist"))
    return client


@pytest.fixture
def sar(demo_fleet: SandboxServer, api_client_for: Any) -> APIClient:
    project: Any = ProjectFactory(name="sar")
    rival: Any = UserFactory(username="rival")
    project.members.add(rival)
    client: APIClient = api_client_for(rival)
    return client


def locked(
    sandbox: SandboxServer,
    sync: dict[str, Any],
    *,
    template_level: bool = False,
    approval: bool = False,
    **spec: Any,
) -> str:
    """A one-step run asking for ``sync``; with ``approval`` its step is a suspend template
    that waits at its site until someone resumes it."""
    work: dict[str, Any] = {
        "name": "work",
        "metadata": {"annotations": {sandbox.annotation("duration"): "2s"}},
        "container": {"image": "busybox", "command": ["true"]},
    }
    if approval:
        work = {"name": "work", "suspend": {}}
    if template_level:
        work["synchronization"] = sync
    else:
        spec["synchronization"] = sync
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "locks-"},
            "spec": {
                "entrypoint": "main",
                **spec,
                "templates": [
                    {"name": "main", "dag": {"tasks": [{"name": "a", "template": "work"}]}},
                    work,
                ],
            },
        }
    )


def submit(client: APIClient, body: str, project: str) -> WorkflowRun:
    answer = client.post(f"/api/v1/runs/?project={project}", body, content_type="application/yaml")
    assert answer.status_code == 201, answer.content
    run = WorkflowRun.objects.get(pk=answer.json()["id"])
    run_advance(run.pk)
    return run


def started(run: WorkflowRun) -> bool:
    return UnitRun.objects.get(run=run, name="a").workflow_name != ""


def waiting_for(run: WorkflowRun) -> str:
    return UnitRun.objects.get(run=run, name="a").message


MUTEX = {"mutexes": [{"name": "shared"}]}


def test_one_projects_mutex_does_not_block_another(
    demo_fleet: SandboxServer, eo: APIClient, sar: APIClient
) -> None:
    """The reproducer: a suspended run of one project held a mutex of the same name that
    another project's run waited on."""
    holder = submit(eo, locked(demo_fleet, MUTEX, approval=True), "eo-demo")
    assert started(holder)  # suspended at its site, holding the run's mutex until resumed
    assert SyncHold.objects.get(run=holder).held
    other = submit(sar, locked(demo_fleet, MUTEX), "sar")
    assert started(other)
    assert SyncHold.objects.get(run=other).key == "sar/Mutex/shared"
    # Within one project the mutex still excludes, and says whose it is.
    same = submit(eo, locked(demo_fleet, MUTEX), "eo-demo")
    assert not started(same)
    assert "waiting for the lock eo-demo/Mutex/shared (spec.synchronization" in waiting_for(same)
    # Stopped, the holder frees it for its project (and leaves nothing suspended behind).
    assert eo.post(f"/api/v1/runs/{holder.pk}/stop/", {}, format="json").status_code == 200
    run_advance(holder.pk)
    run_advance(same.pk)
    assert started(same)


def test_a_lock_is_shared_across_projects_only_when_declared_fleet_wide(
    demo_fleet: SandboxServer, eo: APIClient, sar: APIClient
) -> None:
    FleetLock.objects.create(name="Mutex/licence", description="one licence server")
    sync = {"mutexes": [{"name": "licence"}]}
    holder = submit(eo, locked(demo_fleet, sync, template_level=True), "eo-demo")
    assert started(holder)
    other = submit(sar, locked(demo_fleet, sync, template_level=True), "sar")
    assert not started(other)
    assert "waiting for the lock */Mutex/licence (templates.work.synchronization" in (
        waiting_for(other)
    )


def test_a_lock_in_another_projects_namespace_is_refused_naming_the_field(
    demo_fleet: SandboxServer, eo: APIClient, sar: APIClient
) -> None:
    victim = submit(eo, locked(demo_fleet, MUTEX), "eo-demo")
    assert started(victim)
    reach = {"mutexes": [{"name": "shared", "namespace": "eo-demo"}]}
    run = submit(sar, locked(demo_fleet, reach), "sar")
    run.refresh_from_db()
    assert run.status == RunStatus.ERROR
    assert "spec.synchronization.mutexes[0].namespace" in run.message
    assert "fleet-wide" in run.message
    assert not started(run)
    assert list(SyncHold.objects.filter(run=run)) == []


def test_priority_is_clamped_to_the_projects_range(
    demo_fleet: SandboxServer, eo: APIClient, sar: APIClient
) -> None:
    """The reproducer: ``priority: 2147483647`` jumped a fleet-wide lock's queue."""
    FleetLock.objects.create(name="Mutex/licence")
    sync = {"mutexes": [{"name": "licence"}]}
    holder = submit(eo, locked(demo_fleet, sync), "eo-demo")
    first = submit(eo, locked(demo_fleet, sync), "eo-demo")
    body = locked(demo_fleet, sync, priority=2147483647)
    preview = sar.post("/api/v1/runs/preview/?project=sar", body, content_type="application/yaml")
    assert preview.status_code == 200
    (warning,) = [w for w in preview.json()["warnings"] if w["path"] == "spec.priority"]
    assert "outside the range project 'sar' allows (0 to 0)" in warning["message"]
    jumper = submit(sar, body, "sar")
    assert jumper.compiled["spec"]["priority"] == 0
    assert sar.get(f"/api/v1/runs/{jumper.pk}/").json()["priority"] == 0
    assert RunEvent.objects.filter(run=jumper, kind="warning", data__path="spec.priority").exists()
    assert eo.post(f"/api/v1/runs/{holder.pk}/stop/", {}, format="json").status_code == 200
    run_advance(jumper.pk)
    run_advance(first.pk)
    assert started(first) and not started(jumper)
    # An operator widens one project's range: its runs go first within it, and no further.
    Project.objects.filter(name="sar").update(priority_min=-5, priority_max=5)
    again = submit(sar, body, "sar")
    assert again.compiled["spec"]["priority"] == 5
    assert SyncHold.objects.get(run=again).priority == 5


def test_a_hold_ends_at_its_runs_deadline(
    demo_fleet: SandboxServer, eo: APIClient, sar: APIClient
) -> None:
    FleetLock.objects.create(name="Mutex/licence")
    sync = {"mutexes": [{"name": "licence"}]}
    holder = submit(eo, locked(demo_fleet, sync, activeDeadlineSeconds=3600), "eo-demo")
    hold = SyncHold.objects.get(run=holder)
    assert hold.held and hold.expires_at == holder.created_at + timedelta(seconds=3600)
    waiter = submit(sar, locked(demo_fleet, sync), "sar")
    assert not started(waiter)
    # An hour and more later (the holder was never advanced again, its step still running):
    SyncHold.objects.filter(run=holder).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert set(locks.sweep()) == {holder.pk, waiter.pk}
    assert not SyncHold.objects.filter(run=holder).exists()
    (expired,) = RunEvent.objects.filter(run=holder, kind="lock-expired")
    assert "activeDeadlineSeconds passed" in expired.message
    run_advance(waiter.pk)
    assert started(waiter)


def test_a_vanished_units_hold_is_released(
    demo_fleet: SandboxServer, eo: APIClient, sar: APIClient
) -> None:
    sync = {"mutexes": [{"name": "shared"}]}
    holder = submit(eo, locked(demo_fleet, sync, template_level=True), "eo-demo")
    waiter = submit(eo, locked(demo_fleet, sync, template_level=True), "eo-demo")
    assert started(holder) and not started(waiter)
    assert locks.release_unit(holder.pk, "a") is True
    assert locks.release_unit(holder.pk, "a") is False
    run_advance(waiter.pk)
    assert started(waiter)
