"""Residency holds for everything derived, in the webhook's own decision,
against the sandbox over HTTP: karmada-apiserver (the sandbox) calls the portal's webhook (the
test's live server) when a runtime step workflow is created, and the unit that reads only the
outputs of a step that read a residency-bound dataset is placed inside the dataset's region,
with the reason saying why."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.core.management import call_command

from portal import services
from portal.admission import decide
from portal.admission import queue as decision_queue
from portal.choices import DecisionSource, UnitPhase
from portal.controller.advance import run_advance
from portal.controller.bindings import bindings_observe
from portal.controller.sync import policies_sync
from portal.karmada import client, lists, resources
from portal.models import PlacementDecision, UnitRun, WorkflowRun
from sites.models import Dataset
from tests.fixtures_sandbox import SandboxServer

D = "portal.multisite.io"
TOKEN = "residency-webhook-token"
BOUND = "bound to eu-central by sentinel2-l1c read upstream"


@pytest.fixture
def fleet(
    sandbox: SandboxServer, transactional_db: Any, live_server: Any, settings: Any
) -> Iterator[SandboxServer]:
    settings.KARMADA_KUBECONFIG = str(sandbox.kubeconfig)
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.PORTAL_WEBHOOK_REGISTER = True
    settings.PORTAL_WEBHOOK_URL = f"{live_server.url}/webhooks/placement/"
    settings.PORTAL_WEBHOOK_TOKEN = TOKEN
    # The live server answers in a thread of this busy machine; the budget is not what is
    # tested here (an admission past it is answered without a patch and the test says so).
    settings.PORTAL_WEBHOOK_BUDGET_MS = 2500
    client.reset()
    decide.snapshot_clear()
    call_command("load_demo", verbosity=0)
    # Residency only site-c's region satisfies.
    Dataset.objects.filter(name="sentinel2-l1c").update(residency=["eu-central"])
    policies_sync()
    try:
        yield sandbox
    finally:
        decide.snapshot_clear()
        client.reset()


def derived_pipeline() -> str:
    """ingest reads the eu-central-only dataset and passes nothing on by artifact (its template
    declares no output artifacts: 0 bytes, so no data gravity pulls the next step anywhere);
    preprocess (placed at runtime by the demo's rules) reads nothing registered itself."""
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "derived-"},
            "spec": {
                "entrypoint": "main",
                "templates": [
                    {
                        "name": "main",
                        "dag": {
                            "tasks": [
                                {"name": "ingest", "template": "ingest"},
                                {"name": "preprocess", "template": "work", "depends": "ingest"},
                            ]
                        },
                    },
                    {
                        "name": "ingest",
                        "metadata": {"annotations": {f"{D}/datasets": "sentinel2-l1c"}},
                        "container": {"image": "busybox"},
                    },
                    {
                        "name": "work",
                        "container": {"image": "busybox", "resources": {"requests": {"cpu": "1"}}},
                    },
                ],
            },
        }
    )


def observe_until(sandbox: SandboxServer, unit: UnitRun, phase: str) -> UnitRun:
    def reached() -> UnitRun | None:
        bindings_observe(lists.list_objects(resources.RESOURCE_BINDING)[0])
        u = UnitRun.objects.get(pk=unit.pk)
        return u if u.phase == phase else None

    return sandbox.wait_for(reached, what=f"{unit.name} to be {phase}")


def test_the_webhook_binds_a_step_reading_derived_outputs_to_the_datasets_region(fleet) -> None:
    user = get_user_model().objects.get(username="scientist")
    run: WorkflowRun = services.run_submit(user=user, body=derived_pipeline())
    ingest = run.units.get(name="ingest")
    preprocess = run.units.get(name="preprocess")
    assert ingest.site == "site-c"  # it reads the dataset itself
    assert preprocess.timing == "runtime" and not preprocess.site

    run_advance(run.pk)
    observe_until(fleet, ingest, UnitPhase.SUCCEEDED)
    run_advance(run.pk)
    preprocess.refresh_from_db()
    assert preprocess.workflow_name, preprocess.reason

    # The webhook decided (its patch replaced the worker's fallback label with a site).
    created = client.get(resources.WORKFLOW, preprocess.workflow_name)
    labels = created["metadata"]["labels"]
    assert f"{D}/fallback-site" not in labels, "the webhook did not place the step"
    assert labels[f"{D}/site"] == "site-c"
    assert BOUND in created["metadata"]["annotations"][f"{D}/reason"]

    decision_queue.decisions_flush()
    decision = PlacementDecision.objects.get(unit=preprocess, source=DecisionSource.WEBHOOK)
    assert decision.site == "site-c"
    assert BOUND in decision.reason
    why = {c["site"]: c["why"] for c in decision.candidates}
    assert "must stay in eu-central" in why["site-b"], why

    # Karmada bound it there, and it ran there.
    done = observe_until(fleet, preprocess, UnitPhase.SUCCEEDED)
    assert done.site == "site-c"
