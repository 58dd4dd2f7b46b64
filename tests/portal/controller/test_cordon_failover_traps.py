"""What an operator and a scientist see when a site is cordoned under a run, against the
sandbox over HTTP: the reason says "cordoned" (not "not ready"), attempts count by one, and a
failover with nowhere to go is one event with a banner on the run page until it unblocks."""

from __future__ import annotations

from typing import Any

import yaml
from django.contrib.auth import get_user_model

from portal import services
from portal.choices import FINAL_UNIT, RunStatus, UnitPhase
from portal.controller.advance import run_advance
from portal.controller.bindings import bindings_observe
from portal.karmada import lists, resources
from portal.models import RunEvent, UnitRun, WorkflowRun
from sites.models import Site
from sites.services import site_set_cordoned
from tests.fixtures_sandbox import SandboxServer
from tests.portal.controller.test_step_lifecycle import fleet  # noqa: F401 - the fixture


def workflow(sandbox: SandboxServer, *, fail: bool = False, gpu: bool = False) -> str:
    annotations = {sandbox.annotation("duration"): "1s"}
    if fail:
        annotations[sandbox.annotation("fail")] = "true"
    container: dict[str, Any] = {"image": "busybox", "command": ["true"]}
    if gpu:
        container["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "trap-"},
            "spec": {
                "entrypoint": "main",
                "templates": [
                    {
                        "name": "main",
                        "metadata": {"annotations": annotations},
                        "container": container,
                    }
                ],
            },
        }
    )


def submit(body: str) -> WorkflowRun:
    user = get_user_model().objects.get(username="scientist")
    return services.run_submit(user=user, body=body)


def settle(sandbox: SandboxServer, run: WorkflowRun) -> WorkflowRun:
    """What the worker and the watcher do: push, fold bindings in, until the run ends."""
    run_advance(run.pk)

    def ended() -> WorkflowRun | None:
        items, _ = lists.list_objects(resources.RESOURCE_BINDING)
        bindings_observe(items)
        run_advance(run.pk)
        fresh = WorkflowRun.objects.get(pk=run.pk)
        unit = fresh.units.get()
        failed = fresh.status in (RunStatus.FAILED, RunStatus.ERROR)
        return fresh if (unit.phase in FINAL_UNIT and fresh.is_finished) or failed else None

    done = sandbox.wait_for(ended, what="the run to end")
    assert done is not None
    return done


def test_retrying_a_unit_whose_site_was_cordoned_says_cordoned_and_counts_attempts_by_one(
    fleet: SandboxServer,  # noqa: F811
    api_client_for: Any,
) -> None:
    run = settle(fleet, submit(workflow(fleet, fail=True)))
    assert run.status == RunStatus.FAILED, run.message
    unit = run.units.get()
    first_site = unit.site
    assert unit.attempt == 1 and unit.phase == UnitPhase.FAILED

    site_set_cordoned(site=Site.objects.get(name=first_site), cordoned=True, user=None)
    user = get_user_model().objects.get(username="scientist")
    services.run_retry(run=run, user=user)
    run_advance(run.pk)

    unit = UnitRun.objects.get(pk=unit.pk)
    assert unit.attempt == 2, "attempts go 1 -> 2, not 1 -> 3"
    assert unit.site != first_site and unit.workflow_name
    failover = RunEvent.objects.get(run=run, kind="failover")
    assert f"site {first_site} is cordoned" in failover.message
    assert "not ready" not in failover.message
    assert f"attempt 2 placed at {unit.site} instead" in failover.message

    answer = api_client_for(user).get(f"/api/v1/runs/{run.pk}/units/{unit.name}/")
    assert answer.status_code == 200, answer.content
    assert [a["number"] for a in answer.json()["attempts"]] == [1, 2]


def test_a_blocked_failover_is_one_event_with_a_banner_until_it_unblocks(
    fleet: SandboxServer,  # noqa: F811
    client_for: Any,
) -> None:
    run = submit(workflow(fleet, gpu=True))
    unit = run.units.get()
    gpu_site = unit.site
    assert gpu_site, "a GPU step is placed at submission"
    site_set_cordoned(site=Site.objects.get(name=gpu_site), cordoned=True, user=None)
    for _ in range(3):  # every advance and resync tries again
        run_advance(run.pk)
    blocked = list(RunEvent.objects.filter(run=run, kind="failover-blocked"))
    assert len(blocked) == 1, [e.message for e in blocked]
    assert f"site {gpu_site} is cordoned; no other site" in blocked[0].message

    page = client_for(get_user_model().objects.get(username="scientist"))
    html = page.get(f"/runs/{run.pk}/").content.decode()
    assert "Failover blocked:" in html and blocked[0].message in html

    site_set_cordoned(site=Site.objects.get(name=gpu_site), cordoned=False, user=None)
    run_advance(run.pk)
    assert UnitRun.objects.get(pk=unit.pk).workflow_name, "submitted once the site opened"
    html = page.get(f"/runs/{run.pk}/").content.decode()
    assert "Failover blocked:" not in html
