"""Issue 21, items 9 and 12: hostile bodies get a 4xx, never a 500, and chunked bodies are read."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

DEEP = 10_000


@pytest.fixture
def demo(db: Any) -> None:
    call_command("load_demo", verbosity=0)


@pytest.fixture
def sci(demo: None, django_user_model: Any) -> APIClient:
    client = APIClient(raise_request_exception=False)
    client.force_authenticate(django_user_model.objects.get(username="scientist"))
    return client


@pytest.fixture
def browser(demo: None, django_user_model: Any) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(django_user_model.objects.get(username="scientist"))
    return client


def deep_json(levels: int = DEEP) -> str:
    return '{"a": ' * levels + "1" + "}" * levels


def deep_list(levels: int = DEEP) -> str:
    return "[" * levels + "]" * levels


def deep_yaml(levels: int = DEEP) -> str:
    return "a: " + "{a: " * levels + "1" + "}" * levels + "\n"


def messages(response: Any) -> str:
    return " ".join(e["message"] for e in response.json()["errors"])


@pytest.mark.parametrize("endpoint", ["/api/v1/runs/preview/", "/api/v1/runs/"])
@pytest.mark.parametrize("body", [deep_json(), deep_list()], ids=["object", "list"])
def test_deeply_nested_json_to_the_api_is_the_yaml_paths_400(
    sci: APIClient, endpoint: str, body: str
) -> None:
    response = sci.post(endpoint, data=body, content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    yaml_path = sci.post(endpoint, data=deep_yaml(), content_type="application/yaml")
    assert yaml_path.status_code == 400
    assert "nest" in messages(response).lower()
    assert messages(response) == messages(yaml_path)


@pytest.mark.parametrize(
    "text", [deep_json(), deep_list(), deep_yaml()], ids=["json", "json-list", "yaml"]
)
def test_deeply_nested_documents_to_the_browser_forms_get_the_apis_message(
    browser: Client, sci: APIClient, text: str
) -> None:
    api = sci.post("/api/v1/runs/preview/", data=deep_yaml(), content_type="application/yaml")
    assert api.status_code == 400
    message = messages(api)
    # The preview partial answers 200 with its problems (HTMX swaps it in), submit 400, as
    # for any document the parser refuses; the parameter form shows no parameters.
    preview = browser.post("/submit/preview/", {"manifest": text, "project": ""})
    assert preview.status_code == 200
    assert message in preview.content.decode()
    submit = browser.post("/submit/", {"manifest": text, "project": ""})
    assert submit.status_code == 400
    assert message in submit.content.decode()
    params = browser.post("/submit/parameters/", {"manifest": text, "project": ""})
    assert params.status_code == 200
