"""Karmada's controllers for Workflows, as one reconcile loop over the Workflows that changed.

* detector (`pkg/detector/detector.go`, `pkg/detector/claim.go`): the policy that claims a
  Workflow labels it with the policy's permanent id and annotates its name; it gets a
  ResourceBinding `<name>-workflow`, owned by the Workflow, with the finalizer
  `karmada.io/binding-controller`.
* scheduler (`scheduling.py`): fills `spec.clusters` and the `Scheduled` condition.
* binding controller (`pkg/controllers/binding/binding_controller.go`): one Work per target
  cluster in `karmada-es-<cluster>`, holding the member copy with overrides applied; a deleted
  binding deletes its Works and drops its finalizer at once.
* execution controller (`pkg/controllers/execution/execution_controller.go`): applies a Work
  to its member only while the cluster is Ready; a deleted Work (finalizer
  `karmada.io/execution-controller`) deletes the member's copy only once the cluster is Ready,
  and waits until then (the copy keeps running). A copy the member deleted is re-created from
  the Work, and runs again.
* status (`status.py`): the member's `.status` to the Work and the binding. The Workflow's
  `.status` on karmada-apiserver stays as its writer left it.
"""

from __future__ import annotations

import logging
import time

from sandbox.argo.member import ClusterHost, Member
from sandbox.karmada.clusters import EXECUTION_NS_PREFIX, ClusterController, execution_namespace
from sandbox.karmada.detector import (
    BINDING_FINALIZER,
    EXECUTION_FINALIZER,
    bind,
    release_policies,
    uuid_for,
    work_object,
)
from sandbox.karmada.events import Events
from sandbox.karmada.overrides import apply_override_policies
from sandbox.karmada.propagation import PlainPropagation
from sandbox.karmada.scheduling import cluster_ready, schedule
from sandbox.karmada.status import WorkflowStatus
from sandbox.karmada.webhooks import Webhooks
from sandbox.karmada.works import Key, condition, key_of, set_condition, work_keys, work_name
from sandbox.resources import (
    CLUSTER_OVERRIDE_POLICY,
    CLUSTER_PROPAGATION_POLICY,
    OVERRIDE_POLICY,
    PROPAGATION_POLICY,
    RESOURCE_BINDING,
    WORK,
    WORKFLOW,
)
from sandbox.store import Event, Obj, clone

log = logging.getLogger("sandbox.karmada")
_EVERY_WORKFLOW = (
    PROPAGATION_POLICY,
    CLUSTER_PROPAGATION_POLICY,
    OVERRIDE_POLICY,
    CLUSTER_OVERRIDE_POLICY,
)

WORK_ID_LABEL = "work.karmada.io/permanent-id"
# The full pass is the sandbox's own safety net (upstream's controllers are driven by their
# informers alone: karmada-controller-manager's `--resync-period` defaults to 0). It comes at
# most every FULL_PASS_EVERY_S, in slices of FULL_PASS_SLICE Workflows, and rests
# FULL_PASS_REST times as long as it took: on a fleet holding 20,000 Workflows a pass over
# every one every 5 s, in one go, kept the loop busy half the time, and every request waited
# seconds behind it.
FULL_PASS_EVERY_S = 5.0
FULL_PASS_REST = 19.0
FULL_PASS_SLICE = 1000


