"""GET|POST /api/v1/rules/, GET|PATCH|DELETE /api/v1/rules/{id}/."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient
from rest_framework.validators import UniqueValidator

from placement.models import PlacementRule
from sites.models import Site
from tests.factories import PlacementRuleFactory

pytestmark = pytest.mark.django_db

LIST = "/api/v1/rules/"


def detail(rule: PlacementRule) -> str:
    return f"/api/v1/rules/{rule.pk}/"


def paths(response) -> list[str]:
    return [error["path"] for error in response.json()["errors"]]


def names(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [r["name"] for r in response.json()["results"]]


def new_rule(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "ingest-at-data",
        "order": 10,
        "selector": {"task": "ingest*", "labels": {"stage": "ingest"}},
        "timing": "submit",
        "effect": "pin",
        "parameters": {"sites": ["site-op"]},
        "description": "Ingest where the data is.",
    }
    body.update(overrides)
    return body


@pytest.fixture
def rule(db) -> PlacementRule:
    return PlacementRuleFactory(name="gpu-inference", order=50)


@pytest.fixture
def rules(db) -> None:
    PlacementRuleFactory(name="b-late", order=200, enabled=True, timing="submit")
    PlacementRuleFactory(name="z-first", order=1, enabled=False, timing="runtime")
    PlacementRuleFactory(
        name="a-first",
        order=1,
        timing="runtime",
        effect="exclude",
        parameters={"sites": ["site-x"]},
    )


# --- authentication and permissions ----------------------------------------------------------


def test_it_answers_401_without_credentials(api_client: APIClient, rule: PlacementRule):
    for response in (
        api_client.get(LIST),
        api_client.get(detail(rule)),
        api_client.post(LIST, new_rule(), format="json"),
        api_client.patch(detail(rule), {"enabled": False}, format="json"),
        api_client.delete(detail(rule)),
    ):
        assert response.status_code == 401
        assert "detail" in response.json()
    rule.refresh_from_db()
    assert rule.enabled is True
    assert PlacementRule.objects.count() == 1


@pytest.mark.parametrize("persona", ["scientist_api", "outsider_api", "operator_api"])
def test_every_authenticated_user_reads_rules(
    request: pytest.FixtureRequest, persona: str, rule: PlacementRule
):
    client: APIClient = request.getfixturevalue(persona)
    assert names(client.get(LIST)) == ["gpu-inference"]
    body = client.get(detail(rule)).json()
    assert body["name"] == "gpu-inference"
    assert body["effect"] == rule.effect


@pytest.mark.parametrize("persona", ["scientist_api", "outsider_api", "operator_api"])
def test_only_staff_and_rule_editors_write_rules(
    request: pytest.FixtureRequest, persona: str, rule: PlacementRule, operated_site: Site
):
    client: APIClient = request.getfixturevalue(persona)
    assert client.post(LIST, new_rule(), format="json").status_code == 403
    assert client.patch(detail(rule), {"enabled": False}, format="json").status_code == 403
    assert client.delete(detail(rule)).status_code == 403
    rule.refresh_from_db()
    assert rule.enabled is True
    assert list(PlacementRule.objects.values_list("name", flat=True)) == ["gpu-inference"]


def test_a_forbidden_write_is_403_even_with_a_bad_body(outsider_api: APIClient):
    assert outsider_api.post(LIST, {"name": 3}, format="json").status_code == 403


def test_it_answers_404_for_an_unknown_rule(staff_api: APIClient):
    assert staff_api.get("/api/v1/rules/999999/").status_code == 404
    assert staff_api.get("/api/v1/rules/not-a-number/").status_code == 404


def test_staff_create_change_and_delete_rules(
    staff_api: APIClient, operated_site: Site, other_site: Site
):
    response = staff_api.post(LIST, new_rule(), format="json")
    assert response.status_code == 201, response.content
    created = PlacementRule.objects.get(name="ingest-at-data")
    assert created.parameters == {"sites": ["site-op"]}
    assert created.selector == {"task": "ingest*", "labels": {"stage": "ingest"}}
    response = staff_api.patch(
        detail(created), {"parameters": {"sites": ["site-other"]}, "order": 5}, format="json"
    )
    assert response.status_code == 200, response.content
    created.refresh_from_db()
    assert (created.order, created.parameters) == (5, {"sites": ["site-other"]})
    assert staff_api.delete(detail(created)).status_code == 204
    assert not PlacementRule.objects.exists()


def test_a_rule_editor_writes_rules(
    api_client_for, rule_editor, rule: PlacementRule, operated_site: Site
):
    client = api_client_for(rule_editor)
    assert client.post(LIST, new_rule(), format="json").status_code == 201
    assert client.patch(detail(rule), {"enabled": False}, format="json").status_code == 200
    assert client.delete(detail(rule)).status_code == 204
    assert list(PlacementRule.objects.values_list("name", flat=True)) == ["ingest-at-data"]


# --- validation -----------------------------------------------------------------------------


def test_it_rejects_a_pin_to_an_unknown_site(staff_api: APIClient, operated_site: Site):
    body = new_rule(parameters={"sites": ["site-op", "site-mars"]})
    response = staff_api.post(LIST, body, format="json")
    assert response.status_code == 400
    assert paths(response) == ["parameters.sites[1]"]
    assert "site-mars" in response.json()["errors"][0]["message"]
    assert not PlacementRule.objects.exists()


def test_it_rejects_an_exclude_of_an_unknown_site(staff_api: APIClient):
    body = new_rule(effect="exclude", parameters={"sites": ["ghost"]})
    response = staff_api.post(LIST, body, format="json")
    assert response.status_code == 400
    assert paths(response) == ["parameters.sites[0]"]


def test_it_rejects_a_weight_too_large_for_a_float(staff_api: APIClient, operated_site: Site):
    body = '{"name": "w", "effect": "prefer_free_capacity", "weight": 1e400}'
    response = staff_api.generic("POST", LIST, body, content_type="application/json")
    assert response.status_code == 400
    assert paths(response) == ["weight"]
    assert not PlacementRule.objects.exists()


def test_a_patch_is_validated_against_the_stored_effect(staff_api: APIClient, operated_site: Site):
    pin = PlacementRuleFactory(name="pin", effect="pin", parameters={"sites": ["site-op"]})
    response = staff_api.patch(detail(pin), {"parameters": {}}, format="json")
    assert response.status_code == 400
    assert paths(response) == ["parameters"]
    response = staff_api.patch(detail(pin), {"effect": "require_labels"}, format="json")
    assert response.status_code == 400
    assert paths(response) == ["parameters"]
    pin.refresh_from_db()
    assert (pin.effect, pin.parameters) == ("pin", {"sites": ["site-op"]})


@pytest.mark.parametrize(
    ("overrides", "path"),
    [
        pytest.param({"name": ""}, "name", id="empty-name"),
        pytest.param({"name": "n" * 101}, "name", id="long-name"),
        pytest.param({"name": "existing"}, "name", id="duplicate-name"),
        pytest.param({"effect": "teleport"}, "effect", id="unknown-effect"),
        pytest.param({"effect": None}, "effect", id="null-effect"),
        pytest.param({"timing": "later"}, "timing", id="unknown-timing"),
        pytest.param({"order": 2**31}, "order", id="order-over-int32"),
        pytest.param({"order": -(2**31) - 1}, "order", id="order-under-int32"),
        pytest.param({"order": 10**100}, "order", id="astronomical-order"),
        pytest.param({"order": "first"}, "order", id="text-order"),
        pytest.param({"weight": "heavy"}, "weight", id="text-weight"),
        pytest.param({"enabled": "sometimes"}, "enabled", id="text-enabled"),
        pytest.param({"selector": []}, "selector", id="selector-list"),
        pytest.param({"selector": {"colour": "red"}}, "selector", id="selector-unknown-key"),
        pytest.param({"selector": {"task": 3}}, "selector", id="selector-non-string"),
        pytest.param({"selector": {"labels": "x"}}, "selector", id="selector-labels-string"),
        pytest.param({"selector": {"task": "a\x00"}}, "selector.task", id="selector-nul"),
        pytest.param({"parameters": "site-op"}, "parameters", id="parameters-string"),
        pytest.param({"parameters": {}}, "parameters", id="pin-without-sites"),
        pytest.param({"parameters": {"sites": "site-op"}}, "parameters", id="sites-string"),
        pytest.param({"parameters": {"sites": [1]}}, "parameters", id="sites-number"),
        pytest.param(
            {"parameters": {"sites": ["site-op"], "note": "\x00"}},
            "parameters.note",
            id="parameters-nul",
        ),
        pytest.param(
            {
                "parameters": {
                    "sites": ["site-op"],
                    "x": [[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]],
                }
            },
            "parameters.x" + "[0]" * 20,
            id="parameters-too-deep",
        ),
        pytest.param({"id": 3}, "id", id="read-only-id"),
        pytest.param({"created_at": "2020-01-01"}, "created_at", id="read-only-created"),
        pytest.param({"priority": 1}, "priority", id="unknown-field"),
    ],
)
def test_it_rejects_bad_input_with_the_field_path(
    staff_api: APIClient, operated_site: Site, overrides: dict, path: str
):
    PlacementRuleFactory(name="existing")
    response = staff_api.post(LIST, new_rule(**overrides), format="json")
    assert response.status_code == 400, response.content
    assert path in paths(response), response.json()
    assert list(PlacementRule.objects.values_list("name", flat=True)) == ["existing"]


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        pytest.param("{]", "application/json", id="broken"),
        pytest.param("[" * 100_000, "application/json", id="deep"),
        pytest.param('{"weight": NaN}', "application/json", id="nan"),
        pytest.param('{"weight": 1e400}', "application/json", id="overflowing-float"),
        pytest.param('{"weight": -Infinity}', "application/json", id="infinity"),
        pytest.param("[]", "application/json", id="list"),
        pytest.param("effect=pin", "application/x-www-form-urlencoded", id="form"),
        pytest.param("effect: pin", "text/plain", id="text"),
        pytest.param(
            '{"name": "x", "effect": "prefer_free_capacity", "selector": {"task": "\\ud800"}}',
            "application/json",
            id="surrogate-in-selector",
        ),
        pytest.param(
            '{"name": "x", "effect": "prefer_free_capacity", "parameters": {"\\ud800": 1}}',
            "application/json",
            id="surrogate-parameter-key",
        ),
        pytest.param(
            '{"name": "x", "effect": "pin", "parameters": {"sites": ["\\ud800"]}}',
            "application/json",
            id="surrogate-site",
        ),
    ],
)
def test_it_never_answers_500_to_a_hostile_body(staff_api: APIClient, body: str, content_type: str):
    response = staff_api.generic("POST", LIST, body, content_type=content_type)
    assert response.status_code in {400, 415}, response.content
    assert not PlacementRule.objects.exists()


# --- ordering, filters and pagination -------------------------------------------------------


def test_rules_are_listed_by_order_then_name(outsider_api: APIClient, rules: None):
    assert names(outsider_api.get(LIST)) == ["a-first", "z-first", "b-late"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("enabled=true", ["a-first", "b-late"]),
        ("enabled=false", ["z-first"]),
        ("timing=runtime", ["a-first", "z-first"]),
        ("timing=submit", ["b-late"]),
        ("effect=exclude", ["a-first"]),
        ("effect=pin", []),
        ("timing=runtime&enabled=true", ["a-first"]),
    ],
)
def test_it_filters_rules(outsider_api: APIClient, rules: None, query: str, expected: list[str]):
    assert names(outsider_api.get(f"{LIST}?{query}")) == expected


@pytest.mark.parametrize(
    ("query", "path"),
    [("timing=later", "timing"), ("effect=teleport", "effect"), ("enabled=perhaps", "enabled")],
)
def test_it_rejects_a_bad_filter_value(outsider_api: APIClient, rules: None, query: str, path: str):
    response = outsider_api.get(f"{LIST}?{query}")
    assert response.status_code == 400
    assert paths(response) == [path]


def test_it_paginates_rules(outsider_api: APIClient, rules: None):
    first = outsider_api.get(f"{LIST}?limit=2").json()
    assert first["count"] == 3
    assert [r["name"] for r in first["results"]] == ["a-first", "z-first"]
    second = outsider_api.get(f"{LIST}?limit=2&offset=2").json()
    assert [r["name"] for r in second["results"]] == ["b-late"]
    assert second["next"] is None


def test_a_name_taken_by_a_concurrent_request_is_400_not_500(
    staff_api: APIClient, rule: PlacementRule, monkeypatch: pytest.MonkeyPatch
):
    # Both requests passed the serializer's unique check before either stored its rule.
    monkeypatch.setattr(UniqueValidator, "__call__", lambda self, value, field: None)
    body = new_rule(name="gpu-inference", effect="prefer_free_capacity", parameters={})
    response = staff_api.post(LIST, body, format="json")
    assert response.status_code == 400, response.content
    assert paths(response) == ["name"]
    assert PlacementRule.objects.count() == 1
