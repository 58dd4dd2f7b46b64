"""Karmada's refusals folded into the unit, against the sandbox over HTTP: the message names
the real cause, it and its event come once however often the binding is seen, they go once
Karmada accepts the step, and the re-placement waits for the site's grace and happens once.
The wording for each of Karmada's refusals is checked on bindings as Karmada writes them."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from portal import execution, gateway
from portal.choices import DecisionSource, UnitPhase
from portal.execution.refusals import refusal_of
from portal.models import PlacementDecision, RunEvent, UnitRun
from portal.selectors import unit_waiting_for
from sites.models import Site
from tests.fixtures_sandbox import SandboxServer
from tests.portal.test_step_lifecycle import fleet, submit  # noqa: F401 - the fixture

TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def taint(sandbox: SandboxServer, site: str, taints: list[dict[str, Any]]) -> None:
    client.CustomObjectsApi(sandbox.api_client()).patch_cluster_custom_object(
        "cluster.karmada.io", "v1alpha1", "clusters", site, {"spec": {"taints": taints}}
    )


def observe(folded: execution.Folded) -> UnitRun:
    """What the watcher does with every binding it sees (twice: a repeated state)."""
    items, _ = gateway.list_objects(gateway.RESOURCE_BINDING)
    for _ in range(2):
        execution.bindings_observe(items, folded=folded)
        execution.bindings_observe(items)  # the resync, without the watcher's memory
    return UnitRun.objects.get()


def refused_unit(sandbox: SandboxServer) -> UnitRun:
    """One step decided for site-a at submission; site-a tainted before it is created."""
    run = submit(sandbox, duration="1s")
    assert run.units.get().site == "site-a"
    taint(sandbox, "site-a", [TAINT])
    execution.run_advance(run.pk)
    folded = execution.Folded()

    def said() -> UnitRun | None:
        unit = observe(folded)
        return unit if unit.refused_at else None

    return sandbox.wait_for(said, what="the refusal folded in")


def test_a_taint_is_named_said_once_and_cleared_when_karmada_accepts(
    fleet: SandboxServer,  # noqa: F811
) -> None:
    unit = refused_unit(fleet)
    assert unit.phase == UnitPhase.PENDING and unit.attempt == 1
    assert unit.message.startswith(
        "site-a has the taint dedicated=gpu:NoSchedule, which steps do not tolerate. "
        "Karmada: Scheduled=False, NoClusterFit: 0/3 clusters are available: "
        "1 cluster(s) had untolerated taint {dedicated=gpu:NoSchedule}"
    ), unit.message
    assert unit_waiting_for(unit, {}).startswith(
        "Karmada refuses it: site-a has the taint dedicated=gpu:NoSchedule"
    )
    observe(execution.Folded())
    (said,) = RunEvent.objects.filter(unit=unit, kind="karmada-refused")
    assert said.message == f"main: {unit.message}"
    assert said.data == {
        "site": "site-a",
        "because": "Karmada could not schedule to site-a: "
        "untolerated taint dedicated=gpu:NoSchedule",
    }

    taint(fleet, "site-a", [])

    def gone() -> UnitRun | None:
        unit = observe(execution.Folded())
        return unit if unit.refused_at is None else None

    accepted = fleet.wait_for(gone, what="the refusal gone")
    assert accepted.site == "site-a" and accepted.attempt == 1
    assert not accepted.message.startswith("site-a has the taint")


def test_the_step_is_placed_again_after_the_sites_grace_once(
    fleet: SandboxServer,  # noqa: F811
) -> None:
    unit = refused_unit(fleet)
    Site.objects.filter(name="site-a").update(refusal_grace_seconds=3600)
    assert execution.refusals_replace() == []  # within the site's grace
    assert UnitRun.objects.get(pk=unit.pk).attempt == 1

    Site.objects.filter(name="site-a").update(refusal_grace_seconds=0)
    assert execution.refusals_replace() == [unit.run_id]
    assert execution.refusals_replace() == []  # nothing twice
    moved = UnitRun.objects.get(pk=unit.pk)
    assert moved.attempt == 2 and moved.site not in ("", "site-a")
    assert moved.refused_at is None and moved.message == ""
    with pytest.raises(gateway.NotFound):
        gateway.get(gateway.WORKFLOW, unit.workflow_name)  # the refused one is deleted
    (decision,) = PlacementDecision.objects.filter(unit=unit, attempt=2)
    assert decision.source == DecisionSource.FAILOVER and decision.site == moved.site
    assert decision.reason.startswith(
        "re-placed: Karmada could not schedule to site-a: "
        "untolerated taint dedicated=gpu:NoSchedule; "
    ), decision.reason
    assert RunEvent.objects.filter(unit=unit, kind="failover").count() == 1


def binding(
    conditions: list[dict[str, Any]] | None = None,
    aggregated: list[dict[str, Any]] | None = None,
    placement: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {"name": "x-workflow", "annotations": annotations or {}},
        "spec": {"resource": {"kind": "Workflow", "name": "x"}, "placement": placement or {}},
        "status": {"conditions": conditions or [], "aggregatedStatus": aggregated or []},
    }


def unscheduled(reason: str, message: str) -> list[dict[str, Any]]:
    return [{"type": "Scheduled", "status": "False", "reason": reason, "message": message}]


@pytest.mark.django_db
def test_a_cordoned_site_is_said_in_words() -> None:
    cordoned = refusal_of(
        binding(
            unscheduled(
                "NoClusterFit",
                "0/3 clusters are available: 1 cluster(s) had untolerated taint "
                "{cluster.karmada.io/unschedulable:NoSchedule}, 2 cluster(s) did not match "
                "the placement cluster affinity constraint.",
            )
        ),
        "site-b",  # a site the portal has no taints of yet: Karmada's message names it
    )
    assert cordoned is not None and cordoned.cause == "cordoned"
    assert cordoned.text.startswith("site-b is cordoned (cluster.karmada.io/unschedulable). ")


@pytest.mark.django_db
def test_a_site_that_is_not_ready_is_said_in_words() -> None:
    lost = refusal_of(
        binding(
            unscheduled(
                "NoClusterFit",
                "0/3 clusters are available: 1 cluster(s) had untolerated taint "
                "{cluster.karmada.io/not-ready:NoSchedule}, 2 cluster(s) did not match "
                "the placement cluster affinity constraint.",
            )
        ),
        "site-b",
    )
    assert lost is not None and lost.text.startswith(
        "site-b is not ready (cluster.karmada.io/not-ready). "
    )


@pytest.mark.django_db
def test_an_affinity_no_cluster_matches_is_said_in_words() -> None:
    affinity = refusal_of(
        binding(
            unscheduled(
                "NoClusterFit",
                "0/3 clusters are available: "
                "3 cluster(s) did not match the placement cluster affinity constraint.",
            ),
            placement={
                "clusterAffinities": [
                    {
                        "affinityName": "gold",
                        "clusterNames": ["site-z"],
                        "labelSelector": {
                            "matchExpressions": [
                                {"key": "tier", "operator": "In", "values": ["gold"]}
                            ]
                        },
                    }
                ]
            },
            annotations={"clusterpropagationpolicy.karmada.io/name": "fleet-gold"},
        ),
        "site-a",
    )
    assert affinity is not None
    assert affinity.text.startswith(
        "no cluster matches the affinity (clusterNames site-z; labels tier In gold) of "
        "ClusterPropagationPolicy fleet-gold. Karmada: Scheduled=False, NoClusterFit: "
    ), affinity.text
    assert affinity.replaced_because == (
        "Karmada could not schedule to site-a: no cluster matches the affinity"
    )


@pytest.mark.django_db
def test_a_site_without_argos_crd_is_said_in_words() -> None:
    api = refusal_of(
        binding(
            unscheduled(
                "NoClusterFit",
                "0/1 clusters are available: 1 cluster(s) did not have the API resource.",
            )
        ),
        "site-c",
    )
    assert api is not None and api.text.startswith(
        "site-c does not serve argoproj.io/v1alpha1 Workflow (Argo's CRD is not installed there)"
    )


@pytest.mark.django_db
def test_a_scheduler_error_is_said_in_words() -> None:
    error = refusal_of(binding(unscheduled("SchedulerError", "etcd timed out")), "site-c")
    assert error is not None and error.cause == "SchedulerError"
    assert error.text == (
        "Karmada could not schedule it. Karmada: Scheduled=False, SchedulerError: etcd timed out"
    )


@pytest.mark.django_db
def test_a_work_the_member_refused_is_said_in_words() -> None:
    work = refusal_of(
        binding(
            [{"type": "Scheduled", "status": "True", "reason": "Success"}],
            [
                {
                    "clusterName": "site-c",
                    "appliedMessage": "Failed to apply all manifests (0/1): no",
                }
            ],
        ),
        "site-c",
    )
    assert work is not None and not work.scheduling
    assert work.text == "site-c refused the Work: Failed to apply all manifests (0/1): no"
    assert work.replaced_because == work.text


@pytest.mark.django_db
def test_an_applied_binding_is_no_refusal() -> None:
    applied = binding(
        [{"type": "Scheduled", "status": "True", "reason": "Success"}],
        [{"clusterName": "site-c", "applied": True, "status": {"phase": "Running"}}],
    )
    assert refusal_of(applied, "site-c") is None
