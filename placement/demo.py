"""The demo fleet's artifact repositories and their credential Secrets, as its sites' operators
would set them up: the repository of each site in the inventory (``load_demo``), and each
repository's credential Secret created once on karmada-apiserver, labelled for the
``portal-artifact-credentials`` PropagationPolicy (``run_demo`` and ``make examples``, which
start their own sandbox). Free of Django, so the examples runner can use it from outside the
app. The sandbox's demo fleet file has the same endpoints, buckets and Secret names."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from placement import labels

SITES = ("site-a", "site-b", "site-c")

ARTIFACT_STORES: dict[str, dict[str, str]] = {
    name: {
        "endpoint": f"s3.{name}.sandbox.invalid",
        "bucket": f"{name}-artifacts",
        "credentials_secret": f"{name}-artifacts-credentials",
    }
    for name in SITES
}


def credential_secrets(domain: str) -> list[dict[str, Any]]:
    """The repositories' credential Secrets (the sandbox checks that they are there, not what
    they hold)."""
    label = labels.key(domain, labels.ARTIFACT_CREDENTIALS)
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": store["credentials_secret"], "labels": {label: "true"}},
            "stringData": {"accessKey": f"demo-{site}", "secretKey": f"demo-{site}-secret"},
        }
        for site, store in ARTIFACT_STORES.items()
    ]


def create_credentials(url: str, namespace: str, domain: str) -> None:
    """Creates the portal's namespace and the credential Secrets on the karmada-apiserver at
    ``url`` (a sandbox the caller started: no authentication); what exists already stays."""
    _post(
        f"{url}/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
    )
    for secret in credential_secrets(domain):
        _post(f"{url}/api/v1/namespaces/{namespace}/secrets", secret)


def _post(url: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10):
            return
    except urllib.error.HTTPError as exc:
        if exc.code != 409:  # already there: a sandbox kept from an earlier start
            raise
