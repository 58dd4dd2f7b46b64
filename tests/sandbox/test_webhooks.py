"""Karmada's user-registered mutating webhooks: called on CREATE, their patch applied, their
failure policy and timeout honoured (sandbox/karmada/webhooks.py)."""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client

from tests.fixtures_sandbox import free_port
from tests.sandbox.conftest import NS, SITE_LABEL, Fleet, leaf, site_policy, unique, workflow


class _Webhook(BaseHTTPRequestHandler):
    reviews: list[dict[str, Any]] = []
    delay = 0.0

    def do_POST(self) -> None:
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        time.sleep(type(self).delay)
        type(self).reviews.append(review)
        patch = [
            {
                "op": "add",
                "path": f"/metadata/labels/{SITE_LABEL.replace('/', '~1')}",
                "value": "site-c",
            }
        ]
        body = json.dumps(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {
                    "uid": review["request"]["uid"],
                    "allowed": True,
                    "patchType": "JSONPatch",
                    "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
                },
            }
        ).encode()
        # The sandbox may have given up on a slow answer already.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def webhook_url() -> Iterator[str]:
    _Webhook.reviews = []
    _Webhook.delay = 0.0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Webhook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/webhooks/placement/"
    server.shutdown()
    server.server_close()


def register_webhook(
    custom: client.CustomObjectsApi, url: str, policy: str, timeout: int = 3
) -> None:
    custom.create_cluster_custom_object(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "portal-placement"},
            "webhooks": [
                {
                    "name": "runtime.placement.portal.multisite.io",
                    "clientConfig": {"url": url},
                    "rules": [
                        {
                            "operations": ["CREATE"],
                            "apiGroups": ["argoproj.io"],
                            "apiVersions": ["v1alpha1"],
                            "resources": ["workflows"],
                        }
                    ],
                    "objectSelector": {"matchLabels": {"portal.multisite.io/placement": "runtime"}},
                    "failurePolicy": policy,
                    "timeoutSeconds": timeout,
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                }
            ],
        },
    )


def test_the_webhook_patch_is_applied_on_create(
    fleet: Fleet, custom: client.CustomObjectsApi, webhook_url: str
) -> None:
    register_webhook(custom, webhook_url, "Fail")
    fleet.create_policy(site_policy("site-c"))
    name = unique("hook")
    created = fleet.create_workflow(
        workflow(name, [leaf("main")], labels={"portal.multisite.io/placement": "runtime"})
    )
    assert created["metadata"]["labels"][SITE_LABEL] == "site-c"
    assert fleet.scheduled_to(name) == "site-c"
    request = _Webhook.reviews[0]["request"]
    assert request["operation"] == "CREATE" and request["name"] == name
    assert request["kind"]["kind"] == "Workflow" and request["namespace"] == NS
    untouched = unique("nohook")
    fleet.create_workflow(workflow(untouched, [leaf("main")]))
    assert len(_Webhook.reviews) == 1  # objectSelector did not match


def test_failure_policy_ignore_admits_when_the_webhook_is_down(
    fleet: Fleet, custom: client.CustomObjectsApi
) -> None:
    register_webhook(custom, f"http://127.0.0.1:{free_port()}/down", "Ignore")
    name = unique("ign")
    created = fleet.create_workflow(
        workflow(name, [leaf("main")], labels={"portal.multisite.io/placement": "runtime"})
    )
    assert SITE_LABEL not in created["metadata"]["labels"]


def test_failure_policy_fail_rejects_when_the_webhook_is_down(
    fleet: Fleet, custom: client.CustomObjectsApi
) -> None:
    register_webhook(custom, f"http://127.0.0.1:{free_port()}/down", "Fail")
    name = unique("failp")
    with pytest.raises(client.ApiException) as err:
        fleet.create_workflow(
            workflow(name, [leaf("main")], labels={"portal.multisite.io/placement": "runtime"})
        )
    assert err.value.status == 500
    assert "failed calling webhook" in json.loads(err.value.body)["message"]


def test_a_webhook_slower_than_its_timeout_counts_as_failed(
    fleet: Fleet, custom: client.CustomObjectsApi, webhook_url: str
) -> None:
    _Webhook.delay = 2.5
    register_webhook(custom, webhook_url, "Fail", timeout=1)
    with pytest.raises(client.ApiException) as err:
        fleet.create_workflow(
            workflow(
                unique("slow"), [leaf("main")], labels={"portal.multisite.io/placement": "runtime"}
            )
        )
    assert err.value.status == 500
    assert "failed calling webhook" in json.loads(err.value.body)["message"]
