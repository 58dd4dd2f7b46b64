"""The label and annotation keys of the Karmada contract (DESIGN section 3), under the
configurable domain (``PORTAL_LABEL_DOMAIN``, default ``portal.multisite.io``)."""

from __future__ import annotations

from django.conf import settings


def key(name: str) -> str:
    return f"{settings.PORTAL_LABEL_DOMAIN}/{name}"


MANAGED = "managed"  # "true" on every step workflow the portal creates
RUN = "run"  # the WorkflowRun id
UNIT = "unit"  # the unit's slug
ATTEMPT = "attempt"  # the UnitRun attempt number
SITE = "site"  # the site, when placed at submission (or patched in by the webhook)
PLACEMENT = "placement"  # "runtime" when the webhook must place it
REASON = "reason"  # annotation: one line saying why
DATASETS = "datasets"  # annotation on submitted workflows: datasets a unit reads
# annotation on runtime step workflows: what the webhook decides from (the unit's needs, where
# its upstream units ran and what they produced), so the admission reads no database
PLACEMENT_CONTEXT = "placement-context"
