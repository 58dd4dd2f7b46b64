"""A fan-out spreads by capacity on Karmada, not only in the planner: three
member clusters that hold 20 CPUs each (as their Cluster status reports it), a 60-tile fan-out
of one-CPU tiles submitted over REST, the worker creates the step workflows, and Karmada's
bindings put 20 on each site."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from rest_framework.test import APIClient

from portal.controller.advance import run_advance
from portal.controller.sync import cluster_observe, policies_sync
from portal.karmada import lists, resources
from portal.models import UnitRun
from sites.models import Site
from tests.fixtures_sandbox import SandboxServer, sandbox_on_fleet
from tests.fixtures_stack import gateway_on
from tests.portal.test_reservations import tiles

SITES = (("site-a", "eu-west"), ("site-b", "eu-west"), ("site-c", "eu-central"))


@pytest.fixture(scope="module")
def twenties(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxServer]:
    """A sandbox whose three members have 20 CPUs each and nothing else running."""
    fleet = {
        "sites": [
            {
                "name": name,
                "region": region,
                "zone": f"{region}-1a",
                "nodes": 2,
                "capacity": {"cpu": "20", "memory": "64Gi", "pods": "110"},
            }
            for name, region in SITES
        ]
    }
    with sandbox_on_fleet(tmp_path_factory.mktemp("twenties"), fleet) as server:
        yield server


@pytest.fixture
def fleet(twenties: SandboxServer, db: Any, settings: Any) -> Iterator[SandboxServer]:
    twenties.reset()

    # What the watcher does: the sites' capacity from their Cluster status.
    def synced() -> bool:
        clusters, _ = lists.list_objects(resources.CLUSTER)
        for cluster in clusters:
            cluster_observe(cluster)
        return all(s.cpu_allocatable == 20_000 for s in Site.objects.all())

    with gateway_on(twenties, settings):
        call_command("load_demo", verbosity=0)
        twenties.wait_for(synced, what="the Clusters' resource summaries")
        assert {s.name: s.cpu_allocatable - s.cpu_allocated for s in Site.objects.all()} == {
            name: 20_000 for name, _ in SITES
        }
        policies_sync()
        try:
            yield twenties
        finally:
            twenties.process.check("during the test")


def test_sixty_tiles_over_three_sites_of_twenty_are_bound_twenty_to_each(fleet) -> None:
    api = APIClient()
    api.force_authenticate(User.objects.get(username="scientist"))
    response = api.post(
        "/api/v1/runs/?project=eo-demo", data=tiles(60), content_type="application/yaml"
    )
    assert response.status_code == 201, response.content
    run_id = response.json()["id"]

    # The worker creates every step workflow (in as many turns as it takes).
    for _ in range(10):
        run_advance(run_id)
        if not UnitRun.objects.filter(run_id=run_id, workflow_name="").exists():
            break
    names = set(UnitRun.objects.filter(run_id=run_id).values_list("workflow_name", flat=True))
    assert len(names) == 60 and "" not in names

    def bound() -> Counter[str] | None:
        bindings, _ = lists.list_objects(resources.RESOURCE_BINDING)
        where = Counter(
            b["spec"]["clusters"][0]["name"]
            for b in bindings
            if b["spec"]["resource"]["name"] in names and b["spec"].get("clusters")
        )
        return where if sum(where.values()) == 60 else None

    assert fleet.wait_for(bound, what="Karmada to bind all 60 tiles") == {
        "site-a": 20,
        "site-b": 20,
        "site-c": 20,
    }
