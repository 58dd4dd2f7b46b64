"""Kubernetes and Argo name rules, and the DNS-safe slugs units get."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from placement.parser.arguments import scalar_str
from placement.parser.results import Unit

# Kubernetes and Argo name rules.
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Argo's workflowFieldNameFmt (templates, steps, DAG tasks), at most 128 characters.
ARGO_FIELD_NAME = re.compile(r"^[a-zA-Z0-9][-a-zA-Z0-9]*$")
ARGO_FIELD_MAX = 128
# Argo's parameter / artifact name rule.
PARAM_NAME = re.compile(r"^[-a-zA-Z0-9_]+$")

SLUG_MAX = 40  # leaves room for "<run>-<slug>-<attempt>" in 63 characters before hashing


def slugify(name: str, max_len: int = SLUG_MAX) -> str:
    """A stable DNS-1123 label for ``name``: lower-case, [-a-z0-9], a hash suffix when the
    readable form had to change beyond case or got too long (so distinct names stay distinct)."""
    base = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unit"
    if base == name and len(base) <= max_len:
        return base
    # Any change (even only case: "A" and "a" are different Argo tasks) gets a hash suffix.
    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    keep = max_len - len(digest) - 1
    return f"{base[:keep].rstrip('-')}-{digest}"


def item_label(item: Any) -> str:
    """How Argo shows an item in an expanded node name: ``task(0:foo)``."""
    if isinstance(item, Mapping):
        return ",".join(f"{k}:{scalar_str(v)}" for k, v in sorted(item.items()))
    return scalar_str(item) or ""


def dedupe_slugs(units: list[Unit]) -> list[Unit]:
    seen: set[str] = set()
    out: list[Unit] = []
    for u in units:
        slug = u.slug
        if slug in seen:
            digest = hashlib.sha256(u.name.encode()).hexdigest()[:6]
            slug = f"{slug[: SLUG_MAX - 7].rstrip('-')}-{digest}"
            n = 0
            while slug in seen:
                n += 1
                slug = f"{slug[: SLUG_MAX - 7 - len(str(n))].rstrip('-')}-{digest}{n}"
            u = replace(u, slug=slug)
        seen.add(slug)
        out.append(u)
    return out
