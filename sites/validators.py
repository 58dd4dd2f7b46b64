"""Validation of the free-form JSON an operator or a client sends (labels, overrides, regions).

Each function returns a list of ``(path, message)`` problems, with ``path`` relative to the
value checked, so a serializer can report ``labels.foo`` or ``overrides.gpu_node_selector``.
"""

from __future__ import annotations

import math
import re
from typing import Any

Problem = tuple[str, str]

# Kubernetes label syntax (k8s.io/apimachinery/pkg/util/validation).
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_REGION = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
MAX_JSON_DEPTH = 20


def label_key_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        return "Label key has an empty prefix."
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "Label key prefix must be a DNS subdomain (at most 253 characters)."
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        return (
            "Label key name must be 1-63 characters of letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit."
        )
    return None


def label_value_problem(value: str) -> str | None:
    if value == "":
        return None
    if len(value) > 63 or not _LABEL_NAME.match(value):
        return (
            "Label value must be empty or 1-63 characters of letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit."
        )
    return None


def label_map_problems(value: Any) -> list[Problem]:
    """A Kubernetes label map: an object of string keys to string values."""
    if not isinstance(value, dict):
        return [("", "Must be an object of label: value.")]
    problems: list[Problem] = []
    for key, item in value.items():
        key_problem = label_key_problem(key)
        if key_problem:
            problems.append((key, key_problem))
        elif not isinstance(item, str):
            problems.append((key, "Label value must be a string."))
        else:
            value_problem = label_value_problem(item)
            if value_problem:
                problems.append((key, value_problem))
    return problems


def _join(head: str, tail: str) -> str:
    if not tail:
        return head
    return f"{head}{tail}" if tail.startswith("[") else f"{head}.{tail}"


def text_problem(text: str) -> str | None:
    """What PostgreSQL cannot store in text or jsonb: NUL and unpaired surrogates (JSON's
    ``"\\ud800"`` decodes to one)."""
    if "\x00" in text:
        return "Must not contain NUL characters."
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "Must not contain unpaired surrogate characters."
    return None


def json_problems(value: Any, depth: int = 0) -> list[Problem]:
    """Reject what PostgreSQL's jsonb cannot store (NUL, lone surrogates) and absurd nesting."""
    if depth > MAX_JSON_DEPTH:
        return [("", f"Nested deeper than {MAX_JSON_DEPTH} levels.")]
    if isinstance(value, str):
        problem = text_problem(value)
        return [("", problem)] if problem else []
    if isinstance(value, dict):
        problems: list[Problem] = []
        for key, item in value.items():
            key_problem = text_problem(key)
            if key_problem:
                return [("", f"Key: {key_problem}")]
            problems.extend(
                (_join(key, path), message) for path, message in json_problems(item, depth + 1)
            )
        return problems
    if isinstance(value, list):
        problems = []
        for index, item in enumerate(value):
            problems.extend(
                (_join(f"[{index}]", path), message)
                for path, message in json_problems(item, depth + 1)
            )
        return problems
    if isinstance(value, float) and not math.isfinite(value):
        return [("", "Numbers must be finite.")]
    return []


def region_list_problems(value: Any) -> list[Problem]:
    if not isinstance(value, list):
        return [("", "Must be a list of region names.")]
    problems: list[Problem] = []
    for index, item in enumerate(value):
        if not isinstance(item, str) or not _REGION.match(item):
            problems.append((f"[{index}]", "Region must be 1-63 letters, digits, '-', '_' or '.'."))
    if len(set(v for v in value if isinstance(v, str))) != len(value) and not problems:
        problems.append(("", "Regions must not repeat."))
    return problems


