"""The OpenAPI document (``/api/schema/``) is the truth: every operation of the REST API, called
by schemathesis as a scientist, an operator and an outsider against the live test server,
answers a status, a content type and a body the document declares."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from sites.models import Project, Site
from sites.permissions import OPERATORS_GROUP
from tests.factories import api_key

CHECKS = [
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
    content_type_conformance,
]
# Small enough that the whole check (three personas, every operation) stays short on two cores.
MAX_EXAMPLES = 10
# The coverage phase (every boundary and wrong type of every field, ~1800 cases: a minute on two
# cores) runs with PORTAL_SCHEMA_COVERAGE=1; CI runs the examples and the fuzzing (~15 s).
PHASES = ["examples", "fuzzing"] + (
    ["coverage"] if os.environ.get("PORTAL_SCHEMA_COVERAGE") == "1" else []
)


@pytest.fixture(scope="module")
def api_schema(live_server: Any) -> Any:
    raw = requests.get(f"{live_server.url}/api/schema/?format=json", timeout=30).json()
    schema = schemathesis.openapi.from_dict(raw)
    schema.config.update(base_url=live_server.url)
    # The session cookie the document also declares is the browser's: the personas use tokens.
    schema.config.generation.update(with_security_parameters=False, max_examples=MAX_EXAMPLES)
    schema.config.phases.update(phases=PHASES)
    return schema


schema = schemathesis.pytest.from_fixture("api_schema")


PERSONAS = ("scientist", "operator", "outsider")


@pytest.fixture(scope="module")
def persona_headers(
    live_server: Any, django_db_blocker: Any
) -> Iterator[dict[str, dict[str, str]]]:
    """The demo data (sites, datasets, rules, templates) and a token for each persona, committed
    for the live server; the tables are emptied again after the module."""
    with django_db_blocker.unblock():
        call_command("load_demo", verbosity=0)
        headers = {}
        for persona in PERSONAS:
            user = User.objects.create_user(username=f"schema-{persona}")
            if persona == "scientist":
                Project.objects.get(name="eo-demo").members.add(user)
            elif persona == "operator":
                user.is_staff = True
                user.save(update_fields=["is_staff"])
                user.groups.add(Group.objects.get_or_create(name=OPERATORS_GROUP)[0])
                Site.objects.get(name="site-a").operators.add(user)
            headers[persona] = {"Authorization": f"Token {api_key(user)}"}
    try:
        yield headers
    finally:
        with django_db_blocker.unblock():
            call_command("flush", interactive=False, verbosity=0)


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_every_answer_matches_the_schema(
    case: Any, persona_headers: dict[str, dict[str, str]]
) -> None:
    for persona in PERSONAS:
        case.call_and_validate(headers=persona_headers[persona], checks=CHECKS)


def test_the_drift_once_found_is_gone(api_schema: Any) -> None:
    """Decisions and events are bare arrays, a run's project may be null, and no component is
    named after a serializer's class twice over."""
    raw = api_schema.raw_schema
    for path in ("/api/v1/runs/{id}/decisions/", "/api/v1/runs/{id}/events/"):
        answer = raw["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]
        assert answer["schema"]["type"] == "array", path
    components = raw["components"]["schemas"]
    for name in ("WorkflowRun", "WorkflowRunSummary"):
        assert components[name]["properties"]["project"].get("nullable") is True, name
    assert "PaginatedWorkflowRunListList" not in components
    assert "PaginatedWorkflowRunSummaryList" in components
    errors = raw["paths"]["/api/v1/runs/"]["post"]["responses"]["400"]
    assert errors["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorList")
