"""Fan-out reservations through submission: a 60-tile fan-out over three
sites that hold 20 CPUs each spreads over all three, and what active runs hold counts as taken
until the member's resource summary counts the step."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.core.management import call_command

from portal import selectors, services, state
from portal.choices import UnitPhase
from portal.controller import sync
from sites.models import Site
from tests.portal.helpers import EO_PIPELINE, cluster_of

CPU = 1000


@pytest.fixture
def fleet_of_twenties(db: Any, settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    call_command("load_demo", verbosity=0)
    Site.objects.update(cpu_allocatable=20 * CPU, cpu_allocated=0, ready=True, cordoned=False)


def tiles(n: int) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "tiles-"},
            "spec": {
                "entrypoint": "main",
                "templates": [
                    {
                        "name": "main",
                        "dag": {
                            "tasks": [
                                {
                                    "name": "tile",
                                    "template": "tile",
                                    "withItems": list(range(n)),
                                }
                            ]
                        },
                    },
                    {
                        "name": "tile",
                        "container": {
                            "image": "busybox",
                            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                        },
                    },
                ],
            },
        }
    )


def submit(n: int) -> Any:
    user = get_user_model().objects.get(username="scientist")
    return services.run_submit(user=user, body=tiles(n))


def placed(run: Any) -> Counter[str]:
    return Counter(u.site for u in run.units.exclude(site=""))


def test_sixty_one_cpu_tiles_spread_over_three_sites_of_twenty(fleet_of_twenties) -> None:
    run = submit(60)
    assert placed(run) == {"site-a": 20, "site-b": 20, "site-c": 20}


def test_what_an_active_run_holds_is_taken_until_its_steps_run(fleet_of_twenties) -> None:
    first = submit(30)
    held = selectors.held_reservations()
    assert sum(r.cpu_millicores for r in held.values()) == 30 * CPU

    second = submit(30)
    assert sum(placed(second).values()) == 30
    # Together the two runs fill the three sites evenly: the second saw the first's tiles.
    together = placed(first) + placed(second)
    assert together == {"site-a": 20, "site-b": 20, "site-c": 20}

    # A step seen starting still holds its request: no summary the member posted since
    # counts its pods.
    for unit in first.units.exclude(site=""):
        state.unit_move(unit, UnitPhase.RUNNING)
    assert held_cpu() == 60 * CPU

    # A Cluster event for its labels carries the member's older summary: nothing changes.
    site_a = Site.objects.get(name="site-a")
    sync.cluster_note(cluster_of(site_a, labels={"tier": "gold"}))
    assert Site.objects.get(name="site-a").summary_at == site_a.summary_at
    assert held_cpu() == 60 * CPU

    # Site-a's summary changes (it now counts the first run's steps there): those hold
    # nothing any more (their pods are in the Cluster's allocated figures); elsewhere they do.
    at_a = first.units.filter(site="site-a").count()
    sync.cluster_note(cluster_of(site_a, allocated=at_a * CPU))
    assert Site.objects.get(name="site-a").cpu_allocated == at_a * CPU
    assert held_cpu() == 60 * CPU - at_a * CPU
    assert selectors.held_reservations()["site-a"].cpu_millicores == placed(second)["site-a"] * CPU


def test_a_started_step_holds_nothing_after_a_status_period(fleet_of_twenties, settings) -> None:
    """A summary unchanged for a whole status period after a step started already counted
    it (its pods existed when that summary was taken)."""
    run = submit(10)
    for unit in run.units.exclude(site=""):
        state.unit_move(unit, UnitPhase.RUNNING)
    assert held_cpu() == 10 * CPU
    settings.KARMADA_CLUSTER_STATUS_SECONDS = 0
    assert held_cpu() == 0


def held_cpu() -> int:
    return sum(r.cpu_millicores for r in selectors.held_reservations().values())


def test_a_gpu_step_whose_gpus_are_all_reserved_is_accepted_and_waits_for_one(db: Any) -> None:
    """Each active demo pipeline's pending inference holds one of site-c's 8 GPUs. The ninth
    submission was refused (400, "needs 1 GPU, 0 free of 8"), where Argo would have queued
    the pod; now it is accepted, its inference placed at site-c, saying that none is free."""
    call_command("load_demo", verbosity=0)
    site_c = Site.objects.get(name="site-c")
    assert site_c.gpu_allocatable == 8 and site_c.gpu_allocated == 0
    user = get_user_model().objects.get(username="scientist")
    body = EO_PIPELINE.read_text()
    runs = [services.run_submit(user=user, body=body) for _ in range(9)]
    held = selectors.held_reservations()
    assert sum(r.gpus for r in held.values()) == 9
    ninth = runs[-1].units.get(name="inference")
    assert ninth.site == "site-c"
    decision = ninth.decisions.get()
    assert "site-c has 0 free GPUs" in decision.reason
