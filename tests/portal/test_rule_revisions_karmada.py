"""Karmada's policies follow the active rule revision: each carries it as an annotation, and a
rollback's sync leaves the objects of the earlier revision (Karmada's own fields aside)."""

from __future__ import annotations

from typing import Any

from placement.revisions import services
from placement.revisions.selectors import current_config
from portal import labels
from portal.controller.sync import policies_sync
from portal.karmada import lists, resources
from tests.factories import UserFactory
from tests.fixtures_sandbox import SandboxServer


def _objects() -> dict[tuple[str, str], dict[str, Any]]:
    """Every portal policy on karmada-apiserver, without Karmada's own fields and without the
    revision annotation (which names the revision that wrote it)."""
    revision_key = labels.key(labels.RULES_REVISION)
    out = {}
    for resource in (resources.PROPAGATION_POLICY, resources.OVERRIDE_POLICY):
        for item in lists.list_objects(resource)[0]:
            meta = item["metadata"]
            kept_labels = {
                k: v for k, v in (meta.get("labels") or {}).items() if "karmada.io" not in k
            }
            annotations = {
                k: v for k, v in (meta.get("annotations") or {}).items() if k != revision_key
            }
            out[(resource.kind, meta["name"])] = {
                "labels": kept_labels,
                "annotations": annotations,
                "spec": item.get("spec"),
            }
    return out


def _revisions(sandbox: SandboxServer) -> set[str]:
    key = labels.key(labels.RULES_REVISION)
    return {
        (p["metadata"].get("annotations") or {}).get(key, "")
        for p in lists.list_objects(resources.PROPAGATION_POLICY)[0]
        if p["metadata"]["name"].startswith("portal-")
    }


def test_policies_carry_the_active_revision_and_a_rollback_restores_the_earlier_objects(
    demo_fleet: SandboxServer, settings: Any
) -> None:
    settings.PORTAL_RULES_REVIEW = False
    alice = UserFactory(username="alice", is_staff=True)
    baseline = services.revision_baseline()
    policies_sync()
    assert _revisions(demo_fleet) == {str(baseline.pk)}
    earlier = _objects()

    config = current_config()
    for site in config["sites"]:
        if site["name"] == "site-b":
            site["overrides"] = {**site["overrides"], "gpu_node_selector": {"pool": "gpu"}}
    draft = services.revision_draft_create(user=alice, config=config)
    services.revision_apply(revision=draft, user=alice)
    policies_sync()
    assert _revisions(demo_fleet) == {str(draft.pk)}
    changed = _objects()
    assert ("OverridePolicy", "portal-site-site-b-gpu") in changed
    assert changed != earlier

    back = services.revision_rollback(revision=baseline, user=alice)
    services.revision_apply(revision=back, user=alice)
    policies_sync()  # one sync
    assert _revisions(demo_fleet) == {str(back.pk)}
    assert _objects() == earlier


def test_an_applied_revision_places_the_next_run_and_runs_in_flight_keep_their_decisions(
    demo_fleet: SandboxServer, settings: Any
) -> None:
    from django.conf import settings as django_settings

    from sites.models import Site

    settings.PORTAL_RULES_REVIEW = False
    Site.objects.filter(name="site-b").update(gpu_allocatable=4)
    pipeline = (django_settings.BASE_DIR / "examples" / "eo-pipeline.yaml").read_text()
    scientist = UserFactory(username="scientist")
    before = services_run_submit(scientist, pipeline)
    assert before.units.get(name="inference").site == "site-c"

    alice = UserFactory(username="alice", is_staff=True)
    config = current_config()
    for rule in config["rules"]:
        if rule["name"] == "inference-on-gpu":
            rule["effect"], rule["parameters"] = "pin", {"sites": ["site-b"]}
    draft = services.revision_draft_create(user=alice, config=config)
    services.revision_apply(revision=draft, user=alice)
    policies_sync()

    after = services_run_submit(scientist, pipeline)
    assert after.units.get(name="inference").site == "site-b"
    assert before.units.get(name="inference").site == "site-c"  # decided before: kept
    assert _revisions(demo_fleet) == {str(draft.pk)}


def services_run_submit(user: Any, body: str) -> Any:
    from portal import services as run_services

    return run_services.run_submit(user=user, body=body)
