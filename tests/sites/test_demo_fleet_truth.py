"""The demo inventory and the sandbox's demo fleet file describe one fleet: its sites, their
artifact repositories (endpoint, bucket, credential Secret) and who reads which repository
(where they disagree, a run the preview accepts fails at site-c)."""

from __future__ import annotations

import io
from typing import Any

import pytest
import yaml
from django.core.management import call_command

from placement.demo import FLEET_FILE
from sites.models import Site, SiteLink

pytestmark = pytest.mark.django_db


def fleet() -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in yaml.safe_load(FLEET_FILE.read_text())["sites"]}


@pytest.fixture
def loaded() -> None:
    call_command("load_demo", stdout=io.StringIO())


def test_every_site_of_the_fleet_file_is_in_the_inventory_with_its_repository(loaded) -> None:
    sites = fleet()
    assert set(Site.objects.values_list("name", flat=True)) == set(sites)
    for site in Site.objects.all():
        spec = sites[site.name]
        store = site.overrides["artifact_store"]
        assert store["endpoint"] == spec["artifacts"]["endpoint"]
        assert store["bucket"] == spec["bucket"]
        assert store["credentials_secret"] == spec["artifacts"]["credentialsSecret"]
        assert store["region"] == spec["artifacts"].get("region", spec["region"])
        assert site.region == spec["region"]


def test_every_link_says_what_the_fleet_file_says_about_reading_its_source(loaded) -> None:
    sites = fleet()
    links = SiteLink.objects.select_related("source", "target")
    assert links.count() == len(sites) * (len(sites) - 1)  # every ordered pair is declared
    for link in links:
        readers = sites[link.source.name]["artifacts"].get("readableFrom") or []
        assert link.artifacts_reachable is (link.target.name in readers), (
            f"{link.source.name} -> {link.target.name}"
        )


def test_site_c_cannot_read_site_a_in_the_demo(loaded) -> None:
    # The case the demo shows: the GPU site cannot read the data site's repository.
    link = SiteLink.objects.get(source__name="site-a", target__name="site-c")
    assert link.artifacts_reachable is False
    assert SiteLink.objects.get(source__name="site-a", target__name="site-b").artifacts_reachable
    assert SiteLink.objects.get(source__name="site-b", target__name="site-c").artifacts_reachable
