"""The resource detector: which policy claims a Workflow, the claim written on it, its
ResourceBinding (`pkg/detector/detector.go`, `pkg/detector/claim.go`), and what a policy being
deleted leaves behind."""

from __future__ import annotations

import uuid
from typing import Any

from sandbox.karmada import admission
from sandbox.karmada.policy import choose_policy
from sandbox.resources import (
    CLUSTER_PROPAGATION_POLICY,
    CONFIG_MAP,
    PROPAGATION_POLICY,
    RESOURCE_BINDING,
    SECRET,
    WORKFLOW,
    ResourceType,
)
from sandbox.store import Obj, Store, clone

PP_NAME = "propagationpolicy.karmada.io/name"
PP_NAMESPACE = "propagationpolicy.karmada.io/namespace"
CPP_NAME = "clusterpropagationpolicy.karmada.io/name"
RB_ID_LABEL = "resourcebinding.karmada.io/permanent-id"
# A Work's finalizer (pkg/controllers/execution/execution_controller.go).
EXECUTION_FINALIZER = "karmada.io/execution-controller"
BINDING_FINALIZER = "karmada.io/binding-controller"


def binding_name(kind: str, name: str) -> str:
    """names.GenerateBindingName (`pkg/util/names/names.go`)."""
    return f"{name.replace(':', '.')}-{kind}".lower()


def bind(
    store: Store, wf: Obj, pps: list[Obj], cpps: list[Obj], rtype: ResourceType = WORKFLOW
) -> Obj | None:
    """Claims the template (a Workflow, or a Secret or ConfigMap) for the policy that matches
    it best and creates its binding; None when no policy matches (`ApplyPolicy`,
    `ClaimPolicyForObject`, `BuildResourceBinding`). Only a workload has replicas and a node
    claim (the shipped Workflow interpreter's GetReplicas); other kinds have neither."""
    policy = choose_policy(pps, cpps, wf)
    if policy is None:
        return None
    wf, labels, annotations = _claim(store, wf, policy, rtype)
    meta = wf["metadata"]
    spec = policy.get("spec") or {}
    rb: Obj = {
        "metadata": {
            "name": binding_name(rtype.kind, meta["name"]),
            "namespace": meta["namespace"],
            "labels": dict(labels, **{RB_ID_LABEL: str(uuid_for(meta["uid"]))}),
            "annotations": annotations,
            "finalizers": [BINDING_FINALIZER],
            "ownerReferences": [
                {
                    "apiVersion": rtype.api_version,
                    "kind": rtype.kind,
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "resource": {
                "apiVersion": rtype.api_version,
                "kind": rtype.kind,
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
                "resourceVersion": meta["resourceVersion"],
            },
            "placement": clone(spec.get("placement") or {}),
            "schedulerName": spec.get("schedulerName", "default-scheduler"),
            "conflictResolution": spec.get("conflictResolution", "Abort"),
        },
    }
    if rtype is WORKFLOW:
        rb["spec"]["replicas"] = int((wf.get("spec") or {}).get("parallelism") or 1)
        claim = _node_claim(wf)
        if claim:
            rb["spec"]["replicaRequirements"] = {"nodeClaim": claim}
    return store.create(RESOURCE_BINDING, rb, validate=False)


def _claim(
    store: Store, wf: Obj, policy: Obj, rtype: ResourceType
) -> tuple[Obj, dict[str, str], dict[str, str]]:
    """The template labelled with the policy's permanent id and annotated with its name
    (`ClaimPolicyForObject`), stored when that changes it; with the labels and annotations."""
    meta = wf["metadata"]
    pmeta = policy["metadata"]
    if policy["kind"] == "PropagationPolicy":
        label = admission.PP_ID_LABEL
        annotations = {PP_NAME: pmeta["name"], PP_NAMESPACE: pmeta["namespace"]}
    else:
        label = admission.CPP_ID_LABEL
        annotations = {CPP_NAME: pmeta["name"]}
    labels = {label: (pmeta.get("labels") or {}).get(label, "")}
    if any((meta.get("labels") or {}).get(k) != v for k, v in labels.items()) or any(
        (meta.get("annotations") or {}).get(k) != v for k, v in annotations.items()
    ):
        claimed = clone(wf)
        claimed["metadata"].setdefault("labels", {}).update(labels)
        claimed["metadata"].setdefault("annotations", {}).update(annotations)
        wf = store.update(rtype, claimed, validate=False, check_rv=False)
    return wf, labels, annotations


def release_policies(store: Store) -> None:
    """A policy being deleted: its claims are removed from templates and bindings and its
    finalizer dropped (`ReconcilePropagationPolicy`, `pkg/detector/detector.go`); bindings
    and what they propagated stay."""
    for rtype, label in (
        (PROPAGATION_POLICY, admission.PP_ID_LABEL),
        (CLUSTER_PROPAGATION_POLICY, admission.CPP_ID_LABEL),
    ):
        for policy in store.all(rtype):
            meta = policy["metadata"]
            if not meta.get("deletionTimestamp"):
                continue
            policy_id = (meta.get("labels") or {}).get(label)
            for kind in (WORKFLOW, RESOURCE_BINDING, SECRET, CONFIG_MAP):
                for obj in store.all(kind):
                    if policy_id and (obj["metadata"].get("labels") or {}).get(label) == policy_id:
                        _unclaim(store, kind, obj, label)
            released = clone(policy)
            released["metadata"]["finalizers"] = [
                f
                for f in meta.get("finalizers") or []
                if f not in (admission.PP_FINALIZER, admission.CPP_FINALIZER)
            ]
            store.update(rtype, released, subresource="all", validate=False, check_rv=False)


def _unclaim(store: Store, kind: ResourceType, obj: Obj, label: str) -> None:
    new = clone(obj)
    new["metadata"].get("labels", {}).pop(label, None)
    for key in (PP_NAME, PP_NAMESPACE, CPP_NAME):
        (new["metadata"].get("annotations") or {}).pop(key, None)
    store.update(kind, new, subresource="all", validate=False, check_rv=False)


def uuid_for(seed: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, seed))


def _node_claim(wf: Obj) -> dict[str, Any]:
    """What the shipped Workflow interpreter's GetReplicas reports: node selector, affinity and
    tolerations of the Workflow's spec, and no resource request."""
    spec = wf.get("spec") or {}
    claim: dict[str, Any] = {}
    if spec.get("nodeSelector"):
        claim["nodeSelector"] = clone(spec["nodeSelector"])
    if spec.get("tolerations"):
        claim["tolerations"] = clone(spec["tolerations"])
    if (spec.get("affinity") or {}).get("nodeAffinity"):
        claim["hardNodeAffinity"] = clone(
            spec["affinity"]["nodeAffinity"].get("requiredDuringSchedulingIgnoredDuringExecution")
        )
    return claim


def work_object(ns: str, name: str, rb: Obj, manifest: Obj) -> Obj:
    """The Work the binding controller writes for one target cluster (in its execution
    namespace ``ns``), holding ``manifest``, the member's copy; any kind of template."""
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {RB_ID_LABEL: rb["metadata"]["labels"].get(RB_ID_LABEL, "")},
            "annotations": {
                "resourcebinding.karmada.io/name": rb["metadata"]["name"],
                "resourcebinding.karmada.io/namespace": rb["metadata"]["namespace"],
            },
            "finalizers": [EXECUTION_FINALIZER],
        },
        "spec": {"workload": {"manifests": [manifest]}},
    }
