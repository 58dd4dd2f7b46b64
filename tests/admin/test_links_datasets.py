"""The operators' admin for site links, datasets and their replicas."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from sites.models import Dataset, DatasetReplica, Site
from tests.admin.helpers import changelist_names
from tests.factories import (
    DatasetFactory,
    DatasetReplicaFactory,
    ProjectFactory,
    SiteLinkFactory,
)

pytestmark = pytest.mark.django_db


def test_an_operator_sees_only_links_touching_their_sites(
    operator_admin: Client, operated_site: Site, other_site: Site
):
    SiteLinkFactory(source=operated_site, target=other_site)
    SiteLinkFactory(source=other_site, target=operated_site)
    SiteLinkFactory(source__name="far-a", target__name="far-b")
    names = changelist_names(operator_admin.get("/admin/sites/sitelink/"))
    assert names == ["site-op → site-other", "site-other → site-op"]


def test_an_operator_cannot_add_a_link_between_sites_of_others(
    operator_admin: Client, other_site: Site
):
    third = SiteLinkFactory.build().target
    third.save()
    response = operator_admin.post(
        "/admin/sites/sitelink/add/",
        {
            "source": other_site.pk,
            "target": third.pk,
            "bandwidth_mbps": "100",
            "cost_per_gb": "0",
            "latency_ms": "1",
        },
    )
    assert response.status_code == 200
    assert "must start or end at a site you operate" in response.content.decode()


def test_an_operator_sees_the_datasets_the_api_shows_them(
    operator_admin: Client, operated_site: Site, other_site: Site
):
    hosted = DatasetFactory(name="hosted", project=ProjectFactory())
    DatasetReplicaFactory(dataset=hosted, site=operated_site)
    DatasetFactory(name="foreign", project=ProjectFactory())
    DatasetFactory(name="public")
    assert changelist_names(operator_admin.get("/admin/sites/dataset/")) == ["hosted", "public"]


def test_the_dataset_page_shows_replicas_inline(superuser_admin: Client, operated_site: Site):
    dataset = DatasetFactory(name="with-copies")
    DatasetReplicaFactory(dataset=dataset, site=operated_site, uri="s3://op/copies/")
    response = superuser_admin.get(f"/admin/sites/dataset/{dataset.pk}/change/")
    assert response.status_code == 200
    assert "s3://op/copies/" in response.content.decode()


def test_an_operator_adds_a_replica_only_at_their_site(
    operator_admin: Client, operated_site: Site, other_site: Site
):
    dataset = DatasetFactory(name="public", residency=[])
    url = f"/admin/sites/dataset/{dataset.pk}/change/"
    form = {
        "name": "renamed",
        "uri_prefix": "",
        "bytes": "1",
        "format": "zarr",
        "residency": "[]",
        "replicas-TOTAL_FORMS": "1",
        "replicas-INITIAL_FORMS": "0",
        "replicas-MIN_NUM_FORMS": "0",
        "replicas-MAX_NUM_FORMS": "1000",
        "replicas-0-site": str(other_site.pk),
        "replicas-0-uri": "s3://x/",
        "replicas-0-bytes": "1",
        "replicas-0-state": "Ready",
    }
    response = operator_admin.post(url, form)
    assert response.status_code == 200  # the form comes back with an error
    assert not DatasetReplica.objects.exists()
    form["replicas-0-site"] = str(operated_site.pk)
    response = operator_admin.post(url, form)
    assert response.status_code == 302
    assert [r.site.name for r in DatasetReplica.objects.all()] == ["site-op"]
    # Not a member of the dataset's project (it has none): its own fields stay read-only.
    dataset.refresh_from_db()
    assert dataset.name == "public"


def dataset_add_form(**changes: object) -> dict[str, object]:
    form: dict[str, object] = {
        "name": "new-data",
        "uri_prefix": "",
        "bytes": "1",
        "format": "zarr",
        "residency": "[]",
        "replicas-TOTAL_FORMS": "0",
        "replicas-INITIAL_FORMS": "0",
    }
    form.update(changes)
    return form


def test_an_operator_registers_datasets_only_in_their_own_projects(
    operator: User, operator_admin: Client, project
):
    url = "/admin/sites/dataset/add/"
    response = operator_admin.post(url, dataset_add_form())
    assert response.status_code == 200
    assert "Only fleet staff may register fleet-wide datasets" in response.content.decode()
    response = operator_admin.post(url, dataset_add_form(project=str(project.pk)))
    assert response.status_code == 200  # not a member: not among the choices
    assert not Dataset.objects.exists()
    project.members.add(operator)
    response = operator_admin.post(url, dataset_add_form(project=str(project.pk)))
    assert response.status_code == 302
    assert Dataset.objects.get().project == project


def test_an_operator_in_the_project_edits_the_dataset_fields(
    operator: User, operator_admin: Client, project
):
    project.members.add(operator)
    dataset = DatasetFactory(name="ours", project=project)
    response = operator_admin.post(
        f"/admin/sites/dataset/{dataset.pk}/change/",
        dataset_add_form(name="ours-renamed", project=str(project.pk)),
    )
    assert response.status_code == 302
    dataset.refresh_from_db()
    assert dataset.name == "ours-renamed"


def test_the_dataset_form_rejects_bad_residency(superuser_admin: Client):
    response = superuser_admin.post(
        "/admin/sites/dataset/add/",
        {
            "name": "x",
            "bytes": "0",
            "residency": '["eu west"]',
            "replicas-TOTAL_FORMS": "0",
            "replicas-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 200
    assert "residency" in response.context["adminform"].form.errors
    assert not Dataset.objects.exists()
