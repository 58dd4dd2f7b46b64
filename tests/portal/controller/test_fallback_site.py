"""Hard constraints hold when the placement webhook cannot answer, against
the sandbox over HTTP with the webhook registered at a closed port: a runtime step workflow
carries a fallback site chosen by the worker among the sites that satisfy every hard
constraint, that site's policy selects it, and with no such site the unit waits."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.core.management import call_command

from portal import services, state
from portal.choices import DecisionSource, UnitPhase
from portal.controller.advance import run_advance
from portal.controller.bindings import bindings_observe
from portal.controller.sync import policies_sync
from portal.karmada import client, lists, resources
from portal.models import PlacementDecision, UnitRun, WorkflowRun
from sites.models import Dataset, Site, SiteLink
from tests.fixtures_sandbox import SandboxServer

FALLBACK = "portal.multisite.io/fallback-site"


@pytest.fixture
def fleet(sandbox: SandboxServer, db: Any, settings: Any) -> Iterator[SandboxServer]:
    settings.KARMADA_KUBECONFIG = str(sandbox.kubeconfig)
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # Registered, but nothing listens there: karmada-apiserver's call fails and, with
    # failurePolicy Ignore, the Workflow is created as the worker sent it.
    settings.PORTAL_WEBHOOK_REGISTER = True
    settings.PORTAL_WEBHOOK_URL = "http://127.0.0.1:9/webhooks/placement/"
    client.reset()
    call_command("load_demo", verbosity=0)
    # Residency only site-c's region satisfies.
    Dataset.objects.filter(name="sentinel2-l1c").update(residency=["eu-central"])
    policies_sync()
    try:
        yield sandbox
    finally:
        client.reset()


def runtime_step(sandbox: SandboxServer) -> str:
    """One task the demo's rules place at runtime ("preprocess*"), reading the
    residency-bound dataset."""
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "bound-"},
            "spec": {
                "entrypoint": "main",
                "templates": [
                    {
                        "name": "main",
                        "dag": {"tasks": [{"name": "preprocess", "template": "work"}]},
                    },
                    {
                        "name": "work",
                        "metadata": {
                            "annotations": {
                                "portal.multisite.io/datasets": "sentinel2-l1c",
                                sandbox.annotation("duration"): "1s",
                            }
                        },
                        "container": {"image": "busybox", "resources": {"requests": {"cpu": "1"}}},
                    },
                ],
            },
        }
    )


def submit(sandbox: SandboxServer) -> tuple[WorkflowRun, UnitRun]:
    user = get_user_model().objects.get(username="scientist")
    run = services.run_submit(user=user, body=runtime_step(sandbox))
    unit = run.units.get()
    assert unit.timing == "runtime" and not unit.site
    return run, unit


def test_with_the_webhook_refusing_a_residency_bound_runtime_unit_lands_where_it_may(
    fleet,
) -> None:
    run, unit = submit(fleet)
    run_advance(run.pk)
    unit.refresh_from_db()
    created = client.get(resources.WORKFLOW, unit.workflow_name)
    assert created["metadata"]["labels"][FALLBACK] == "site-c"
    assert "portal.multisite.io/site" not in created["metadata"]["labels"]  # no webhook ran

    def placed() -> UnitRun | None:
        bindings_observe(lists.list_objects(resources.RESOURCE_BINDING)[0])
        u = UnitRun.objects.get(pk=unit.pk)
        return u if u.phase == UnitPhase.SUCCEEDED else None

    done = fleet.wait_for(placed, what="the unit to run at its fallback site")
    assert done.site == "site-c"
    decision = PlacementDecision.objects.get(unit=unit, source=DecisionSource.FALLBACK)
    assert decision.site == "site-c"
    assert "fallback site" in decision.reason


def test_with_no_eligible_site_the_unit_waits_pending_and_says_why(fleet) -> None:
    Site.objects.filter(name="site-c").update(cordoned=True)
    run, unit = submit(fleet)
    run_advance(run.pk)
    unit.refresh_from_db()
    assert unit.phase == UnitPhase.PENDING
    assert unit.workflow_name == ""
    assert unit.reason.startswith("waiting: no site satisfies its hard constraints")
    assert not [
        w
        for w in lists.list_objects(resources.WORKFLOW)[0]
        if w["metadata"]["labels"].get("portal.multisite.io/run") == str(run.pk)
    ]

    # The site comes back: the next advance submits it there.
    Site.objects.filter(name="site-c").update(cordoned=False)
    run_advance(run.pk)
    unit.refresh_from_db()
    assert unit.workflow_name
    labels = client.get(resources.WORKFLOW, unit.workflow_name)["metadata"]["labels"]
    assert labels[FALLBACK] == "site-c"


def test_the_generic_fallback_policy_only_catches_workflows_the_portal_did_not_create(
    fleet,
) -> None:
    policy = client.get(resources.PROPAGATION_POLICY, "portal-fallback")
    selectors = policy["spec"]["resourceSelectors"]
    expressions = selectors[0]["labelSelector"]["matchExpressions"]
    assert {"key": "portal.multisite.io/managed", "operator": "DoesNotExist"} in expressions
    site_c = client.get(resources.PROPAGATION_POLICY, "portal-site-site-c")["spec"]
    assert {"portal.multisite.io/fallback-site": "site-c"} in [
        s["labelSelector"].get("matchLabels") for s in site_c["resourceSelectors"]
    ]


def test_a_step_reading_outputs_of_a_bound_dataset_is_bound_too(fleet) -> None:
    """ingest read the eu-central-only dataset; preprocess reads only ingest's outputs, which
    stay where they are even if ingest ran elsewhere: its fallback is still in eu-central."""
    from pathlib import Path

    from portal.controller.submit import fallback_site

    user = get_user_model().objects.get(username="scientist")
    demo = (Path(__file__).resolve().parents[3] / "examples" / "eo-pipeline.yaml").read_text()
    run = services.run_submit(user=user, body=demo)
    UnitRun.objects.filter(run=run, name="ingest").update(phase=UnitPhase.SUCCEEDED)
    units = list(run.units.all())
    preprocess = next(u for u in units if u.name == "preprocess")
    # Where ingest's outputs are would pull preprocess to site-a; residency must not. (Here
    # site-c reads site-a's repository: in the demo fleet it does not, and a
    # step workflow already built is not given a copy.)
    SiteLink.objects.filter(source__name="site-a", target__name="site-c").update(
        artifacts_reachable=True
    )
    for u in units:
        if u.name == "ingest":
            u.site = "site-a"
    assert fallback_site(run, preprocess, units) == "site-c"


def fan_out_over_gen(task: str) -> str:
    """gen reads the eu-central-only dataset; ``task`` fans out over gen's result."""
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "fan-"},
            "spec": {
                "entrypoint": "main",
                "templates": [
                    {
                        "name": "main",
                        "dag": {
                            "tasks": [
                                {"name": "gen", "template": "gen"},
                                {
                                    "name": task,
                                    "template": "tile",
                                    "depends": "gen",
                                    "withParam": "{{tasks.gen.outputs.result}}",
                                },
                            ]
                        },
                    },
                    {
                        "name": "gen",
                        "metadata": {
                            "annotations": {"portal.multisite.io/datasets": "sentinel2-l1c"}
                        },
                        "script": {"image": "python", "source": "print('[1, 2, 3]')"},
                    },
                    {"name": "tile", "container": {"image": "busybox"}},
                ],
            },
        }
    )