OVERRIDE_KEYS = {
    "artifact_repository",
    "artifact_store",
    "gpu_node_selector",
    "image_registry_mirror",
}
# S3 bucket names (lower case, digits, dots, hyphens; 3 to 63) and endpoints as Argo's s3
# artifact takes them: host[:port], no scheme.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_ENDPOINT = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?(:[0-9]{1,5})?$")
ARTIFACT_STORE_KEYS = ("endpoint", "bucket", "credentials_secret", "region", "proxy")
_PROXY = re.compile(r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?/?$")
# An S3 region name (us-east-1, eu-west, ...): what requests to the repository are signed for.
_REGION = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def artifact_store_problems(value: Any) -> list[Problem]:
    """``{"endpoint": "s3.site-a.example.org", "bucket": "site-a-artifacts",
    "credentials_secret": "site-a-artifacts-credentials"}``: where the site keeps its step
    outputs; steps elsewhere read them through pre-signed URLs the portal signs with the Secret's
    keys for ``region`` (default us-east-1). ``bucket`` is required; the Secret is propagated
    to this site only. ``proxy`` (``http://host:port``): the HTTP proxy the portal reaches
    the endpoint through, when it lists an unarchived folder another site reads."""
    if not isinstance(value, dict):
        return [("", "Must be an object with endpoint, bucket and credentials_secret.")]
    problems: list[Problem] = [
        (key, f"Unknown key; known: {', '.join(ARTIFACT_STORE_KEYS)}.")
        for key in sorted(set(value) - set(ARTIFACT_STORE_KEYS))
    ]
    bucket = value.get("bucket")
    if not isinstance(bucket, str) or not _BUCKET.match(bucket):
        problems.append(("bucket", "Must be an S3 bucket name such as site-a-artifacts."))
    endpoint = value.get("endpoint")
    if endpoint is not None and (
        not isinstance(endpoint, str) or len(endpoint) > 253 or not _ENDPOINT.match(endpoint)
    ):
        problems.append(("endpoint", "Must be host[:port] without a scheme."))
    secret = value.get("credentials_secret")
    if secret is not None and (
        not isinstance(secret, str) or len(secret) > 253 or not _DNS_SUBDOMAIN.match(secret)
    ):
        problems.append(("credentials_secret", "Must be the name of a Secret."))
    region = value.get("region")
    if region is not None and (not isinstance(region, str) or not _REGION.match(region)):
        problems.append(("region", "Must be an S3 region name such as eu-west-1."))
    proxy = value.get("proxy")
    if proxy is not None and (not isinstance(proxy, str) or not _PROXY.match(proxy)):
        problems.append(("proxy", "Must be an HTTP proxy URL such as http://proxy:3128."))
    return problems


def overrides_problems(value: Any) -> list[Problem]:
    """``{"artifact_repository": {...}, "artifact_store": {...}, "gpu_node_selector": {k: v},
    "image_registry_mirror": "host[:port][/path]"}``, every key optional."""
    if not isinstance(value, dict):
        return [("", "Must be an object.")]
    problems: list[Problem] = []
    for key in sorted(set(value) - OVERRIDE_KEYS):
        problems.append((key, f"Unknown override; known: {', '.join(sorted(OVERRIDE_KEYS))}."))
    if "artifact_repository" in value:
        repo = value["artifact_repository"]
        if not isinstance(repo, dict):
            problems.append(("artifact_repository", "Must be an object."))
        else:
            problems.extend(
                (_join("artifact_repository", p), m) for p, m in json_problems(repo, depth=1)
            )
    if "artifact_store" in value:
        problems.extend(
            (_join("artifact_store", p), m)
            for p, m in artifact_store_problems(value["artifact_store"])
        )
    if "gpu_node_selector" in value:
        problems.extend(
            (_join("gpu_node_selector", p), m)
            for p, m in label_map_problems(value["gpu_node_selector"])
        )
    if "image_registry_mirror" in value:
        mirror = value["image_registry_mirror"]
        if (
            not isinstance(mirror, str)
            or not mirror
            or len(mirror) > 253
            or any(c.isspace() or c == "\x00" for c in mirror)
        ):
            problems.append(
                ("image_registry_mirror", "Must be a registry host such as registry.example.org.")
            )
    return problems


def printable_key(key: object) -> str:
    """A client's key as it can appear in an error path: unpaired surrogates escaped, so the
    JSON answer can always be encoded."""
    return str(key).encode("utf-8", "backslashreplace").decode("utf-8")


def problems_detail(field: str, problems: list[Problem]) -> dict[str, list[str]]:
    """``{"labels.foo": [...], "residency[0]": [...]}`` for ``ValidationError``."""
    detail: dict[str, list[str]] = {}
    for raw_path, message in problems:
        path = printable_key(raw_path)
        if not path:
            key = field
        elif path.startswith("["):
            key = f"{field}{path}"
        else:
            key = f"{field}.{path}"
        detail.setdefault(key, []).append(message)
    return detail
