"""View tests of the fleet and site pages, and cordoning a site."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from portal.models import WorkflowRun
from sites.models import Site
from tests.factories import (
    DatasetFactory,
    DatasetReplicaFactory,
    SiteLinkFactory,
)
from tests.portal.views.conftest import HX

pytestmark = pytest.mark.django_db

# --------------------------------------------------------------------------------------------
# Fleet and sites


def test_the_fleet_shows_sites_capacity_running_units_and_replicas(
    sci: Client, run: WorkflowRun, demo_sites
) -> None:
    dataset = DatasetFactory(name="sentinel2-l1c")
    DatasetReplicaFactory(dataset=dataset, site=demo_sites["site-a"])
    body = sci.get(reverse("ui-fleet")).content.decode()
    for name in demo_sites:
        assert reverse("ui-site-detail", args=[name]) in body
    assert 'aria-valuenow="88"' in body  # site-a: 3.5 of 4 cores allocated
    assert "2 used / 8 GPUs" in body
    assert f"{run.name}/preprocess" in body  # running at site-b
    assert "sentinel2-l1c" in body and "● Ready" in body


def test_the_fleet_page_says_which_capacity_number_is_used_and_which_is_total(
    sci: Client, demo_sites
) -> None:
    body = sci.get(reverse("ui-fleet")).content.decode()
    assert "3.5 used / 4 cores" in body and 'CPU <span class="muted small">used / total' in body
    site = sci.get(reverse("ui-site-detail", args=["site-a"])).content.decode()
    assert "3.5 used / 4 cores" in site


def test_the_fleet_partial_is_the_sites_table(sci: Client, demo_sites) -> None:
    body = sci.get(reverse("ui-fleet"), **HX).content.decode()
    assert body.lstrip().startswith('<div id="fleet-sites"')
    assert "<html" not in body


def test_the_site_page_shows_details_links_and_running_units(
    sci: Client, run: WorkflowRun, demo_sites
) -> None:
    SiteLinkFactory(source=demo_sites["site-b"], target=demo_sites["site-c"], bandwidth_mbps=5000)
    body = sci.get(reverse("ui-site-detail", args=["site-b"])).content.decode()
    assert "5000 Mbit/s" in body
    assert run.name in body
    assert "Cordon</button>" not in body  # a scientist operates nothing


def test_an_unknown_site_is_404(sci: Client) -> None:
    assert sci.get(reverse("ui-site-detail", args=["nowhere"])).status_code == 404


def test_a_scientist_cannot_cordon(sci: Client, demo_sites) -> None:
    response = sci.post(reverse("ui-site-cordon", args=["site-a"]), {"cordoned": "1"})
    assert response.status_code == 403
    assert not Site.objects.get(name="site-a").cordoned


def test_an_operator_cordons_only_their_own_site(
    operator: User, operated_site: Site, other_site: Site, client_for
) -> None:
    c = client_for(operator)
    page = c.get(reverse("ui-site-detail", args=[operated_site.name])).content.decode()
    assert "Cordon</button>" in page
    response = c.post(reverse("ui-site-cordon", args=[operated_site.name]), {"cordoned": "1"})
    assert response.status_code == 302
    operated_site.refresh_from_db()
    assert operated_site.cordoned
    response = c.post(reverse("ui-site-cordon", args=[other_site.name]), {"cordoned": "1"})
    assert response.status_code == 403
    other_site.refresh_from_db()
    assert not other_site.cordoned
    page = c.get(reverse("ui-site-detail", args=[operated_site.name])).content.decode()
    assert "Uncordon</button>" in page


def test_staff_uncordon_any_site(staff: User, demo_sites, client_for) -> None:
    Site.objects.filter(name="site-c").update(cordoned=True)
    c = client_for(staff)
    response = c.post(reverse("ui-site-cordon", args=["site-c"]), {"cordoned": "0"}, follow=True)
    assert "site-c uncordoned." in response.content.decode()
    assert not Site.objects.get(name="site-c").cordoned


def test_cordon_refuses_a_bad_value(staff: User, demo_sites, client_for) -> None:
    c = client_for(staff)
    response = c.post(reverse("ui-site-cordon", args=["site-c"]), {"cordoned": "yes"}, follow=True)
    assert "Say cordoned=1 or cordoned=0." in response.content.decode()
    assert not Site.objects.get(name="site-c").cordoned