def test_with_param_items_get_their_own_bound_decisions(fleet) -> None:
    """gen read the eu-central-only dataset; each item of the fan-out over its output gets a
    decision row of its own, bound to eu-central."""
    user = get_user_model().objects.get(username="scientist")
    run = services.run_submit(user=user, body=fan_out_over_gen("tile"))
    gen = run.units.get(name="gen")
    assert gen.site == "site-c"
    state.unit_move(gen, UnitPhase.RUNNING)
    state.unit_move(gen, UnitPhase.SUCCEEDED, outputs={"result": "[1, 2, 3]"})
    run_advance(run.pk)

    items = [u for u in run.units.all() if u.spec.get("item_index") is not None]
    assert len(items) == 3
    for item in items:
        decision = PlacementDecision.objects.get(unit=item)
        assert decision.site == "site-c"
        assert "bound to eu-central by sentinel2-l1c read upstream" in decision.reason


def test_a_runtime_fan_out_reads_the_fleet_once_a_chunk_and_each_item_as_if_alone(
    fleet, monkeypatch
) -> None:
    """A runtime fan-out's chunks of fifty each take one planner snapshot and one read of the
    items' admitted sites (``PassShared``; per item, that was 14 ms of the worker). Each
    item's fallback site and placement context are the same as when built for it alone from
    every unit of the run."""
    from placement.context import context_annotation
    from portal.controller import submit
    from portal.quotas import selectors as quota_selectors

    items = 120  # three chunks
    user = get_user_model().objects.get(username="scientist")
    # The demo's rules place "preprocess*" at runtime.
    run = services.run_submit(user=user, body=fan_out_over_gen("preprocess"))
    gen = run.units.get(name="gen")
    state.unit_move(gen, UnitPhase.RUNNING)
    state.unit_move(gen, UnitPhase.SUCCEEDED, outputs={"result": str(list(range(items)))})
    snapshots: list[int] = []
    alone: list[int] = []
    real_snapshot, real_admitted = submit.planner_snapshot, quota_selectors.admitted_sites
    monkeypatch.setattr(submit, "planner_snapshot", lambda: snapshots.append(1) or real_snapshot())
    monkeypatch.setattr(
        quota_selectors, "admitted_sites", lambda unit: alone.append(1) or real_admitted(unit)
    )
    run_advance(run.pk)
    created = [u for u in run.units.all() if u.spec.get("item_index") is not None]
    assert len(created) == items and all(u.workflow_name for u in created)
    assert all(u.timing == "runtime" and not u.site for u in created)
    assert len(snapshots) == 3  # one a chunk
    assert alone == []  # the chunk's admitted sites in one query

    monkeypatch.undo()
    units = list(run.units.all())
    for unit in (created[0], created[-1]):
        obj = client.get(resources.WORKFLOW, unit.workflow_name)
        assert obj["metadata"]["labels"][FALLBACK] == submit.fallback_site(run, unit, units)
        context = context_annotation(
            project=run.project.name,
            unit_spec=unit.spec,
            units=units,
            sites=quota_selectors.admitted_sites(unit),
        )
        assert context is not None and '"ancestors":[{"' in context  # gen's dataset
        assert obj["metadata"]["annotations"]["portal.multisite.io/placement-context"] == context
