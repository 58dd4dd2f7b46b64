"""The label and annotation keys of the Karmada contract (DESIGN section 3). Pure: no Django
import, so the manifests compiler, the parser and the portal spell every key from one place.

A key is ``<domain>/<name>``; the domain is configurable (the portal reads it from the
``PORTAL_LABEL_DOMAIN`` setting, see ``portal.labels``), the names are fixed here.
"""

from __future__ import annotations

DEFAULT_DOMAIN = "portal.multisite.io"

# Labels on step workflows (and on the policies the portal owns).
MANAGED = "managed"  # "true" on every object the portal creates
RUN = "run"  # the WorkflowRun id
UNIT = "unit"  # the unit's slug
ATTEMPT = "attempt"  # the UnitRun attempt number
SITE = "site"  # the site, when placed at submission (or patched in by the webhook)
PLACEMENT = "placement"  # RUNTIME when the webhook must place it
# On a runtime step workflow: a site satisfying every hard constraint, chosen by the worker.
# Its site policy selects it too, so it lands there if the webhook does not answer; the
# webhook removes it when it decides.
FALLBACK_SITE = "fallback-site"
GPU = "gpu"  # "true" on step workflows that request GPUs: the GPU node-selector override
# The value of PLACEMENT that the webhook registration selects.
RUNTIME = "runtime"

# On Secrets in the portal's namespace: a site's artifact repository credentials, propagated
# to every member (the artifact-credentials PropagationPolicy).
ARTIFACT_CREDENTIALS = "artifact-credentials"

# Annotations.
REASON = "reason"  # one line saying why the step workflow is where it is
UNIT_NAME = "unit-name"  # the unit's full name (the slug label may be shortened)
DATASETS = "datasets"  # on submitted workflows and templates: datasets a unit reads
# On a template: the sizes of its output artifacts, "tiles=2Gi,patches=500Mi" (Argo records
# none), for the planner's data-gravity scoring of the steps that read them.
OUTPUT_SIZES = "output-sizes"
# On runtime step workflows: what the webhook decides from (the unit's needs, where its
# upstream units ran and what they produced), so the admission reads no database.
PLACEMENT_CONTEXT = "placement-context"
# On every policy the portal writes: the rule revision (its id) whose configuration it came from.
RULES_REVISION = "rules-revision"


def key(domain: str, name: str) -> str:
    """The full key of ``name`` under a label domain: ``key("example.org", SITE)`` is
    ``"example.org/site"``."""
    return f"{domain}/{name}"
