"""A site's Karmada taints and its refusal grace: read from the Cluster, shown by the API, the
grace set by the site's operators only, and a tainted site not eligible for the planner."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from placement import planner
from placement.parser import parse_workflow
from placement.selectors import site_state
from portal.controller.sync import cluster_note, cluster_observe
from sites.models import Site

pytestmark = pytest.mark.django_db


ONE_STEP = """
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {generateName: one-}
spec:
  entrypoint: main
  templates:
  - name: main
    container: {image: busybox}
"""


def cluster(taints: list[dict[str, str]]) -> dict[str, object]:
    return {
        "metadata": {"name": "site-op"},
        "spec": {"taints": taints},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_the_clusters_taints_reach_the_site_and_close_it_to_the_planner(
    operated_site: Site,
) -> None:
    cordon = {"key": "cluster.karmada.io/unschedulable", "effect": "NoSchedule"}
    cluster_observe(cluster([cordon]))
    site = Site.objects.get(pk=operated_site.pk)
    assert site.taints == [cordon]
    assert site.karmada_taint == "cluster.karmada.io/unschedulable:NoSchedule"
    fleet = planner.Fleet(sites=(site_state(site),), links=())
    unit = parse_workflow(ONE_STEP).units[0]
    decision = planner.decide(unit, fleet, [], [])
    assert decision.site is None
    assert "Karmada will not schedule here (untolerated taint " in decision.reason

    # A PreferNoSchedule taint keeps nothing away; karmadactl uncordon removes the taint.
    cluster_observe(cluster([{"key": "soft", "effect": "PreferNoSchedule"}]))
    assert Site.objects.get(pk=site.pk).karmada_taint == ""
    cluster_note(cluster([]))
    assert Site.objects.get(pk=site.pk).taints == []


def test_the_operator_sets_the_refusal_grace(operator_api: APIClient, operated_site: Site) -> None:
    url = f"/api/v1/sites/{operated_site.name}/"
    answer = operator_api.patch(url, {"refusal_grace_seconds": 600}, format="json")
    assert answer.status_code == 200, answer.json()
    assert answer.json()["refusal_grace_seconds"] == 600
    assert answer.json()["taints"] == []
    assert Site.objects.get(pk=operated_site.pk).refusal_grace_seconds == 600
    answer = operator_api.patch(url, {"refusal_grace_seconds": None}, format="json")
    assert answer.status_code == 200 and answer.json()["refusal_grace_seconds"] is None


@pytest.mark.parametrize("value", [-1, "soon", 10**9])
def test_a_bad_grace_is_refused_naming_the_field(
    operator_api: APIClient, operated_site: Site, value: object
) -> None:
    answer = operator_api.patch(
        f"/api/v1/sites/{operated_site.name}/", {"refusal_grace_seconds": value}, format="json"
    )
    assert answer.status_code == 400
    assert [e["path"] for e in answer.json()["errors"]] == ["refusal_grace_seconds"]
    assert Site.objects.get(pk=operated_site.pk).refusal_grace_seconds is None


def test_only_the_sites_operators_set_its_grace(
    outsider_api: APIClient, operated_site: Site
) -> None:
    answer = outsider_api.patch(
        f"/api/v1/sites/{operated_site.name}/", {"refusal_grace_seconds": 1}, format="json"
    )
    assert answer.status_code == 403
    assert Site.objects.get(pk=operated_site.pk).refusal_grace_seconds is None
