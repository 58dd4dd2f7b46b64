"""The rule revision on step workflows with every real part: the worker creates them on the
sandbox, karmada-apiserver (the sandbox) calls the webhook, which places the runtime unit and
patches in the revision active when it decides; the watcher's drain records that decision
for replay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User

from placement.revisions import services as revisions
from placement.revisions.models import PlanningRecord
from placement.revisions.selectors import current_config
from portal import labels, services
from portal.admission import decide
from portal.karmada import client, resources
from portal.models import UnitRun
from tests.factories import UserFactory
from tests.fixtures_stack import Stack, wait_for

pytestmark = [pytest.mark.integration]

DEMO = (Path(__file__).resolve().parents[2] / "examples" / "eo-pipeline.yaml").read_text()
DURATION = "portal.multisite.io/sandbox-duration"


def _slow_demo(seconds: int) -> str:
    doc = yaml.safe_load(DEMO)
    for template in doc["spec"]["templates"]:
        if "container" in template or "script" in template:
            meta = template.setdefault("metadata", {})
            meta.setdefault("annotations", {})[DURATION] = f"{seconds}s"
    return yaml.safe_dump(doc)


def test_step_workflows_on_karmada_carry_the_revision_that_placed_them(
    live: Stack, settings: Any
) -> None:
    settings.PORTAL_RULES_REVIEW = False
    key = labels.key(labels.RULES_REVISION)
    baseline = revisions.revision_baseline()
    run = services.run_submit(user=User.objects.get(username="scientist"), body=_slow_demo(40))
    # A revision applied after submission, before preprocess (runtime) is placed.
    config = current_config()
    for site in config["sites"]:
        if site["name"] == "site-b":
            site["overrides"] = {**site["overrides"], "gpu_node_selector": {"pool": "gpu"}}
    alice = UserFactory(username="alice", is_staff=True)
    later = revisions.revision_draft_create(user=alice, config=config)
    revisions.revision_apply(revision=later, user=alice)
    decide.snapshot_clear()  # the webhook runs in this process

    def workflow(unit: str) -> dict[str, Any] | None:
        name = UnitRun.objects.get(run=run, name=unit).workflow_name
        if not name:
            return None
        obj = client.get(resources.WORKFLOW, name)
        return obj if labels.key(labels.SITE) in (obj["metadata"].get("labels") or {}) else None

    ingest = wait_for(lambda: workflow("ingest"), 60, "ingest's step workflow")
    preprocess = wait_for(lambda: workflow("preprocess"), 90, "preprocess's step workflow")
    assert ingest is not None and preprocess is not None

    assert ingest["metadata"]["annotations"][key] == str(baseline.pk)
    # Placed by the webhook (site-a has no CPU free for it): the revision active then.
    assert preprocess["metadata"]["labels"][labels.key(labels.SITE)] == "site-b"
    assert preprocess["metadata"]["annotations"][key] == str(later.pk)
    record = wait_for(
        lambda: PlanningRecord.objects.filter(run_id=run.pk, admission_uid__isnull=False).first(),
        30,
        "the webhook's decision recorded for replay",
    )
    assert record is not None and record.revision_id == later.pk
    assert record.units[0]["name"] == "preprocess"
