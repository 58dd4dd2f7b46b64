"""The operators' admin: who may open it, and what the operator and rule editor groups may do."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User

from sites.permissions import OPERATORS_GROUP, RULE_EDITORS_GROUP
from tests.admin.helpers import SITES

pytestmark = pytest.mark.django_db


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
