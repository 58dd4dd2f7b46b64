"""The label and annotation keys of the Karmada contract under this deployment's domain
(``PORTAL_LABEL_DOMAIN``, default ``portal.multisite.io``). The names come from
``placement.labels``, the one place they are spelled."""

from __future__ import annotations

from django.conf import settings

from placement import labels as _contract
from placement.labels import (
    ATTEMPT,
    DATASETS,
    FALLBACK_SITE,
    GPU,
    MANAGED,
    PLACEMENT,
    PLACEMENT_CONTEXT,
    REASON,
    RULES_REVISION,
    RUN,
    RUNTIME,
    SITE,
    UNIT,
    UNIT_NAME,
)

__all__ = [
    "ATTEMPT",
    "DATASETS",
    "FALLBACK_SITE",
    "GPU",
    "MANAGED",
    "PLACEMENT",
    "PLACEMENT_CONTEXT",
    "REASON",
    "RULES_REVISION",
    "RUN",
    "RUNTIME",
    "SITE",
    "UNIT",
    "UNIT_NAME",
    "key",
]


def key(name: str) -> str:
    return _contract.key(settings.PORTAL_LABEL_DOMAIN, name)
