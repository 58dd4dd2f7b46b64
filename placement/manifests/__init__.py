"""Compile plans to Karmada and Argo objects (DESIGN section 3), and run-time helpers.

Pure package: plain dicts in, plain dicts out; nothing here talks to a cluster or imports Django.

* ``policies``: ``propagation_policy(site)``, ``fallback_policy()``,
  ``override_policies(site, overrides)``, ``webhook_configuration(url)`` and
  ``karmada_manifests(...)``: the objects the portal keeps on karmada-apiserver.
* ``workflows``: ``step_workflow(parsed, unit, ...)``, the Argo Workflow that runs one unit.
* ``transfers``: ``transfer_workflow(unit, artifacts, ...)``, the one that copies outputs.
* ``images``: ``mirror_images`` / ``image_mirror_patch``, a site's registry mirror.
* ``outputs``: ``TaskOutputs``, what a finished upstream unit produced, and
  ``aggregate_outputs`` / ``with_skipped_defaults``: how Argo shows them downstream.
* ``substitution``: ``substitute`` fills ``{{workflow.parameters.x}}``,
  ``{{tasks.X.outputs...}}``, ``{{steps.X.outputs...}}`` and ``{{item}}`` from known values.
* ``arguments``: ``resolve_arguments``, a unit's Argo ``arguments`` with those filled.
* ``workflow_variables``: ``run_variables`` / ``fill_run_variables`` (``{{workflow.*}}``) and
  ``global_outputs`` / ``fill_global_artifacts`` (the run's ``globalName`` outputs).
* ``conditions``: ``evaluate_depends`` / ``evaluate_when`` decide whether a unit runs.
* ``runlevel``: ``run_level_spec``, a step workflow's spec under the run's own deadline,
  locks and artifact GC.
* ``names``: API versions, policy names, DNS-1123 names and label values.

The label keys are ``placement.labels``. Site ``overrides`` (operator-set,
``sites.Site.overrides``)::

    {
      "artifact_repository": {"configMap": "artifact-repositories", "key": "site-a-s3"},
      "gpu_node_selector": {"nvidia.com/gpu.present": "true"},
      "image_registry_mirror": "mirror.site-a.example.org"
    }

Callers import from the package (``from placement import manifests``); the modules are its
sections.
"""

from __future__ import annotations

from placement.manifests.arguments import resolve_arguments
from placement.manifests.conditions import (
    FINAL_PHASES,
    DependsError,
    ExpressionError,
    WhenError,
    evaluate_depends,
    evaluate_when,
)
from placement.manifests.images import image_mirror_patch, image_paths, mirror_images
from placement.manifests.names import (
    API_VERSION,
    DEFAULT_POLICY_PREFIX,
    FALLBACK_POLICY,
    FALLBACK_POLICY_PRIORITY,
    LABEL_VALUE,
    NAME_MAX,
    POLICY_API,
    SITE_POLICY_PRIORITY,
    WEBHOOK_NAME,
    dns_name,
    label_value,
)
from placement.manifests.outputs import TaskOutputs, aggregate_outputs, with_skipped_defaults
from placement.manifests.policies import (
    artifact_credentials_policy,
    fallback_policy,
    karmada_manifests,
    override_policies,
    propagation_policy,
    webhook_configuration,
)
from placement.manifests.runlevel import has_artifact_gc, run_level_spec
from placement.manifests.substitution import Unresolved, substitute
from placement.manifests.transfers import TRANSFER_IMAGE, transfer_workflow
from placement.manifests.workflow_variables import (
    GlobalOutputs,
    fill_global_artifacts,
    fill_run_variables,
    global_outputs,
    run_variables,
)
from placement.manifests.workflows import (
    emitted_template_names,
    step_workflow,
    step_workflow_name,
)

__all__ = [
    "API_VERSION",
    "DEFAULT_POLICY_PREFIX",
    "FALLBACK_POLICY",
    "FALLBACK_POLICY_PRIORITY",
    "FINAL_PHASES",
    "LABEL_VALUE",
    "NAME_MAX",
    "POLICY_API",
    "SITE_POLICY_PRIORITY",
    "TRANSFER_IMAGE",
    "WEBHOOK_NAME",
    "DependsError",
    "ExpressionError",
    "GlobalOutputs",
    "TaskOutputs",
    "Unresolved",
    "WhenError",
    "aggregate_outputs",
    "artifact_credentials_policy",
    "dns_name",
    "emitted_template_names",
    "evaluate_depends",
    "evaluate_when",
    "fallback_policy",
    "fill_global_artifacts",
    "fill_run_variables",
    "global_outputs",
    "has_artifact_gc",
    "image_mirror_patch",
    "image_paths",
    "karmada_manifests",
    "label_value",
    "mirror_images",
    "override_policies",
    "propagation_policy",
    "resolve_arguments",
    "run_level_spec",
    "run_variables",
    "step_workflow",
    "step_workflow_name",
    "substitute",
    "transfer_workflow",
    "webhook_configuration",
    "with_skipped_defaults",
]
