"""The operators' admin: scoping to operated sites, cordon actions, rules, read-only runs."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from placement.models import PlacementRule
from portal.models import WorkflowRun
from sites.models import Dataset, DatasetReplica, Site
from sites.permissions import OPERATORS_GROUP, RULE_EDITORS_GROUP
from tests.factories import (
    DatasetFactory,
    DatasetReplicaFactory,
    PlacementDecisionFactory,
    PlacementRuleFactory,
    ProjectFactory,
    SiteLinkFactory,
    UnitRunFactory,
    UserFactory,
    WorkflowRunFactory,
)

pytestmark = pytest.mark.django_db

SITES = "/admin/sites/site/"
RULES = "/admin/placement/placementrule/"


@pytest.fixture
def operator_admin(client_for, operator: User) -> Client:
    return client_for(operator)


@pytest.fixture
def superuser_admin(client_for, superuser: User) -> Client:
    return client_for(superuser)


def changelist_names(response) -> list[str]:
    assert response.status_code == 200
    return [str(obj) for obj in response.context["cl"].result_list]


def run_action(client: Client, url: str, action: str, *objects) -> object:
    return client.post(
        url, {"action": action, "_selected_action": [str(o.pk) for o in objects]}, follow=True
    )


# --- the operators group ---------------------------------------------------------------------


def test_the_operators_group_has_the_documented_permissions():
    perms = set(
        Group.objects.get(name=OPERATORS_GROUP).permissions.values_list(
            "content_type__app_label", "codename"
        )
    )
    assert {("sites", "view_site"), ("sites", "change_site")} <= perms
    assert ("sites", "add_site") not in perms
    assert ("sites", "delete_site") not in perms
    for model in ("sitelink", "dataset", "datasetreplica"):
        assert {(("sites", f"{a}_{model}")) for a in ("add", "change", "delete", "view")} <= perms
    assert ("placement", "view_placementrule") in perms
    assert ("placement", "change_placementrule") not in perms
    for model in ("workflowrun", "unitrun", "placementdecision", "runevent"):
        assert ("portal", f"view_{model}") in perms
        assert ("portal", f"change_{model}") not in perms


def test_the_rule_editors_group_may_edit_rules():
    perms = set(
        Group.objects.get(name=RULE_EDITORS_GROUP).permissions.values_list("codename", flat=True)
    )
    assert {"add_placementrule", "change_placementrule", "delete_placementrule"} <= perms


def test_users_who_are_not_staff_cannot_open_the_admin(client_for, scientist: User):
    response = client_for(scientist).get(SITES)
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


# --- sites ---------------------------------------------------------------------------------


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


# --- links and datasets ----------------------------------------------------------------------


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


# --- rules -----------------------------------------------------------------------------------


def test_rules_are_listed_in_evaluation_order(superuser_admin: Client):
    PlacementRuleFactory(name="late", order=300)
    PlacementRuleFactory(name="b-early", order=1)
    PlacementRuleFactory(name="a-early", order=1)
    assert changelist_names(superuser_admin.get(RULES)) == ["a-early", "b-early", "late"]


def test_an_operator_views_rules_but_cannot_edit_them(operator_admin: Client):
    rule = PlacementRuleFactory(name="r", order=5)
    assert changelist_names(operator_admin.get(RULES)) == ["r"]
    response = operator_admin.post(
        f"{RULES}{rule.pk}/change/",
        {"name": "r", "order": "1", "timing": "submit", "effect": "prefer_free_capacity"},
    )
    assert response.status_code == 403
    assert operator_admin.get(f"{RULES}add/").status_code == 403
    rule.refresh_from_db()
    assert rule.order == 5


def test_a_rule_editor_reorders_and_disables_rules_from_the_list(client_for):
    editor = UserFactory(
        username="editor", is_staff=True, groups=[Group.objects.get(name=RULE_EDITORS_GROUP)]
    )
    first = PlacementRuleFactory(name="first", order=1)
    second = PlacementRuleFactory(name="second", order=2)
    response = client_for(editor).post(
        RULES,
        {
            "form-TOTAL_FORMS": "2",
            "form-INITIAL_FORMS": "2",
            "form-0-id": str(first.pk),
            "form-0-order": "10",
            "form-0-enabled": "on",
            "form-1-id": str(second.pk),
            "form-1-order": "2",
            "_save": "Save",
        },
    )
    assert response.status_code == 302
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.order, first.enabled) == (10, True)
    assert (second.order, second.enabled) == (2, False)


def test_the_rule_form_rejects_a_pin_to_an_unknown_site(superuser_admin: Client):
    response = superuser_admin.post(
        f"{RULES}add/",
        {
            "name": "pin-mars",
            "order": "1",
            "enabled": "on",
            "selector": "{}",
            "timing": "submit",
            "effect": "pin",
            "parameters": '{"sites": ["mars"]}',
            "weight": "1",
        },
    )
    assert response.status_code == 200
    assert "Unknown sites: mars" in response.content.decode()
    assert not PlacementRule.objects.exists()


def test_the_rule_form_applies_the_model_checks(superuser_admin: Client):
    response = superuser_admin.post(
        f"{RULES}add/",
        {
            "name": "bad",
            "order": "1",
            "selector": '{"colour": "red"}',
            "timing": "submit",
            "effect": "prefer_free_capacity",
            "parameters": "{}",
            "weight": "1",
        },
    )
    assert response.status_code == 200
    assert "selector" in response.context["adminform"].form.errors
    assert not PlacementRule.objects.exists()


# --- runs ------------------------------------------------------------------------------------


@pytest.fixture
def run(scientist: User, project) -> WorkflowRun:
    run = WorkflowRunFactory(name="eo-run-1", project=project, owner=scientist, status="Pending")
    PlacementDecisionFactory(
        unit=UnitRunFactory(run=run, name="ingest", planned_site="site-op"), reason="data locality"
    )
    return run


def test_the_run_page_shows_units_and_decisions_read_only(superuser_admin: Client, run):
    response = superuser_admin.get(f"/admin/portal/workflowrun/{run.pk}/change/")
    assert response.status_code == 200
    content = response.content.decode()
    assert "ingest" in content
    assert "data locality" in content
    assert 'name="_save"' not in content


@pytest.mark.parametrize("model", ["workflowrun", "unitrun", "placementdecision", "runevent"])
def test_runs_cannot_be_added_from_the_admin(superuser_admin: Client, model: str):
    assert superuser_admin.get(f"/admin/portal/{model}/add/").status_code == 403


def test_runs_cannot_be_changed_or_deleted_from_the_admin(superuser_admin: Client, run):
    url = f"/admin/portal/workflowrun/{run.pk}/"
    response = superuser_admin.post(f"{url}change/", {"name": "renamed", "status": "Stopped"})
    assert response.status_code == 403
    assert superuser_admin.post(f"{url}delete/", {"post": "yes"}).status_code == 403
    run.refresh_from_db()
    assert (run.name, run.status) == ("eo-run-1", "Pending")


def test_an_operator_views_runs(operator_admin: Client, run):
    assert changelist_names(operator_admin.get("/admin/portal/workflowrun/")) == ["eo-run-1"]


# --- what Karmada owns, and the history of cordons ---------------------------------------------


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
