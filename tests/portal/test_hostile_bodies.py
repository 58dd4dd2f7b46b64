"""Hostile bodies get a 4xx, never a 500, and chunked bodies are read."""

from __future__ import annotations

import http.client
import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from portal.api_tokens import api_token_create
from portal.middleware import DRAIN_FACTOR, BodyTooLarge, read_chunks

DEEP = 10_000
DEMO = (Path(__file__).resolve().parents[2] / "examples" / "eo-pipeline.yaml").read_text()


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


# --- item 12: chunked request bodies (no Content-Length) ------------------------------------

WEBHOOK_TOKEN = "chunked-test-token-7c1e"


def chunked_post(
    base: str, path: str, body: bytes, content_type: str, **headers: str
) -> tuple[int, bytes]:
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    pieces = [body[i : i + 1000] for i in range(0, len(body), 1000)] or [b""]
    conn.request(
        "POST",
        path,
        body=iter(pieces),
        headers={"Content-Type": content_type, **headers},
        encode_chunked=True,
    )
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, data


@pytest.fixture
def webhook_token(settings: Any) -> str:
    settings.PORTAL_WEBHOOK_TOKEN = WEBHOOK_TOKEN
    return WEBHOOK_TOKEN


def test_a_chunked_admission_review_is_read_by_djangos_server(
    live_server: Any, webhook_token: str
) -> None:
    body = json.dumps({"kind": "NotAReview"}).encode()
    status, data = chunked_post(
        live_server.url, f"/webhooks/placement/{webhook_token}/", body, "application/json"
    )
    assert status == 400
    assert b"kind is not AdmissionReview" in data, data  # before: "not JSON"


def test_a_chunked_workflow_is_previewed_by_djangos_server(
    live_server: Any, transactional_db: Any, django_user_model: Any
) -> None:
    call_command("load_demo", verbosity=0)
    key = api_token_create(user=django_user_model.objects.get(username="scientist"), replace=True)
    status, data = chunked_post(
        live_server.url,
        "/api/v1/runs/preview/?project=eo-demo",
        DEMO.encode(),
        "application/yaml",
        Authorization=f"Token {key}",
    )
    assert status == 200, data[:300]  # before: 400 empty document
    assert [u["name"] for u in json.loads(data)["units"]] == ["ingest", "preprocess", "inference"]


def test_a_chunked_body_keeps_the_size_limits(
    live_server: Any, transactional_db: Any, settings: Any, django_user_model: Any
) -> None:
    settings.PORTAL_MAX_CHUNKED_BODY_BYTES = 64 * 1024
    settings.PORTAL_MAX_BODY_BYTES = 16 * 1024
    user = django_user_model.objects.create_user("chunky", password="pw-chunky-123456")
    auth = {"Authorization": f"Token {api_token_create(user=user)}"}
    # Past the chunked bound: refused while reading, 413.
    status, _ = chunked_post(
        live_server.url, "/api/v1/runs/preview/", b"a: " + b"x" * 70_000, "application/yaml", **auth
    )
    assert status == 413
    # Within it but past the API's own limit: the API's 413, as for a body with a length.
    status, data = chunked_post(
        live_server.url, "/api/v1/runs/preview/", b"a: " + b"x" * 20_000, "application/yaml", **auth
    )
    assert status == 413, data[:300]


def _chunked(body: bytes, size: int = 1000) -> io.BufferedReader:
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    wire = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    return io.BufferedReader(io.BytesIO(wire))


def test_a_chunked_body_past_the_limit_is_read_to_its_end_so_the_client_gets_the_413() -> None:
    # Closing a socket with unread bytes resets the connection: a client still sending gets a
    # broken pipe instead of the answer (it did, now and then, in the test above).
    raw = _chunked(b"x" * 3000)
    with pytest.raises(BodyTooLarge):
        read_chunks(raw, 1000)
    assert raw.read() == b""  # drained, the terminating chunk included


def test_a_chunked_body_far_past_the_limit_is_not_drained_without_end() -> None:
    raw = _chunked(b"x" * 100 * 1000)
    with pytest.raises(BodyTooLarge):
        read_chunks(raw, 1000)
    left = raw.read()
    assert left  # refused after DRAIN_FACTOR times the limit, the rest left unread
    assert len(left) > 100 * 1000 - (DRAIN_FACTOR + 2) * 1000