class Karmada:
    def __init__(self, sandbox: ClusterHost) -> None:
        self.sb = sandbox
        self.store = sandbox.store
        self.webhooks = Webhooks(sandbox)
        self.clusters = ClusterController(sandbox)
        self.events = Events(sandbox.store)
        self.status = WorkflowStatus(sandbox.store, self.events)
        # (cluster, namespace, name) -> (run, Work generation) last applied to the member.
        self._applied: dict[tuple[str, str, str], tuple[str, int]] = {}
        self._frozen: set[str] = set()
        # (namespace, name) -> what its Works were last built from (template, targets,
        # override policies), so that a Workflow whose member status moves costs no rebuild.
        self._built: dict[Key, tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]]] = {}
        self._overrides_stamp: tuple[tuple[str, str], ...] = ()
        # Workflows to look at in the next pass; a full pass now and then catches the rest.
        self._dirty: set[Key] = set()
        self._waiting: set[Key] = set()
        self._all_dirty = True
        self._next_full = 0.0
        # The keys of the full pass under way (taken from the end), and the time it took so far.
        self._pass: list[Key] = []
        self._pass_spent = 0.0
        self._next_prune = 0.0
        # (namespace, name) -> the clusters whose execution namespace holds its Work: the
        # execution controller looks at those, not at every cluster of the fleet for every
        # Workflow (50 lookups per Workflow and pass).
        self._work_clusters: dict[Key, set[str]] = {}
        self.store.listeners.append(self._on_event)
        # Secrets and ConfigMaps a policy selects (their own detector pass).
        self.plain = PlainPropagation(sandbox.store, sandbox.members)

    def reset(self) -> None:
        self._applied.clear()
        self.status.reset()
        self._built.clear()
        self._waiting.clear()
        self.clusters.reset()
        self.events.reset()
        self.mark_all()

    def mark(self, key: Key) -> None:
        self._dirty.add(key)

    def mark_all(self) -> None:
        self._all_dirty = True

    def _on_event(self, ev: Event) -> None:
        rtype = ev.rtype
        meta = ev.obj["metadata"]
        if rtype is WORKFLOW:
            self._dirty.add((meta.get("namespace", ""), meta["name"]))
        elif rtype is RESOURCE_BINDING:
            res = (ev.obj.get("spec") or {}).get("resource") or {}
            self._dirty.add((meta.get("namespace", ""), res.get("name", "")))
        elif rtype is WORK:
            cluster = meta.get("namespace", "")[len(EXECUTION_NS_PREFIX) :]
            for key in work_keys(ev.obj):
                self._dirty.add(key)
                held = self._work_clusters.setdefault(key, set())
                if ev.type == "DELETED":
                    held.discard(cluster)
                    if not held:
                        del self._work_clusters[key]
                else:
                    held.add(cluster)
        elif rtype in _EVERY_WORKFLOW:
            # A (Cluster)OverridePolicy changes what every Work of its targets holds (the
            # binding controller enqueues the bindings it applies to); a policy, what claims.
            self._all_dirty = True

    # -- the loop --------------------------------------------------------------------------
    def reconcile(self) -> None:
        clusters = self.clusters.sync()
        frozen = {
            name
            for name, c in clusters.items()
            if self.sb.faults.site_unreachable(name) or not cluster_ready(c)
        }
        if frozen != self._frozen:
            self._all_dirty = True
        self._frozen = frozen
        release_policies(self.store)
        self.plain.reconcile(clusters, frozen, force=self._all_dirty)
        now = time.monotonic()
        if now >= self._next_prune:
            self._next_prune = now + FULL_PASS_EVERY_S
            self.events.prune()
        if self._all_dirty or (not self._pass and now >= self._next_full):
            self._all_dirty = False
            # Taken from the end, in key order.
            self._pass = sorted(self._all_keys(), reverse=True)
            self._pass_spent = 0.0
        in_pass = bool(self._pass)
        keys = self._dirty | self._waiting
        self._dirty = set()
        if in_pass:
            # A slice of the pass per turn of the loop, as a controller's workers take a
            # resync's keys from its queue: the apiserver answers between slices instead of
            # waiting seconds for a pass over every Workflow.
            n = min(FULL_PASS_SLICE, len(self._pass))
            keys.update(self._pass[-n:])
            del self._pass[-n:]
        if keys:
            self._reconcile_keys(keys, clusters)
        if in_pass:
            self._pass_spent += time.monotonic() - now
            if not self._pass:
                rest = max(FULL_PASS_EVERY_S, self._pass_spent * FULL_PASS_REST)
                self._next_full = time.monotonic() + rest

    def busy(self) -> bool:
        """A full pass is under way: the loop comes back at its next tick, not when woken."""
        return bool(self._pass)

    def _reconcile_keys(self, keys: set[Key], clusters: dict[str, Obj]) -> None:
        self._overrides_stamp = tuple(
            sorted(
                (
                    o["metadata"].get("namespace", "") + "/" + o["metadata"]["name"],
                    str(o["metadata"]["resourceVersion"]),
                )
                for rtype in (OVERRIDE_POLICY, CLUSTER_OVERRIDE_POLICY)
                for o in self.store.all(rtype)
            )
        )
        pps = list(self.store.all(PROPAGATION_POLICY))
        cpps = list(self.store.all(CLUSTER_PROPAGATION_POLICY))
        for key in sorted(keys):
            self._reconcile_one(key, pps, cpps, clusters)

    def _all_keys(self) -> set[Key]:
        keys = {
            (w["metadata"]["namespace"], w["metadata"]["name"]) for w in self.store.all(WORKFLOW)
        }
        for rb in self.store.all(RESOURCE_BINDING):
            if (rb["spec"].get("resource") or {}).get("kind") != WORKFLOW.kind:
                continue  # a Secret's or ConfigMap's: PlainPropagation's
            keys.add(
                (rb["metadata"]["namespace"], (rb["spec"].get("resource") or {}).get("name", ""))
            )
        for work in self.store.all(WORK):
            keys |= set(work_keys(work))
        for member in self.sb.members.values():
            keys |= set(member.runs)
        return keys

    def _reconcile_one(
        self, key: Key, pps: list[Obj], cpps: list[Obj], clusters: dict[str, Obj]
    ) -> None:
        self._waiting.discard(key)
        wf = self.store.find(WORKFLOW, *key)
        rb = self.store.find(RESOURCE_BINDING, key[0], f"{key[1]}-workflow")
        if rb is not None and (rb["spec"].get("resource") or {}).get("kind") != "Workflow":
            rb = None
        if rb is not None and (
            wf is None
            or rb["spec"]["resource"].get("uid") != wf["metadata"]["uid"]
            or rb["metadata"].get("deletionTimestamp")
        ):
            # Garbage collection of a binding whose owner is gone (or was re-created), or a
            # binding someone deleted (the detector then builds it again).
            if not rb["metadata"].get("deletionTimestamp"):
                rb = self.store.delete(RESOURCE_BINDING, key[0], rb["metadata"]["name"])
            rb = self._binding_deleted(rb)
        targets: list[str] = []
        if wf is not None and not wf["metadata"].get("deletionTimestamp"):
            if rb is None:
                rb = bind(self.store, wf, pps, cpps)
            if rb is not None and not rb["spec"].get("clusters"):
                rb = self._schedule(wf, rb, clusters)
            if rb is not None:
                targets = [c["name"] for c in rb["spec"].get("clusters") or []]
                if not targets:
                    self._waiting.add(key)
                else:
                    self._sync_works(wf, rb, targets, clusters)
        self._execute(key, targets, clusters)
        if wf is not None and rb is not None and targets:
            self.status.aggregate(wf, rb, targets)

    # -- scheduler -------------------------------------------------------------------------
    def _schedule(self, wf: Obj, rb: Obj, clusters: dict[str, Obj]) -> Obj:
        free = {
            name: m.capacity.get("pods", 0.0) - m.allocated.get("pods", 0.0)
            for name, m in self.sb.members.items()
        }
        targets, why = schedule(
            list(clusters.values()),
            rb["spec"].get("placement") or {},
            (WORKFLOW.api_version, WORKFLOW.kind),
            [],
            free,
        )
        new = clone(rb)
        status = new.setdefault("status", {})
        if targets:
            new["spec"]["clusters"] = [
                {"name": t, "replicas": rb["spec"].get("replicas", 1)} for t in targets
            ]
            cond = {
                "type": "Scheduled",
                "status": "True",
                "reason": "Success",
                "message": "Binding has been scheduled successfully.",
            }
            status["schedulerObservedGeneration"] = new["metadata"].get("generation", 1) + 1
            log.info("workflow %s/%s scheduled to %s", *key_of(wf), ", ".join(targets))
        else:
            cond = {
                "type": "Scheduled",
                "status": "False",
                "reason": "NoClusterFit",
                "message": why,
            }
        changed = set_condition(status, cond)
        if not changed and not targets:
            return rb
        stored = self.store.update(
            RESOURCE_BINDING, new, subresource="all", validate=False, check_rv=False
        )
        if changed and not targets:
            # recordScheduleResultEventForResourceBinding (`pkg/scheduler/scheduler.go`): the
            # same Event on the binding and on the resource template. A FitError is not retried
            # until a Cluster or the binding changes, so one per change of the condition is
            # what a reader sees. Upstream's `ScheduleBindingSucceed` is not recorded: two
            # Events per step of a fan-out would push the bindings' own changes out of the
            # bounded watch log, and nothing reads them.
            for obj in (stored, wf):
                self.events.record(
                    obj, "Warning", "ScheduleBindingFailed", why, "karmada-scheduler"
                )
        return stored

    # -- binding controller ----------------------------------------------------------------
    def _binding_deleted(self, rb: Obj) -> Obj | None:
        """Deletes the binding's Works, then drops its finalizer (the Works may linger)."""
        key = (rb["metadata"]["namespace"], (rb["spec"].get("resource") or {}).get("name", ""))
        for cluster in self.sb.members:
            ns = execution_namespace(cluster)
            if self.store.find(WORK, ns, work_name(*key)) is not None:
                self.store.delete(WORK, ns, work_name(*key))
        released = clone(rb)
        released["metadata"]["finalizers"] = [
            f for f in rb["metadata"].get("finalizers") or [] if f != BINDING_FINALIZER
        ]
        self.store.update(
            RESOURCE_BINDING, released, subresource="all", validate=False, check_rv=False
        )
        return None

    def _sync_works(self, wf: Obj, rb: Obj, targets: list[str], clusters: dict[str, Obj]) -> None:
        key = key_of(wf)
        built = (str(wf["metadata"]["resourceVersion"]), tuple(targets), self._overrides_stamp)
        if self._built.get(key) == built and all(
            self.store.find(WORK, execution_namespace(t), work_name(*key)) is not None
            for t in targets
        ):
            return
        self._built[key] = built
        name = work_name(*key)
        cops = list(self.store.all(CLUSTER_OVERRIDE_POLICY))
        ops = [
            p for p in self.store.all(OVERRIDE_POLICY) if p["metadata"].get("namespace") == key[0]
        ]
        for cluster in self.sb.members:
            ns = execution_namespace(cluster)
            work = self.store.find(WORK, ns, name)
            if cluster not in targets:
                if work is not None and not work["metadata"].get("deletionTimestamp"):
                    self.store.delete(WORK, ns, name)
                continue
            if cluster not in clusters:
                continue
            manifest = apply_override_policies(
                self._manifest(wf, rb), wf, clusters[cluster], cops, ops
            )
            if work is None:
                self.store.create(WORK, work_object(ns, name, rb, manifest), validate=False)
            elif work["metadata"].get("deletionTimestamp"):
                continue  # the old one must go first (a re-created Workflow)
            elif work["spec"]["workload"]["manifests"][0] != manifest:
                new = clone(work)
                new["spec"]["workload"]["manifests"] = [manifest]
                self.store.update(WORK, new, validate=False, check_rv=False)

    def _manifest(self, wf: Obj, rb: Obj) -> Obj:
        meta = wf["metadata"]
        labels = dict(meta.get("labels") or {})
        labels["karmada.io/managed"] = "true"
        labels[WORK_ID_LABEL] = str(uuid_for(meta["uid"] + "/work"))
        annotations = dict(meta.get("annotations") or {})
        annotations["resourcetemplate.karmada.io/uid"] = meta["uid"]
        annotations["resourcebinding.karmada.io/name"] = rb["metadata"]["name"]
        annotations["resourcebinding.karmada.io/namespace"] = rb["metadata"]["namespace"]
        return {
            "apiVersion": wf["apiVersion"],
            "kind": wf["kind"],
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": annotations,
            },
            "spec": clone(wf.get("spec") or {}),
        }

    # -- execution controller --------------------------------------------------------------
    def _execute(self, key: Key, targets: list[str], clusters: dict[str, Obj]) -> None:
        name = work_name(*key)
        for cluster in sorted(self._work_clusters.get(key, ())):
            member = self.sb.members.get(cluster)
            work = self.store.find(WORK, execution_namespace(cluster), name)
            if member is None or work is None:
                continue
            # Ready as the pass began (``_frozen``: unreachable or not Ready), not asked of the
            # faults once per Workflow and cluster, which a full pass over a 10,000-item
            # fan-out did half a million times.
            ready = cluster in clusters and cluster not in self._frozen
            if work["metadata"].get("deletionTimestamp"):
                if ready:
                    self._delete_workload(member, key, work)
                else:
                    self._waiting.add(key)  # "cluster(...) not ready": retried
                continue
            if not ready:
                self._waiting.add(key)
                continue
            self.status.reflect_work(member, key, self._apply(member, key, work), self._frozen)

    def _delete_workload(self, member: Member, key: Key, work: Obj) -> None:
        member.delete(*key)
        self._built.pop(key, None)
        self._applied.pop((member.name, *key), None)
        self.status.forget(member.name, key)
        released = clone(work)
        released["metadata"]["finalizers"] = [
            f for f in work["metadata"].get("finalizers") or [] if f != EXECUTION_FINALIZER
        ]
        self.store.update(WORK, released, subresource="all", validate=False, check_rv=False)
        log.info("member copy of %s/%s deleted from %s", *key, member.name)

    def _apply(self, member: Member, key: Key, work: Obj) -> Obj:
        """Creates or updates the member's copy from the Work; the Work as stored after."""
        run = member.runs.get(key)
        # The generation moves with the Work's spec only (status is a subresource).
        stamp = (run.state.uid if run else "", int(work["metadata"].get("generation", 1)))
        if run is not None and self._applied.get((member.name, *key)) == stamp:
            return work
        refused = self.sb.faults.member_refusal(member.name, *key)
        if refused is not None:
            self._waiting.add(key)  # the execution controller requeues the Work
            return self._refused(member, key, work, refused)
        if run is None and (member.name, *key) in self._applied:
            log.info("member %s lost %s/%s: re-created from its Work", member.name, *key)
        member.apply(clone(work["spec"]["workload"]["manifests"][0]))
        run = member.runs.get(key)
        self._applied[(member.name, *key)] = (
            run.state.uid if run else "",
            int(work["metadata"].get("generation", 1)),
        )
        applied = condition(work.get("status") or {}, "Applied")
        if applied is None or applied.get("status") != "True":
            new = clone(work)
            set_condition(
                new.setdefault("status", {}),
                {
                    "type": "Applied",
                    "status": "True",
                    "reason": "AppliedSuccessful",
                    "message": "Manifest has been successfully applied",
                },
            )
            work = self.store.update(
                WORK, new, subresource="status", validate=False, check_rv=False
            )
        return work

    def _refused(self, member: Member, key: Key, work: Obj, error: str) -> Obj:
        """The member's API refused the copy (`syncToClusters` in
        `pkg/controllers/execution/execution_controller.go`): the Work's `Applied` condition
        is False, reason `AppliedFailed`, with the member's error, and a `SyncFailed` Warning
        goes on the resource template and on the Work. A copy already running stays."""
        new = clone(work)
        message = f"Failed to apply all manifests (0/1): {error}"
        changed = set_condition(
            new.setdefault("status", {}),
            {"type": "Applied", "status": "False", "reason": "AppliedFailed", "message": message},
        )
        if not changed:
            return work
        work = self.store.update(WORK, new, subresource="status", validate=False, check_rv=False)
        wf = self.store.find(WORKFLOW, *key)
        if wf is not None:
            self.events.record(
                wf,
                "Warning",
                "SyncFailed",
                f"Failed to create or update resource({key[0]}/{key[1]}) in member "
                f"cluster({member.name}): {error}",
                "execution-controller",
            )
        self.events.record(
            work,
            "Warning",
            "SyncFailed",
            f"Failed to sync work({work['metadata']['namespace']}/{work['metadata']['name']}) "
            f"to cluster({member.name}), err: {error}",
            "execution-controller",
        )
        log.info("member %s refused %s/%s: %s", member.name, *key, error)
        return work
