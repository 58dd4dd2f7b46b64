"""The demo fleet's artifact repositories and their credential Secrets, as its sites' operators
would set them up, all derived from the sandbox's demo fleet file (``sandbox/fleets/demo.yaml``),
the one description of that fleet: each site's repository (endpoint, bucket, Secret name) and
which sites can read it (``readableFrom``), which ``load_demo`` turns into the inventory's
``SiteLink.artifacts_reachable``; and each repository's credential Secret, created once on
karmada-apiserver (``run_demo`` and ``make examples``, which start their own sandbox). Free of
Django, so the examples runner can use it from outside the app."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from placement import labels

FLEET_FILE = Path(__file__).resolve().parent.parent / "sandbox" / "fleets" / "demo.yaml"


def _fleet_sites() -> list[dict[str, Any]]:
    doc = yaml.safe_load(FLEET_FILE.read_text())
    return [s for s in doc.get("sites") or [] if isinstance(s, dict)]


_SITES = _fleet_sites()
SITES: tuple[str, ...] = tuple(str(s["name"]) for s in _SITES)

# Per site: its repository's endpoint, bucket, region and credential Secret, as the fleet
# file says.
ARTIFACT_STORES: dict[str, dict[str, str]] = {
    str(s["name"]): {
        "endpoint": str((s.get("artifacts") or {}).get("endpoint") or f"s3.{s['name']}.invalid"),
        "bucket": str(s.get("bucket") or f"{s['name']}-artifacts"),
        # The region requests to it are signed for: the repository's own, else its site's.
        "region": str((s.get("artifacts") or {}).get("region") or s.get("region") or "us-east-1"),
        "credentials_secret": str(
            (s.get("artifacts") or {}).get("credentialsSecret")
            or f"{s['name']}-artifacts-credentials"
        ),
    }
    for s in _SITES
}

# Per repository (by its site): the other sites whose steps can read it. A site always reads
# its own repository.
READABLE_FROM: dict[str, frozenset[str]] = {
    str(s["name"]): frozenset(str(r) for r in (s.get("artifacts") or {}).get("readableFrom") or [])
    for s in _SITES
}


def artifacts_reachable(source: str, target: str) -> bool:
    """Whether steps at ``target`` can read the artifact repository of ``source``: the value of
    the inventory's ``SiteLink(source, target).artifacts_reachable``."""
    return source == target or target in READABLE_FROM.get(source, frozenset())


def credential_secrets(domain: str) -> list[dict[str, Any]]:
    """The repositories' credential Secrets: the keys the demo's repositories accept, labelled
    with the site they belong to (each is propagated to that site only)."""
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


def repository_proxies(url: str) -> dict[str, str]:
    """Each site's repository listener on the sandbox at ``url``, by site: the HTTP proxy the
    control plane reaches that repository's endpoint name through (the names resolve nowhere
    outside the sandbox). Empty when the sandbox runs no repositories (no ``--execute``)."""
    with urllib.request.urlopen(f"{url}/_sandbox/repositories", timeout=10) as res:
        items = json.loads(res.read()).get("items") or []
    return {str(r["site"]): str(r["url"]) for r in items if r.get("url")}


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
