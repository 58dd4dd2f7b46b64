"""Karmada's controllers for the templates that are not Workflows: the Secrets and ConfigMaps a
(Cluster)PropagationPolicy selects (the portal's `portal-artifact-credentials` policy, for one).
Upstream has one detector for every kind (`pkg/detector/detector.go`): the same claim, a
ResourceBinding `<name>-<kind>` (`names.GenerateBindingName`), Works named by
`names.GenerateWorkName(kind, name, namespace)` in `karmada-es-<cluster>`, applied by the
execution controller while the cluster is Ready.

* Not a workload: no replicas, and it is always scheduled as Duplicated, to every feasible
  cluster, whenever the binding is looked at, so a cluster that joins later gets a copy
  (`pkg/scheduler/scheduler.go`, `doScheduleBinding`: "non-workload is considered as
  duplicated"); a cluster already chosen is not filtered out by a taint
  (`pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go`).
* The copy is pruned as `pkg/resourceinterpreter/default/native/prune/prune.go` does (no uid,
  resourceVersion, generation, ownerReferences, finalizers, status), labelled
  `karmada.io/managed`, and (Cluster)OverridePolicies apply to it.
* Objects in Karmada's reserved namespaces (`karmada-system`, `karmada-cluster`,
  `karmada-es-*`) and, by the detector's default `--skipped-propagating-namespaces`, `kube-*`
  are never propagated (`ResourceDetector.EventFilter`).
* A template deleted (or no longer selected by a live policy's binding) takes its binding,
  its Works and, once each cluster is Ready, the member's copy with it.
* Status: there is none to reflect; the binding's `aggregatedStatus` says `applied` and
  `health: Healthy` (no health interpreter for these kinds: `work_status_controller.go`,
  `interpretHealth`).
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from sandbox.argo.expr import fnv32a
from sandbox.argo.member import Member
from sandbox.karmada.clusters import execution_namespace
from sandbox.karmada.detector import (
    BINDING_FINALIZER,
    EXECUTION_FINALIZER,
    bind,
    binding_name,
    uuid_for,
    work_object,
)
from sandbox.karmada.overrides import apply_override_policies
from sandbox.karmada.scheduling import cluster_ready, schedule
from sandbox.resources import (
    CLUSTER_OVERRIDE_POLICY,
    CLUSTER_PROPAGATION_POLICY,
    CONFIG_MAP,
    OVERRIDE_POLICY,
    PROPAGATION_POLICY,
    RESOURCE_BINDING,
    SECRET,
    WORK,
    ResourceType,
)
from sandbox.store import Event, Obj, Store, clone, now_iso

log = logging.getLogger("sandbox.karmada")

KINDS = (SECRET, CONFIG_MAP)
WORK_ID_LABEL = "work.karmada.io/permanent-id"
MANAGED_LABEL = "karmada.io/managed"
CONFLICT = "work.karmada.io/conflict-resolution"
FULL_PASS_EVERY_S = 5.0
_SKIPPED = re.compile(r"^(karmada-system|karmada-cluster|karmada-es-.*|kube-.*)$")
# What a Secret or ConfigMap carries besides metadata (prune.go keeps every other field).
_BODY_FIELDS = ("type", "data", "stringData", "binaryData", "immutable")


def work_name(kind: str, namespace: str, name: str) -> str:
    """names.GenerateWorkName (`pkg/util/names/names.go`)."""
    name = name.replace(":", ".").lower()
    return f"{name}-{fnv32a(f'{namespace}-{name}-{kind}'.lower())}"


class PlainPropagation:
    """Detector, scheduler, binding and execution controllers for Secrets and ConfigMaps."""

    def __init__(self, store: Store, members: dict[str, Member]) -> None:
        self.store = store
        self.members = members
        self._dirty = True
        self._last_full = 0.0
        self.store.listeners.append(self._on_event)

    def _on_event(self, ev: Event) -> None:
        if ev.rtype in KINDS or ev.rtype in (PROPAGATION_POLICY, CLUSTER_PROPAGATION_POLICY):
            self._dirty = True
        elif ev.rtype is RESOURCE_BINDING or ev.rtype is WORK:
            kind = ((ev.obj.get("spec") or {}).get("resource") or {}).get("kind")
            manifests = ((ev.obj.get("spec") or {}).get("workload") or {}).get("manifests")
            if kind in ("Secret", "ConfigMap") or any(
                m.get("kind") in ("Secret", "ConfigMap") for m in manifests or []
            ):
                self._dirty = True

    def reconcile(self, clusters: dict[str, Obj], frozen: set[str], force: bool) -> None:
        now = time.monotonic()
        if not (self._dirty or force or now - self._last_full > FULL_PASS_EVERY_S):
            return
        self._dirty = False
        self._last_full = now
        pps = list(self.store.all(PROPAGATION_POLICY))
        cpps = list(self.store.all(CLUSTER_PROPAGATION_POLICY))
        for rtype in KINDS:
            for obj in list(self.store.all(rtype)):
                if not _SKIPPED.match(obj["metadata"].get("namespace", "")):
                    self._template(rtype, obj, pps, cpps, clusters, frozen)
        for rb in list(self.store.all(RESOURCE_BINDING)):
            self._orphan(rb, clusters, frozen)
        # Works being deleted outlive their binding until their cluster is Ready.
        for work in list(self.store.all(WORK)):
            (manifest,) = work["spec"]["workload"]["manifests"][:1] or [{}]
            kind = next((t for t in KINDS if t.kind == manifest.get("kind")), None)
            if kind is not None and work["metadata"].get("deletionTimestamp"):
                mmeta = manifest["metadata"]
                self._execute(kind, mmeta["namespace"], mmeta["name"], clusters, frozen)

    # -- detector and scheduler -------------------------------------------------------------
    def _template(
        self,
        rtype: ResourceType,
        obj: Obj,
        pps: list[Obj],
        cpps: list[Obj],
        clusters: dict[str, Obj],
        frozen: set[str],
    ) -> None:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            return
        rb = self.store.find(
            RESOURCE_BINDING, meta["namespace"], binding_name(rtype.kind, meta["name"])
        )
        if rb is not None and (
            (rb["spec"].get("resource") or {}).get("uid") != meta["uid"]
            or rb["metadata"].get("deletionTimestamp")
        ):
            return  # an earlier object's binding, or one being deleted: _orphan removes it
        if rb is None:
            rb = bind(self.store, obj, pps, cpps, rtype)
            if rb is None:
                return  # no policy selects it: it stays on karmada-apiserver only
            obj = self.store.get(rtype, meta["namespace"], meta["name"])
        rb = self._schedule(rtype, rb, clusters)
        targets = [c["name"] for c in rb["spec"].get("clusters") or []]
        self._sync_works(rtype, obj, rb, targets, clusters)
        self._execute(rtype, meta["namespace"], meta["name"], clusters, frozen)
        self._aggregate(rtype, rb, targets)

    def _schedule(self, rtype: ResourceType, rb: Obj, clusters: dict[str, Obj]) -> Obj:
        placement = clone(rb["spec"].get("placement") or {})
        placement.pop("replicaScheduling", None)  # a non-workload is always Duplicated
        current = [c["name"] for c in rb["spec"].get("clusters") or []]
        targets, why = schedule(
            [c for c in clusters.values() if c["metadata"]["name"] not in current],
            placement,
            (rtype.api_version, rtype.kind),
            [],
            {},
        )
        # Clusters already chosen stay (a taint does not filter them; the cluster is gone only
        # when its Cluster object is).
        targets = sorted({*(c for c in current if c in clusters), *targets})
        new = clone(rb)
        status = new.setdefault("status", {})
        if targets:
            cond = {
                "type": "Scheduled",
                "status": "True",
                "reason": "Success",
                "message": "Binding has been scheduled successfully.",
            }
        else:
            cond = {
                "type": "Scheduled",
                "status": "False",
                "reason": "NoClusterFit",
                "message": why,
            }
        new["spec"]["clusters"] = [{"name": t} for t in targets]
        old: dict[str, Any] = next(
            (c for c in status.get("conditions") or [] if c.get("type") == "Scheduled"), {}
        )
        if new["spec"]["clusters"] == (rb["spec"].get("clusters") or []) and all(
            old.get(k) == v for k, v in cond.items()
        ):
            return rb
        cond["lastTransitionTime"] = now_iso()
        status["conditions"] = [
            c for c in status.get("conditions") or [] if c.get("type") != "Scheduled"
        ] + [cond]
        if targets:
            log.info(
                "%s %s scheduled to %s", rtype.kind, rb["metadata"]["name"], ", ".join(targets)
            )
        return self.store.update(
            RESOURCE_BINDING, new, subresource="all", validate=False, check_rv=False
        )

    # -- binding controller -----------------------------------------------------------------
    def _sync_works(
        self, rtype: ResourceType, obj: Obj, rb: Obj, targets: list[str], clusters: dict[str, Obj]
    ) -> None:
        meta = obj["metadata"]
        name = work_name(rtype.kind, meta["namespace"], meta["name"])
        cops = list(self.store.all(CLUSTER_OVERRIDE_POLICY))
        ops = [
            p
            for p in self.store.all(OVERRIDE_POLICY)
            if p["metadata"].get("namespace") == meta["namespace"]
        ]
        for cluster in self.members:
            ns = execution_namespace(cluster)
            work = self.store.find(WORK, ns, name)
            if cluster not in targets or cluster not in clusters:
                if work is not None and not work["metadata"].get("deletionTimestamp"):
                    self.store.delete(WORK, ns, name)
                continue
            manifest = apply_override_policies(
                _manifest(obj, rb), obj, clusters[cluster], cops, ops
            )
            if work is None:
                self.store.create(WORK, work_object(ns, name, rb, manifest), validate=False)
            elif not work["metadata"].get("deletionTimestamp") and (
                work["spec"]["workload"]["manifests"][0] != manifest
            ):
                new = clone(work)
                new["spec"]["workload"]["manifests"] = [manifest]
                self.store.update(WORK, new, validate=False, check_rv=False)

    # -- execution controller ---------------------------------------------------------------
    def _execute(
        self,
        rtype: ResourceType,
        namespace: str,
        name: str,
        clusters: dict[str, Obj],
        frozen: set[str],
    ) -> None:
        wname = work_name(rtype.kind, namespace, name)
        for cluster, member in self.members.items():
            work = self.store.find(WORK, execution_namespace(cluster), wname)
            if work is None:
                continue
            if cluster not in clusters or not cluster_ready(clusters[cluster]) or cluster in frozen:
                self._dirty = True  # applied (or deleted) once the cluster is Ready again
                continue
            held = member.get_object(rtype.kind, namespace, name)
            managed = (((held or {}).get("metadata") or {}).get("labels") or {}).get(
                MANAGED_LABEL
            ) == "true"
            if work["metadata"].get("deletionTimestamp"):
                if managed:  # only what Karmada put there (`tryDeleteWorkload`)
                    member.delete_object(rtype.kind, namespace, name)
                released = clone(work)
                released["metadata"]["finalizers"] = [
                    f for f in work["metadata"].get("finalizers") or [] if f != EXECUTION_FINALIZER
                ]
                self.store.update(WORK, released, subresource="all", validate=False, check_rv=False)
                log.info("%s %s/%s deleted from %s", rtype.kind, namespace, name, cluster)
                continue
            manifest = work["spec"]["workload"]["manifests"][0]
            annotations = manifest["metadata"].get("annotations") or {}
            if held is not None and not managed and annotations.get(CONFLICT) != "overwrite":
                # `objectwatcher.go` (allowUpdate): an object the member holds that Karmada did
                # not create is left alone unless the policy says Overwrite.
                self._applied(
                    work,
                    False,
                    f"resource(kind={rtype.kind}, {namespace}/{name}) already exists in the "
                    f"cluster {cluster} and the {CONFLICT} strategy value is empty, Karmada "
                    "will not manage this resource",
                )
                continue
            if held != manifest:
                # The member's copy follows the Work (a copy changed or deleted at the member is
                # put back: the execution controller's ObjectWatcher updates it).
                member.put_object(clone(manifest))
            self._applied(work, True, "Manifest has been successfully applied")

    def _applied(self, work: Obj, ok: bool, message: str) -> None:
        cond = {
            "type": "Applied",
            "status": "True" if ok else "False",
            "reason": "AppliedSuccessful" if ok else "AppliedFailed",
            "message": message,
        }
        old: dict[str, Any] = next(
            (
                c
                for c in (work.get("status") or {}).get("conditions") or []
                if c["type"] == "Applied"
            ),
            {},
        )
        if all(old.get(k) == v for k, v in cond.items()):
            return
        new = clone(work)
        new.setdefault("status", {})["conditions"] = [{**cond, "lastTransitionTime": now_iso()}]
        self.store.update(WORK, new, subresource="status", validate=False, check_rv=False)

    def _aggregate(self, rtype: ResourceType, rb: Obj, targets: list[str]) -> None:
        meta = rb["metadata"]
        res = rb["spec"].get("resource") or {}
        wname = work_name(rtype.kind, res.get("namespace", ""), res.get("name", ""))
        items: list[dict[str, Any]] = []
        for cluster in targets:
            work = self.store.find(WORK, execution_namespace(cluster), wname) or {}
            applied = any(
                c.get("type") == "Applied" and c.get("status") == "True"
                for c in (work.get("status") or {}).get("conditions") or []
            )
            item: dict[str, Any] = {"clusterName": cluster}
            if applied:
                item.update(applied=True, health="Healthy")
            items.append(item)
        if (rb.get("status") or {}).get("aggregatedStatus") == items:
            return
        new = clone(self.store.get(RESOURCE_BINDING, meta["namespace"], meta["name"]))
        new.setdefault("status", {})["aggregatedStatus"] = items
        self.store.update(RESOURCE_BINDING, new, subresource="all", validate=False, check_rv=False)

    # -- garbage collection -----------------------------------------------------------------
    def _orphan(self, rb: Obj, clusters: dict[str, Obj], frozen: set[str]) -> None:
        """A binding of a Secret or ConfigMap whose template is gone (or was re-created): its
        Works go (the member copies once their cluster is Ready), then the binding."""
        res = rb["spec"].get("resource") or {}
        rtype = next((t for t in KINDS if t.kind == res.get("kind")), None)
        if rtype is None:
            return
        ns, name = res.get("namespace", ""), res.get("name", "")
        obj = self.store.find(rtype, ns, name)
        # The garbage collector's rule: a binding goes with the template that owns it (one
        # without an owner reference, written by hand, stays).
        owners = [o.get("uid") for o in rb["metadata"].get("ownerReferences") or []]
        alive = not owners or (obj is not None and obj["metadata"]["uid"] in owners)
        if alive and not rb["metadata"].get("deletionTimestamp"):
            return
        wname = work_name(rtype.kind, ns, name)
        for cluster in self.members:
            work = self.store.find(WORK, execution_namespace(cluster), wname)
            if work is not None and not work["metadata"].get("deletionTimestamp"):
                self.store.delete(WORK, execution_namespace(cluster), wname)
        self._execute(rtype, ns, name, clusters, frozen)
        meta = rb["metadata"]
        if not meta.get("deletionTimestamp"):
            self.store.delete(RESOURCE_BINDING, meta["namespace"], meta["name"])
            rb = self.store.find(RESOURCE_BINDING, meta["namespace"], meta["name"]) or rb
        if BINDING_FINALIZER in (rb["metadata"].get("finalizers") or []):
            released = clone(rb)
            released["metadata"]["finalizers"] = [
                f for f in rb["metadata"]["finalizers"] if f != BINDING_FINALIZER
            ]
            self.store.update(
                RESOURCE_BINDING, released, subresource="all", validate=False, check_rv=False
            )


def _manifest(obj: Obj, rb: Obj) -> Obj:
    meta = obj["metadata"]
    labels = dict(meta.get("labels") or {})
    labels[MANAGED_LABEL] = "true"
    labels[WORK_ID_LABEL] = str(uuid_for(meta["uid"] + "/work"))
    annotations = dict(meta.get("annotations") or {})
    # The policy's conflictResolution, as the binding controller writes it into the workload.
    annotations[CONFLICT] = str(rb["spec"].get("conflictResolution") or "Abort").lower()
    annotations["resourcetemplate.karmada.io/uid"] = meta["uid"]
    annotations["resourcebinding.karmada.io/name"] = rb["metadata"]["name"]
    annotations["resourcebinding.karmada.io/namespace"] = rb["metadata"]["namespace"]
    out: Obj = {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": annotations,
        },
    }
    for key in _BODY_FIELDS:
        if key in obj:
            out[key] = clone(obj[key])
    return out
