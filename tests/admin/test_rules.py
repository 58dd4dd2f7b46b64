"""The admin for placement rules: evaluation order, who may edit, the form's checks."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from placement.models import PlacementRule
from sites.permissions import RULE_EDITORS_GROUP
from tests.admin.helpers import RULES, changelist_names
from tests.factories import (
    PlacementRuleFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db


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
