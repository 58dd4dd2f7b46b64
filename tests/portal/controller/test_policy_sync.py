"""Policies written the way Karmada accepts them: Karmada's webhooks add a
permanent-id label, a finalizer and defaults to every PropagationPolicy and refuse an update
that drops the label, so the portal compares only the fields it owns and keeps the rest."""

from __future__ import annotations

from typing import Any

import pytest

from portal.controller.sync import policies_sync
from portal.karmada import client, lists, resources
from portal.karmada import client as karmada
from portal.owned_fields import covers, three_way
from sites.models import Site
from tests.fixtures_sandbox import SandboxServer

PERMANENT_ID = "propagationpolicy.karmada.io/permanent-id"


@pytest.fixture
def fleet(demo_over_sandbox: SandboxServer) -> SandboxServer:
    return demo_over_sandbox


def _policy(name: str) -> dict[str, Any]:
    return client.get(resources.PROPAGATION_POLICY, name)


def _policy_names() -> set[str]:
    return {p["metadata"]["name"] for p in lists.list_objects(resources.PROPAGATION_POLICY)[0]}


def _override(name: str) -> dict[str, Any]:
    return client.get(resources.OVERRIDE_POLICY, name)


def test_policies_synced_again_after_an_override_change_keep_karmadas_label(fleet) -> None:
    first = policies_sync()
    assert first["failed"] == 0
    pid = _policy("portal-site-site-b")["metadata"]["labels"][PERMANENT_ID]
    assert pid  # Karmada's webhook added it on create

    site = Site.objects.get(name="site-b")
    site.overrides = {**(site.overrides or {}), "gpu_node_selector": {"pool": "gpu-one"}}
    site.save()
    assert policies_sync()["failed"] == 0
    site.overrides = {**site.overrides, "gpu_node_selector": {"pool": "gpu-two"}}
    site.save()
    assert policies_sync()["failed"] == 0

    policy = _policy("portal-site-site-b")
    assert policy["metadata"]["labels"][PERMANENT_ID] == pid
    assert "karmada.io/propagation-policy-controller" in policy["metadata"]["finalizers"]
    overrides = [
        o["metadata"]["name"]
        for o in lists.list_objects(resources.OVERRIDE_POLICY)[0]
        if o["metadata"]["name"].startswith("portal-site-site-b")
    ]
    texts = " ".join(str(_override(n)["spec"]) for n in overrides)
    assert "gpu-two" in texts
    assert "gpu-one" not in texts


def test_a_sync_that_finds_everything_in_step_writes_nothing(fleet) -> None:
    policies_sync()
    before = _policy("portal-site-site-a")["metadata"]["resourceVersion"]
    policies_sync()
    assert _policy("portal-site-site-a")["metadata"]["resourceVersion"] == before


def test_a_sync_that_finds_everything_in_step_costs_karmada_a_list_per_kind(fleet) -> None:
    """The resync runs the sync every few seconds: in step, it reads the namespace and lists
    the two kinds, whatever the number of sites (it was a create and a read per object)."""
    policies_sync()
    before = fleet.request("GET", "/_sandbox/stats")["total"]
    counts = policies_sync()
    assert fleet.request("GET", "/_sandbox/stats")["total"] - before == 3
    assert counts["applied"] == 0 and counts["in_step"] >= Site.objects.count()


def test_a_policy_changed_on_karmada_is_put_back_by_the_next_sync(fleet) -> None:
    policies_sync()
    changed = _policy("portal-site-site-b")
    wanted = changed["spec"]["placement"]
    changed["spec"]["placement"] = {"clusterAffinity": {"clusterNames": ["site-a"]}}
    client.replace(resources.PROPAGATION_POLICY, "portal-site-site-b", changed)
    client.delete(resources.PROPAGATION_POLICY, "portal-site-site-a")
    # Karmada's finalizer keeps it a moment (terminating); a sync then finds it there, as a
    # create would (AlreadyExists), and the next one writes it: wait until it is gone.
    fleet.wait_for(lambda: "portal-site-site-a" not in _policy_names(), what="the deletion")
    counts = policies_sync()
    assert counts["applied"] == 2
    assert _policy("portal-site-site-b")["spec"]["placement"] == wanted
    assert _policy("portal-site-site-a")["metadata"]["labels"][PERMANENT_ID]


def test_a_site_added_after_the_first_sync_gets_its_policy(fleet) -> None:
    policies_sync()
    Site.objects.create(name="site-d", region="eu-west")
    counts = policies_sync()
    assert counts["failed"] == 0
    assert _policy("portal-site-site-d")["metadata"]["labels"][PERMANENT_ID]


def test_a_field_karmada_defaulted_is_kept_and_one_the_portal_dropped_is_removed() -> None:
    last = {"placement": {"clusterAffinity": {"clusterNames": ["a"]}, "old": 1}}
    current = {
        "placement": {"clusterAffinity": {"clusterNames": ["a"]}, "old": 1},
        "conflictResolution": "Abort",  # a CRD default the portal never wrote
        "resourceSelectors": [{"kind": "Workflow", "namespace": "portal"}],
    }
    want = {
        "placement": {"clusterAffinity": {"clusterNames": ["b"]}},
        "resourceSelectors": [{"kind": "Workflow"}],
    }
    merged = three_way(current, last, want)
    assert merged == {
        "placement": {"clusterAffinity": {"clusterNames": ["b"]}},
        "conflictResolution": "Abort",
        "resourceSelectors": [{"kind": "Workflow", "namespace": "portal"}],
    }
    assert covers(merged, want)
    assert not covers(current, want)


def test_a_policy_karmada_refuses_shows_on_the_fleet_page_readyz_and_metrics(
    fleet, client, django_user_model
) -> None:
    policies_sync()
    # Out of step (changed on Karmada behind the portal's back), so the next sync writes it;
    # a policy in step is not written at all.
    changed = _policy("portal-site-site-c")
    changed["spec"]["placement"] = {"clusterAffinity": {"clusterNames": ["site-a"]}}
    karmada.replace(resources.PROPAGATION_POLICY, "portal-site-site-c", changed)
    path = (
        "/apis/policy.karmada.io/v1alpha1/namespaces/portal/propagationpolicies/portal-site-site-c"
    )
    fleet.fault("api-error", status=403, path=path)
    counts = policies_sync()
    assert counts["failed"] == 1
    assert "403" in Site.objects.get(name="site-c").policy_error
    assert Site.objects.get(name="site-a").policy_error == ""

    staff = django_user_model.objects.create_user("op", password="pw-op-1234", is_staff=True)
    client.force_login(staff)
    page = client.get("/fleet/").content.decode()
    assert "Policy not written" in page
    metrics = client.get("/metrics").content.decode()
    assert 'portal_policy_write_failures{site="site-c"} 1.0' in metrics
    assert 'portal_policy_write_failures{site="site-a"} 0.0' in metrics
    ready = client.get("/readyz").json()
    assert "403" in ready.get("policies", {}).get("site-c", "")

    fleet.clear_faults()
    assert policies_sync()["failed"] == 0
    assert Site.objects.get(name="site-c").policy_error == ""
    assert (
        'portal_policy_write_failures{site="site-c"} 0.0' in client.get("/metrics").content.decode()
    )
