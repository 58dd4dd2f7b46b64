"""Names and constants shared by every object the portal writes: API versions, policy names,
and the DNS-1123 / label-value shortening that keeps names valid and distinct."""

from __future__ import annotations

import hashlib
import re

API_VERSION = "argoproj.io/v1alpha1"
POLICY_API = "policy.karmada.io/v1alpha1"
DEFAULT_POLICY_PREFIX = "portal-site-"
FALLBACK_POLICY = "portal-fallback"
WEBHOOK_NAME = "portal-placement"
SITE_POLICY_PRIORITY = 100
FALLBACK_POLICY_PRIORITY = 10  # lower: only takes what no site policy claimed
NAME_MAX = 63
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def dns_name(*parts: str, max_len: int = NAME_MAX) -> str:
    """Join parts into a DNS-1123 name of at most ``max_len`` characters; when the readable
    form is too long, cut it and add a hash of the full form, so distinct inputs stay distinct."""
    full = "-".join(p for p in parts if p)
    clean = re.sub(r"[^a-z0-9-]+", "-", full.lower()).strip("-") or "x"
    clean = re.sub(r"-{2,}", "-", clean)
    if clean == full and len(clean) <= max_len:
        return clean
    digest = hashlib.sha256(full.encode()).hexdigest()[:8]
    head = clean[: max_len - len(digest) - 1].rstrip("-")
    return f"{head}-{digest}" if head else digest


def label_value(value: str) -> str:
    """A valid Kubernetes label value for ``value`` (hash-shortened if needed)."""
    if len(value) <= NAME_MAX and LABEL_VALUE.match(value):
        return value
    return dns_name(value)
