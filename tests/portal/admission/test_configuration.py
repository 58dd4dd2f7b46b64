"""Pieces: JSON pointers, upstream sizes, the webhook configuration and its registration."""

from __future__ import annotations

from typing import Any

import pytest

from placement import context
from portal.admission import decide
from portal.controller.sync import webhook_configuration, webhook_register
from tests.portal.admission.helpers import (
    TOKEN,
    D,
)


def test_json_pointer_escapes_tilde_and_slash():
    assert decide.json_pointer("metadata", "labels", "a~b/c") == ("/metadata/labels/a~0b~1c")


@pytest.mark.parametrize(
    ("outputs", "expected"),
    [
        ({}, None),
        (None, None),
        ({"parameters": [{"name": "n", "value": "1"}]}, 0),
        ({"artifacts": [{"name": "a", "size": 5}, {"name": "b", "size": 7}]}, 12),
        ({"artifacts": [{"name": "a", "size": 5}, {"name": "b"}]}, None),
        ({"artifacts": [{"name": "a", "size": True}]}, None),
        ({"artifacts": "nope"}, None),
    ],
)
def test_upstream_bytes_sums_artifact_sizes_only_when_all_are_known(outputs, expected):
    assert context.upstream_bytes(outputs) == expected


def test_the_configuration_carries_the_token_in_its_url_and_the_ca_bundle(settings):
    settings.PORTAL_WEBHOOK_URL = "https://portal.example.org/webhooks/placement/"
    settings.PORTAL_WEBHOOK_CA_BUNDLE = "LS0tLS1CRUdJTg=="
    body = webhook_configuration()

    assert body["kind"] == "MutatingWebhookConfiguration"
    hooks = body["webhooks"]
    assert len(hooks) == 2
    for hook in hooks:
        assert hook["clientConfig"] == {
            "url": f"https://portal.example.org/webhooks/placement/{TOKEN}/",
            "caBundle": "LS0tLS1CRUdJTg==",
        }
        assert hook["failurePolicy"] == "Ignore"
        assert hook["timeoutSeconds"] == 3
        assert hook["rules"][0]["operations"] == ["CREATE"]
        assert hook["rules"][0]["resources"] == ["workflows"]
    assert hooks[0]["objectSelector"] == {"matchLabels": {f"{D}/placement": "runtime"}}
    assert hooks[1]["objectSelector"] == {
        "matchExpressions": [{"key": f"{D}/managed", "operator": "DoesNotExist"}]
    }


def test_register_applies_the_configuration_through_the_gateway(settings, monkeypatch):
    from portal.karmada import client

    applied: list[dict[str, Any]] = []
    monkeypatch.setattr(client, "apply_mutating_webhook", applied.append)
    body = webhook_register()
    assert applied == [body]
