"""A step placed at submission is placed again when it is about to start if a runtime step
upstream landed at a site whose artifact repository it cannot read: at
submission the planner could only check against where that step would probably go."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from django.contrib.auth import get_user_model

from portal import services, state
from portal.choices import DecisionSource, UnitPhase
from portal.controller.advance import run_advance
from portal.karmada import client, resources
from portal.models import PlacementDecision, RunEvent, UnitRun, WorkflowRun
from sites.models import SiteLink
from tests.fixtures_sandbox import SandboxServer
from tests.fixtures_stack import demo_on


@pytest.fixture
def fleet(sandbox: SandboxServer, db: Any, settings: Any) -> Iterator[SandboxServer]:
    with demo_on(sandbox, settings):
        yield sandbox


def pipeline() -> str:
    """preprocess is placed at runtime (the demo's rules); use reads its output and is placed
    at submission."""
    step = {"image": "busybox", "resources": {"requests": {"cpu": "1"}}}
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "reach-"},
            "spec": {
                "entrypoint": "main",
                "templates": [
                    {
                        "name": "main",
                        "dag": {
                            "tasks": [
                                {"name": "preprocess", "template": "make"},
                                {"name": "use", "template": "use", "depends": "preprocess"},
                            ]
                        },
                    },
                    {
                        "name": "make",
                        "container": step,
                        "outputs": {"artifacts": [{"name": "out", "path": "/out"}]},
                    },
                    {"name": "use", "container": step},
                ],
            },
        }
    )


def test_a_step_whose_site_cannot_read_where_its_upstream_ran_is_placed_again(fleet) -> None:
    user = get_user_model().objects.get(username="scientist")
    run: WorkflowRun = services.run_submit(user=user, body=pipeline())
    use = run.units.get(name="use")
    planned = use.site
    assert planned and not run.units.get(name="preprocess").site

    # preprocess ran somewhere else than planned, and the planned site cannot read there.
    elsewhere = next(s for s in ("site-a", "site-b", "site-c") if s != planned)
    SiteLink.objects.filter(source__name=elsewhere, target__name=planned).update(
        artifacts_reachable=False
    )
    pre = run.units.get(name="preprocess")
    state.unit_place(UnitRun.objects.filter(pk=pre.pk), elsewhere, from_sites=[pre.site])
    pre.refresh_from_db()
    state.unit_move(pre, UnitPhase.RUNNING)
    state.unit_move(
        pre, UnitPhase.SUCCEEDED, outputs={"artifacts": [{"name": "out", "s3": {"key": "k"}}]}
    )

    run_advance(run.pk)

    use.refresh_from_db()
    assert use.site != planned
    assert use.workflow_name, use.reason
    decision = PlacementDecision.objects.get(unit=use, source=DecisionSource.FAILOVER)
    assert decision.site == use.site
    event = RunEvent.objects.get(run=run, unit=use, kind="failover")
    assert f"site {planned} cannot reach the artifact repository of {elsewhere}" in event.message
    labels = client.get(resources.WORKFLOW, use.workflow_name)["metadata"]["labels"]
    assert labels["portal.multisite.io/site"] == use.site
