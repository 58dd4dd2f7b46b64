"""The operators' admin for sites: scoping, cordon actions, the site form, the fields Karmada
owns, and the history of cordons."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from sites.models import Site
from tests.admin.helpers import SITES, changelist_names, run_action

pytestmark = pytest.mark.django_db


def test_an_operator_sees_only_the_sites_they_operate(
    operator_admin: Client, operated_site: Site, other_site: Site
):
    assert changelist_names(operator_admin.get(SITES)) == ["site-op"]


def test_an_operator_cannot_open_a_site_they_do_not_operate(
    operator_admin: Client, other_site: Site
):
    response = operator_admin.get(f"{SITES}{other_site.pk}/change/")
    # The admin answers an object outside the queryset with a redirect to the index.
    assert response.status_code == 302
    response = operator_admin.post(
        f"{SITES}{other_site.pk}/change/", {"cordoned": "on", "labels": "{}", "overrides": "{}"}
    )
    other_site.refresh_from_db()
    assert other_site.cordoned is False


def test_a_superuser_sees_every_site_with_capacity(
    superuser_admin: Client, operated_site: Site, other_site: Site
):
    response = superuser_admin.get(SITES)
    assert changelist_names(response) == ["site-op", "site-other"]
    content = response.content.decode()
    assert "48 / 64" in content  # CPU free / total cores of the factory's sites
    assert "100 / 110" not in content and "10 / 110" in content  # pods used / total


def test_an_operator_cordons_their_site_with_the_changelist_action(
    operator_admin: Client, operated_site: Site, caplog: pytest.LogCaptureFixture
):
    caplog.set_level("INFO", logger="sites.services")
    response = run_action(operator_admin, SITES, "cordon", operated_site)
    assert response.status_code == 200
    operated_site.refresh_from_db()
    assert operated_site.cordoned is True
    assert "Cordoned: site-op." in response.content.decode()
    assert "site site-op cordoned by operator" in caplog.text


def test_an_operator_uncordons_their_site_with_the_changelist_action(
    operator_admin: Client, operated_site: Site
):
    operated_site.cordoned = True
    operated_site.save()
    run_action(operator_admin, SITES, "uncordon", operated_site)
    operated_site.refresh_from_db()
    assert operated_site.cordoned is False


def test_the_cordon_action_cannot_reach_a_site_the_operator_does_not_operate(
    operator_admin: Client, operated_site: Site, other_site: Site
):
    run_action(operator_admin, SITES, "cordon", operated_site, other_site)
    operated_site.refresh_from_db()
    other_site.refresh_from_db()
    assert operated_site.cordoned is True
    assert other_site.cordoned is False


def test_cordoning_an_already_cordoned_site_changes_and_logs_nothing(
    superuser_admin: Client, other_site: Site, caplog: pytest.LogCaptureFixture
):
    other_site.cordoned = True
    other_site.save()
    caplog.set_level("INFO", logger="sites.services")
    response = run_action(superuser_admin, SITES, "cordon", other_site)
    assert "already cordoned" in response.content.decode()
    assert "cordoned by" not in caplog.text


def site_form(site: Site, **changes: object) -> dict[str, object]:
    data: dict[str, object] = {
        "labels": '{"tier": "gold"}',
        "overrides": '{"image_registry_mirror": "mirror.example.org"}',
    }
    if site.cordoned:
        data["cordoned"] = "on"
    data.update(changes)
    return data


def test_an_operator_edits_labels_overrides_and_cordon_in_the_form(
    operator_admin: Client, operated_site: Site, caplog: pytest.LogCaptureFixture
):
    caplog.set_level("INFO", logger="sites.services")
    url = f"{SITES}{operated_site.pk}/change/"
    response = operator_admin.post(
        url, site_form(operated_site, cordoned="on", region="mars", name="renamed")
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    operated_site.refresh_from_db()
    assert operated_site.labels == {"tier": "gold"}
    assert operated_site.overrides == {"image_registry_mirror": "mirror.example.org"}
    assert operated_site.cordoned is True
    assert "site site-op cordoned by operator" in caplog.text
    # Read-only for operators: posted values are ignored.
    assert (operated_site.name, operated_site.region) == ("site-op", "eu-west")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("labels", '{"bad key!": "x"}'),
        ("labels", '["tier"]'),
        ("overrides", '{"replicas": 3}'),
        ("overrides", '{"gpu_node_selector": {"gpu": 1}}'),
    ],
)
def test_the_site_form_rejects_bad_labels_and_overrides(
    operator_admin: Client, operated_site: Site, field: str, value: str
):
    url = f"{SITES}{operated_site.pk}/change/"
    response = operator_admin.post(url, site_form(operated_site, **{field: value}))
    assert response.status_code == 200
    assert field in response.context["adminform"].form.errors
    operated_site.refresh_from_db()
    assert operated_site.labels == {}
    assert operated_site.overrides == {}


def test_an_operator_cannot_change_who_operates_a_site(
    operator_admin: Client, operated_site: Site, outsider: User
):
    url = f"{SITES}{operated_site.pk}/change/"
    operator_admin.post(url, site_form(operated_site, operators=[str(outsider.pk)]))
    assert list(operated_site.operators.values_list("username", flat=True)) == ["operator"]


def test_an_operator_cannot_add_or_delete_sites(operator_admin: Client, operated_site: Site):
    assert operator_admin.get(f"{SITES}add/").status_code == 403
    assert operator_admin.get(f"{SITES}{operated_site.pk}/delete/").status_code == 403
    assert Site.objects.filter(pk=operated_site.pk).exists()


def test_fields_owned_by_karmada_are_read_only_with_the_reason_shown(
    superuser_admin: Client, other_site: Site
):
    url = f"{SITES}{other_site.pk}/change/"
    page = superuser_admin.get(url).content.decode()
    for field in ("name", "region", "zone", "provider"):
        assert f'name="{field}"' not in page, f"{field} is editable"
    assert "the next sync writes them again from Karmada, so they are read-only here" in page
    response = superuser_admin.post(url, {**site_form(other_site), "region": "mars"})
    assert response.status_code == 302
    other_site.refresh_from_db()
    assert other_site.region == "us-east"


def test_cordons_and_uncordons_appear_in_the_admin_history_with_who_and_when(
    superuser_admin: Client, operator_admin: Client, operator_api, operated_site: Site
):
    from django.contrib.admin.models import LogEntry

    run_action(superuser_admin, SITES, "cordon", operated_site)
    assert (
        operator_api.patch(
            f"/api/v1/sites/{operated_site.name}/", {"cordoned": False}, format="json"
        ).status_code
        == 200
    )
    operator_admin.post(
        f"{SITES}{operated_site.pk}/change/", site_form(operated_site, cordoned="on")
    )
    entries = LogEntry.objects.filter(object_id=str(operated_site.pk)).order_by("action_time", "id")
    cordons = [
        (e.user.username, e.get_change_message())
        for e in entries
        if "ordoned" in e.get_change_message()
    ]
    assert cordons == [
        ("root", "Cordoned: no new placements"),
        ("operator", "Uncordoned"),
        ("operator", "Cordoned: no new placements"),
    ]
    history = superuser_admin.get(f"{SITES}{operated_site.pk}/history/").content.decode()
    assert history.count("Cordoned: no new placements") == 2 and "Uncordoned" in history
    assert "Changed Cordoned" not in history  # the form's own entry does not repeat it
