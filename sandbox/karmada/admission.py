"""Karmada's own admission webhooks for policies (karmada-webhook), built in.

Upstream registers them as `propagationpolicy.karmada.io`, `clusterpropagationpolicy.karmada.io`,
`overridepolicy.karmada.io` and `clusteroverridepolicy.karmada.io` (mutating and validating,
CREATE and UPDATE, failurePolicy Fail; `artifacts/deploy/webhook-configuration.yaml`).

* mutating (`pkg/webhook/propagationpolicy/mutating.go`,
  `pkg/webhook/clusterpropagationpolicy/mutating.go`): on CREATE a fresh UUID in the
  permanent-id label and the controller's finalizer; an empty `resourceSelectors[].namespace`
  of a namespaced policy becomes the policy's namespace (CREATE and UPDATE);
  `spreadConstraints[]` get `spreadByField: cluster` when neither field nor label is set, and
  `minGroups: 1` (`pkg/util/helper/policy.go`).
* validating (`pkg/webhook/propagationpolicy/validating.go`,
  `pkg/webhook/clusterpropagationpolicy/validating.go`): an UPDATE may not change
  `spec.schedulerName` nor change or drop the permanent-id label, and every policy must carry
  the label. Denials are 403 Forbidden with upstream's messages.
* OverridePolicy (`pkg/webhook/overridepolicy/mutating.go`): the namespace of resource selectors
  only; override policies carry no permanent-id label upstream.
"""

from __future__ import annotations

import uuid
from typing import Any

from sandbox.errors import ApiError
from sandbox.resources import (
    CLUSTER_PROPAGATION_POLICY,
    OVERRIDE_POLICY,
    PROPAGATION_POLICY,
    ResourceType,
)
from sandbox.store import Obj

PP_ID_LABEL = "propagationpolicy.karmada.io/permanent-id"
CPP_ID_LABEL = "clusterpropagationpolicy.karmada.io/permanent-id"
PP_FINALIZER = "karmada.io/propagation-policy-controller"
CPP_FINALIZER = "karmada.io/cluster-propagation-policy-controller"

# The `default:` values at spec level of the policy CRDs
# (`charts/karmada/_crds/bases/policy/policy.karmada.io_propagationpolicies.yaml`), used when
# the sandbox runs without `--crds`; with them, the CRD's schema defaults everything.
POLICY_SPEC_DEFAULTS = {
    "conflictResolution": "Abort",
    "preemption": "Never",
    "priority": 0,
    "schedulerName": "default-scheduler",
}

_ID_LABEL = {PROPAGATION_POLICY.kind: PP_ID_LABEL, CLUSTER_PROPAGATION_POLICY.kind: CPP_ID_LABEL}
_FINALIZER = {
    PROPAGATION_POLICY.kind: PP_FINALIZER,
    CLUSTER_PROPAGATION_POLICY.kind: CPP_FINALIZER,
}
_WEBHOOK_NAME = {
    "PropagationPolicy": "propagationpolicy.karmada.io",
    "ClusterPropagationPolicy": "clusterpropagationpolicy.karmada.io",
    "OverridePolicy": "overridepolicy.karmada.io",
    "ClusterOverridePolicy": "clusteroverridepolicy.karmada.io",
}


def is_policy(rtype: ResourceType) -> bool:
    return rtype.group == "policy.karmada.io"


def default_policy_spec(rtype: ResourceType, obj: Obj) -> None:
    """The CRD defaults at spec level, for a sandbox started without `--crds`."""
    if rtype.kind in _ID_LABEL:
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict):
            for key, value in POLICY_SPEC_DEFAULTS.items():
                spec.setdefault(key, value)


def mutate(rtype: ResourceType, obj: Obj, operation: str) -> Obj:
    """The mutating webhook of a policy kind; other kinds pass unchanged."""
    if not is_policy(rtype):
        return obj
    meta = obj.setdefault("metadata", {})
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return obj
    if rtype.kind in (PROPAGATION_POLICY.kind, OVERRIDE_POLICY.kind):
        for sel in spec.get("resourceSelectors") or []:
            if isinstance(sel, dict) and not sel.get("namespace"):
                sel["namespace"] = meta.get("namespace", "")
    if rtype.kind not in _ID_LABEL:
        return obj
    # helper.SetDefaultSpreadConstraints (pkg/util/helper/policy.go)
    for sc in (spec.get("placement") or {}).get("spreadConstraints") or []:
        if not isinstance(sc, dict):
            continue
        if not sc.get("spreadByField") and not sc.get("spreadByLabel"):
            sc["spreadByField"] = "cluster"
        if not sc.get("minGroups"):
            sc["minGroups"] = 1
    if operation == "CREATE":
        labels = meta.get("labels")
        if not isinstance(labels, dict):
            labels = meta["labels"] = {}
        labels[_ID_LABEL[rtype.kind]] = str(uuid.uuid4())
        finalizers = list(meta.get("finalizers") or [])
        if _FINALIZER[rtype.kind] not in finalizers:
            finalizers.append(_FINALIZER[rtype.kind])
        meta["finalizers"] = finalizers
    return obj


def _denied(rtype: ResourceType, message: str) -> ApiError:
    return ApiError(
        403,
        "Forbidden",
        f'admission webhook "{_WEBHOOK_NAME[rtype.kind]}" denied the request: {message}',
    )


def validate(rtype: ResourceType, obj: Obj, old: Obj | None) -> None:
    """The validating webhook of a (cluster) propagation policy; raises 403 when it denies."""
    label = _ID_LABEL.get(rtype.kind)
    if label is None:
        return
    labels: dict[str, Any] = (obj.get("metadata") or {}).get("labels") or {}
    if old is not None:
        old_labels: dict[str, Any] = (old.get("metadata") or {}).get("labels") or {}
        if (obj.get("spec") or {}).get("schedulerName") != (old.get("spec") or {}).get(
            "schedulerName"
        ):
            raise _denied(rtype, "the schedulerName should not be updated")
        if labels.get(label) != old_labels.get(label):
            raise _denied(
                rtype,
                f"label {label} is immutable, it can only be set by the system during creation",
            )
    if label not in labels:
        raise _denied(
            rtype,
            f"label {label} is required, it should be set by the mutating admission webhook "
            "during creation",
        )
