"""Karmada's control plane, simulated: admission webhooks, policy matching, scheduling,
ResourceBindings, overrides, propagation to members and status reflection."""

from __future__ import annotations

import base64
import json
import logging
import re
import ssl
import time
import uuid
from typing import TYPE_CHECKING, Any

import aiohttp

from sandbox import patch as patchlib
from sandbox import quantity
from sandbox.argo import Member, workflow_requests
from sandbox.errors import ApiError
from sandbox.resources import (
    CLUSTER,
    CLUSTER_OVERRIDE_POLICY,
    CLUSTER_PROPAGATION_POLICY,
    MUTATING_WEBHOOK,
    NAMESPACE,
    OVERRIDE_POLICY,
    PROPAGATION_POLICY,
    RESOURCE_BINDING,
    WORKFLOW,
    ResourceType,
)
from sandbox.selectors import match_field_selector, match_label_selector
from sandbox.store import Event, Obj, clone, labels_of, now_iso

if TYPE_CHECKING:
    from sandbox.core import Sandbox

log = logging.getLogger("sandbox.karmada")

PP_NAME = "propagationpolicy.karmada.io/name"
PP_NAMESPACE = "propagationpolicy.karmada.io/namespace"
CPP_NAME = "clusterpropagationpolicy.karmada.io/name"
APPLIED_OVERRIDES = "policy.karmada.io/applied-overrides"
FULL_PASS_EVERY_S = 5.0
NOT_READY_TAINT = {"key": "cluster.karmada.io/not-ready", "effect": "NoSchedule"}


# -- admission webhooks ------------------------------------------------------------------
class Webhooks:
    def __init__(self, sandbox: Sandbox) -> None:
        self.sb = sandbox
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _session_get(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    @staticmethod
    def _rule_matches(rule: dict[str, Any], rtype: ResourceType) -> bool:
        def has(key: str, value: str) -> bool:
            vals = rule.get(key) or []
            return "*" in vals or value in vals

        return (
            has("operations", "CREATE")
            and has("apiGroups", rtype.group)
            and has("apiVersions", rtype.version)
            and has("resources", rtype.plural)
        )

    async def admit(self, rtype: ResourceType, obj: Any, namespace: str | None) -> Obj:
        if not isinstance(obj, dict):
            raise ApiError.bad_request("the body must be a JSON object")
        obj = clone(obj)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError.bad_request("metadata must be an object")
        if rtype.namespaced and namespace:
            meta.setdefault("namespace", namespace)
        if not meta.get("name") and meta.get("generateName"):
            # The name is given before admission, so that webhooks see the final name.
            meta["name"] = str(meta["generateName"]) + uuid.uuid4().hex[:5]
        store = self.sb.store
        configs = store.list_objects(MUTATING_WEBHOOK)
        if not configs:
            return obj
        ns_labels: dict[str, str] = {}
        if meta.get("namespace"):
            ns_obj = store.find(NAMESPACE, None, meta["namespace"])
            ns_labels = labels_of(ns_obj) if ns_obj else {}
            ns_labels.setdefault("kubernetes.io/metadata.name", meta["namespace"])
        for config in configs:
            for hook in config.get("webhooks") or []:
                if not any(self._rule_matches(r, rtype) for r in hook.get("rules") or []):
                    continue
                if not match_label_selector(hook.get("objectSelector"), labels_of(obj)):
                    continue
                if rtype.namespaced and not match_label_selector(
                    hook.get("namespaceSelector"), ns_labels
                ):
                    continue
                obj = await self._call(hook, rtype, obj)
        return obj

    async def _call(self, hook: dict[str, Any], rtype: ResourceType, obj: Obj) -> Obj:
        name = hook.get("name", "")
        url = (hook.get("clientConfig") or {}).get("url")
        policy = hook.get("failurePolicy", "Fail")
        timeout = float(hook.get("timeoutSeconds", 10))
        meta = obj["metadata"]
        uid = str(uuid.uuid4())
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": rtype.group, "version": rtype.version, "kind": rtype.kind},
                "resource": {
                    "group": rtype.group,
                    "version": rtype.version,
                    "resource": rtype.plural,
                },
                "requestKind": {"group": rtype.group, "version": rtype.version, "kind": rtype.kind},
                "requestResource": {
                    "group": rtype.group,
                    "version": rtype.version,
                    "resource": rtype.plural,
                },
                "name": meta.get("name", ""),
                "namespace": meta.get("namespace", ""),
                "operation": "CREATE",
                "userInfo": {"username": "sandbox-admin", "groups": ["system:masters"]},
                "object": obj,
                "oldObject": None,
                "dryRun": False,
                "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
            },
        }
        try:
            if not url:
                raise ValueError(
                    "webhook has no clientConfig.url (service references "
                    "cannot be resolved from karmada-apiserver)"
                )
            ssl_ctx: ssl.SSLContext | bool = not url.startswith("https")
            async with self._session_get().post(
                url, json=review, timeout=aiohttp.ClientTimeout(total=timeout), ssl=ssl_ctx
            ) as resp:
                if resp.status != 200:
                    raise ValueError(f"webhook answered HTTP {resp.status}")
                answer = await resp.json(content_type=None)
            response = answer.get("response") or {}
            if response.get("uid") not in (None, uid):
                raise ValueError("webhook response uid does not match the request")
        except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError) as exc:
            if policy == "Ignore":
                log.info("webhook %s failed (%s); failurePolicy Ignore", name, exc or "timeout")
                return obj
            raise ApiError(
                500,
                "InternalError",
                f'Internal error occurred: failed calling webhook "{name}": {exc or "timeout"}',
            ) from exc
        if not response.get("allowed", False):
            status = response.get("status") or {}
            raise ApiError(
                int(status.get("code") or 400),
                status.get("reason") or "BadRequest",
                f'admission webhook "{name}" denied the request: {status.get("message", "")}',
            )
        if response.get("patch"):
            try:
                ops = json.loads(base64.b64decode(response["patch"]))
            except ValueError as exc:
                raise ApiError(
                    500, "InternalError", f'webhook "{name}" returned an invalid patch: {exc}'
                ) from exc
            patched = patchlib.json_patch(obj, ops)
            if isinstance(patched, dict):
                obj = patched
        return obj


# -- policy matching -----------------------------------------------------------------------
def _selector_precision(sel: dict[str, Any], obj: Obj, api_version: str, kind: str) -> int:
    """How precisely one resourceSelector matches obj: -1 no match, then Karmada's order:
    name match 3, labelSelector match 2, apiVersion/kind only 1."""
    meta = obj["metadata"]
    if sel.get("apiVersion") != api_version or sel.get("kind") != kind:
        return -1
    if sel.get("namespace") and sel["namespace"] != meta.get("namespace"):
        return -1
    if sel.get("name"):
        return 3 if sel["name"] == meta["name"] else -1
    if sel.get("labelSelector") is not None:
        return 2 if match_label_selector(sel["labelSelector"], labels_of(obj)) else -1
    return 1


def policy_precision(policy: Obj, obj: Obj) -> int:
    best = -1
    for sel in (policy.get("spec") or {}).get("resourceSelectors") or []:
        best = max(best, _selector_precision(sel, obj, obj["apiVersion"], obj["kind"]))
    return best


def choose_policy(store_pps: list[Obj], store_cpps: list[Obj], obj: Obj) -> Obj | None:
    def pick(policies: list[Obj]) -> Obj | None:
        ranked = []
        for p in policies:
            if p["metadata"].get("deletionTimestamp"):
                continue
            prec = policy_precision(p, obj)
            if prec >= 0:
                prio = int((p.get("spec") or {}).get("priority") or 0)
                ranked.append((-prio, -prec, p["metadata"]["name"], p))
        ranked.sort(key=lambda r: r[:3])
        return ranked[0][3] if ranked else None

    ns = obj["metadata"].get("namespace")
    return pick([p for p in store_pps if p["metadata"].get("namespace") == ns]) or pick(store_cpps)


# -- cluster selection ---------------------------------------------------------------------
def cluster_fields(cluster: Obj) -> dict[str, str]:
    spec = cluster.get("spec") or {}
    return {k: str(spec.get(k, "")) for k in ("provider", "region", "zone")}


def affinity_matches(aff: dict[str, Any] | None, cluster: Obj) -> bool:
    if not aff:
        return True
    name = cluster["metadata"]["name"]
    if name in (aff.get("exclude") or []):
        return False
    if aff.get("clusterNames") and name not in aff["clusterNames"]:
        return False
    if aff.get("labelSelector") is not None and not match_label_selector(
        aff["labelSelector"], labels_of(cluster)
    ):
        return False
    return match_field_selector(aff.get("fieldSelector"), cluster_fields(cluster))


def cluster_ready(cluster: Obj) -> bool:
    for cond in (cluster.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def tolerated(cluster: Obj, tolerations: list[dict[str, Any]]) -> bool:
    for taint in (cluster.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        ok = False
        for tol in tolerations:
            if tol.get("effect") and tol["effect"] != taint.get("effect"):
                continue
            if tol.get("operator") == "Exists":
                ok = not tol.get("key") or tol["key"] == taint.get("key")
            else:
                ok = tol.get("key") == taint.get("key") and tol.get("value", "") == taint.get(
                    "value", ""
                )
            if ok:
                break
        if not ok:
            return False
    return True


# -- overrides -----------------------------------------------------------------------------
_IMAGE_RE = re.compile(
    r"^(?:(?P<registry>[^/]+\.[^/]+|[^/]+:\d+|localhost)/)?"
    r"(?P<repository>[^:@]+)(?::(?P<tag>[^@]+))?(?P<digest>@.+)?$"
)


def override_image(image: str, overrider: dict[str, Any]) -> str:
    m = _IMAGE_RE.match(image)
    if not m:
        return image
    parts = {k: m.group(k) or "" for k in ("registry", "repository", "tag")}
    digest = m.group("digest") or ""
    component = str(overrider.get("component", "")).lower()
    op = overrider.get("operator", "replace")
    value = str(overrider.get("value", ""))
    if component in parts:
        if op == "replace":
            parts[component] = value
        elif op == "add":
            parts[component] = parts[component] + value
        elif op == "remove":
            parts[component] = ""
    out = parts["repository"]
    if parts["registry"]:
        out = f"{parts['registry']}/{out}"
    if parts["tag"]:
        out = f"{out}:{parts['tag']}"
    return out + digest


def apply_overriders(obj: Obj, overriders: dict[str, Any]) -> Obj:
    for op in overriders.get("plaintext") or []:
        kind = op.get("operator", "replace")
        patched = patchlib.json_patch(
            obj, [{"op": kind, "path": op["path"], "value": op.get("value")}]
        )
        obj = patched if isinstance(patched, dict) else obj
    for io in overriders.get("imageOverrider") or []:
        pred = (io.get("predicate") or {}).get("path")
        paths = (
            [pred]
            if pred
            else [
                f"/spec/templates/{i}/{kind}/image"
                for i, t in enumerate((obj.get("spec") or {}).get("templates") or [])
                for kind in ("container", "script")
                if isinstance(t.get(kind), dict) and t[kind].get("image")
            ]
        )
        for path in paths:
            try:
                image = patchlib.get_pointer(obj, path)
            except ApiError:
                continue
            if isinstance(image, str):
                patched = patchlib.json_patch(
                    obj, [{"op": "replace", "path": path, "value": override_image(image, io)}]
                )
                obj = patched if isinstance(patched, dict) else obj
    for field_name, key in (("labelsOverrider", "labels"), ("annotationsOverrider", "annotations")):
        for lo in overriders.get(field_name) or []:
            target = obj["metadata"].setdefault(key, {})
            for k, v in (lo.get("value") or {}).items():
                if lo.get("operator") == "remove":
                    target.pop(k, None)
                else:
                    target[k] = v
    return obj


class Karmada:
    def __init__(self, sandbox: Sandbox) -> None:
        self.sb = sandbox
        self.store = sandbox.store
        self.webhooks = Webhooks(sandbox)
        # (namespace, name) -> (uid, resourceVersion) of the template last propagated.
        self._propagated: dict[tuple[str, str], tuple[str, str]] = {}
        # RB key -> member status version last reflected.
        self._reflected: dict[tuple[str, str], int] = {}
        self._frozen: set[str] = set()
        # Workflows to look at in the next pass. Passes touch only these (and the ones waiting
        # for a cluster), so a day of finished workflows costs nothing; a full pass now and
        # then catches anything an event did not say.
        self._dirty: set[tuple[str, str]] = set()
        self._unscheduled: set[tuple[str, str]] = set()
        self._all_dirty = True
        self._last_full = 0.0
        self.store.listeners.append(self._on_event)

    def reset(self) -> None:
        self._propagated.clear()
        self._reflected.clear()
        self._unscheduled.clear()
        self.mark_all()

    def mark(self, key: tuple[str, str]) -> None:
        self._dirty.add(key)

    def mark_all(self) -> None:
        self._all_dirty = True

    def _on_event(self, ev: Event) -> None:
        rtype = ev.rtype
        if rtype is WORKFLOW:
            meta = ev.obj["metadata"]
            self._dirty.add((meta.get("namespace", ""), meta["name"]))
        elif rtype is RESOURCE_BINDING:
            res = (ev.obj.get("spec") or {}).get("resource") or {}
            if res.get("kind") == "Workflow":
                self._dirty.add((ev.obj["metadata"].get("namespace", ""), res.get("name", "")))
        elif rtype is PROPAGATION_POLICY or rtype is CLUSTER_PROPAGATION_POLICY:
            self._all_dirty = True

    # -- members ---------------------------------------------------------------------------
    def _sync_members(self) -> dict[str, Obj]:
        clusters = {c["metadata"]["name"]: c for c in self.store.all(CLUSTER)}
        for name in list(self.sb.members):
            if name not in clusters:
                self.sb.members.pop(name).clear()
        for name, cluster in clusters.items():
            if name not in self.sb.members:
                site = self.sb.sites.get(name)
                self.sb.members[name] = Member.for_cluster(self.sb, name, site, cluster)
        return clusters

    def _cluster_status(self, member: Member, cluster: Obj) -> dict[str, Any]:
        old = cluster.get("status") or {}
        ready = not self.sb.faults.site_not_ready(member.name)
        prev = next((c for c in old.get("conditions") or [] if c.get("type") == "Ready"), None)
        status_s = "True" if ready else "False"
        transition = (
            prev["lastTransitionTime"] if prev and prev.get("status") == status_s else now_iso()
        )
        cond = {
            "type": "Ready",
            "status": status_s,
            "reason": "ClusterReady" if ready else "ClusterNotReady",
            "message": "cluster is healthy and ready to accept workloads"
            if ready
            else "cluster is not reachable or not healthy",
            "lastTransitionTime": transition,
        }
        return {
            "kubernetesVersion": member.kubernetes_version,
            "apiEnablements": [
                {
                    "groupVersion": "argoproj.io/v1alpha1",
                    "resources": [{"name": "workflows", "kind": "Workflow"}],
                }
            ],
            "conditions": [cond],
            "nodeSummary": {
                "totalNum": len(member.nodes),
                "readyNum": len(member.nodes) if ready else 0,
            },
            "resourceSummary": {
                "allocatable": quantity.fmt_map(member.capacity),
                "allocating": quantity.fmt_map(member.pending_requests()),
                "allocated": quantity.fmt_map(member.allocated),
            },
        }

    def _update_clusters(self, clusters: dict[str, Obj]) -> None:
        for name, cluster in clusters.items():
            member = self.sb.members[name]
            if self.sb.faults.site_unreachable(name):
                continue
            status = self._cluster_status(member, cluster)
            not_ready = not cluster_ready({"status": status})
            taints = list((cluster.get("spec") or {}).get("taints") or [])
            has_taint = any(t.get("key") == NOT_READY_TAINT["key"] for t in taints)
            if status != cluster.get("status") or has_taint != not_ready:
                new = clone(cluster)
                new["status"] = status
                if not_ready and not has_taint:
                    new.setdefault("spec", {})["taints"] = [
                        *taints,
                        dict(NOT_READY_TAINT, timeAdded=now_iso()),
                    ]
                elif has_taint and not not_ready:
                    new["spec"]["taints"] = [
                        t for t in taints if t.get("key") != NOT_READY_TAINT["key"]
                    ]
                self.store.update(CLUSTER, new, subresource="all", validate=False, check_rv=False)

    # -- scheduling ------------------------------------------------------------------------
    def schedule(self, wf: Obj, placement: dict[str, Any]) -> tuple[str | None, str]:
        clusters = sorted(self.store.all(CLUSTER), key=lambda c: c["metadata"]["name"])
        req = workflow_requests(wf)
        tolerations = placement.get("clusterTolerations") or []
        groups = placement.get("clusterAffinities") or [placement.get("clusterAffinity")]
        reasons: dict[str, str] = {}
        for aff in groups:
            feasible = []
            for c in clusters:
                name = c["metadata"]["name"]
                member = self.sb.members.get(name)
                if not affinity_matches(aff, c):
                    reasons.setdefault(
                        name, "cluster(s) did not match the placement cluster affinity constraint"
                    )
                elif not cluster_ready(c):
                    reasons[name] = "cluster(s) were not ready"
                elif not tolerated(c, tolerations):
                    reasons[name] = "cluster(s) had untolerated taint"
                elif member is None or not member.fits(req):
                    reasons[name] = "cluster(s) did not have enough resource"
                else:
                    feasible.append((member.free_fraction(), name))
            if feasible:
                # One cluster per Workflow (the portal's contract; see README for why
                # duplication is not simulated): the one with the most free CPU.
                feasible.sort(key=lambda f: (-f[0], f[1]))
                return feasible[0][1], ""
        counts: dict[str, int] = {}
        for r in reasons.values():
            counts[r] = counts.get(r, 0) + 1
        detail = ", ".join(f"{n} {r}" for r, n in sorted(counts.items()))
        return None, f"0/{len(clusters)} clusters are available: {detail}."

    # -- the loop --------------------------------------------------------------------------
    def reconcile(self) -> None:
        clusters = self._sync_members()
        self._update_clusters(clusters)
        # Sites whose status cannot reach the control plane right now; computed once per pass
        # because the loop below may run over many Workflows.
        frozen = {
            name
            for name in clusters
            if self.sb.faults.site_unreachable(name) or self.sb.faults.site_not_ready(name)
        }
        if frozen != self._frozen:
            # A site came back (or went away): its workflows' status must flow (or stop).
            self._all_dirty = True
        self._frozen = frozen
        now = time.monotonic()
        if self._all_dirty or now - self._last_full > FULL_PASS_EVERY_S:
            self._all_dirty = False
            self._last_full = now
            keys = {
                (w["metadata"]["namespace"], w["metadata"]["name"])
                for w in self.store.all(WORKFLOW)
            }
            keys |= {
                (rb["metadata"]["namespace"], (rb["spec"].get("resource") or {}).get("name", ""))
                for rb in self.store.all(RESOURCE_BINDING)
                if (rb["spec"].get("resource") or {}).get("kind") == "Workflow"
            }
            for member in self.sb.members.values():
                keys |= set(member.runs)
        else:
            keys = self._dirty | self._unscheduled
        self._dirty = set()
        if not keys:
            return
        pps = list(self.store.all(PROPAGATION_POLICY))
        cpps = list(self.store.all(CLUSTER_PROPAGATION_POLICY))
        for key in sorted(keys):
            self._reconcile_one(key, pps, cpps)

    def _reconcile_one(self, key: tuple[str, str], pps: list[Obj], cpps: list[Obj]) -> None:
        wf = self.store.find(WORKFLOW, key[0], key[1])
        rb = self.store.find(RESOURCE_BINDING, key[0], f"{key[1]}-workflow")
        if rb is not None and (rb["spec"].get("resource") or {}).get("kind") != "Workflow":
            rb = None
        if wf is None:
            self._unscheduled.discard(key)
            if rb is not None:
                self._remove(key, rb)
            else:
                for member in self.sb.members.values():
                    member.delete(*key)
                self._propagated.pop(key, None)
            return
        meta = wf["metadata"]
        if rb is not None and rb["spec"]["resource"].get("uid") != meta["uid"]:
            self._remove(key, rb)
            rb = None
        if rb is None:
            rb = self._bind(wf, pps, cpps)
            if rb is None:
                self._unscheduled.discard(key)
                return
            wf = self.store.find(WORKFLOW, key[0], key[1]) or wf
        if not rb["spec"].get("clusters"):
            rb = self._schedule_binding(wf, rb)
            if not rb["spec"].get("clusters"):
                self._unscheduled.add(key)
                return
        self._unscheduled.discard(key)
        cluster = rb["spec"]["clusters"][0]["name"]
        self._propagate(wf, rb, cluster)
        self._reflect(wf, rb, cluster)

    def _remove(self, key: tuple[str, str], rb: Obj) -> None:
        for member in self.sb.members.values():
            member.delete(*key)
        self._propagated.pop(key, None)
        rb_key = (rb["metadata"]["namespace"], rb["metadata"]["name"])
        self._reflected.pop(rb_key, None)
        if self.store.find(RESOURCE_BINDING, *rb_key) is not None:
            self.store.delete(RESOURCE_BINDING, *rb_key)

    def _bind(self, wf: Obj, pps: list[Obj], cpps: list[Obj]) -> Obj | None:
        policy = choose_policy(pps, cpps, wf)
        if policy is None:
            return None
        meta = wf["metadata"]
        annotations: dict[str, str]
        if policy["kind"] == "PropagationPolicy":
            annotations = {
                PP_NAME: policy["metadata"]["name"],
                PP_NAMESPACE: policy["metadata"]["namespace"],
            }
        else:
            annotations = {CPP_NAME: policy["metadata"]["name"]}
        if any((meta.get("annotations") or {}).get(k) != v for k, v in annotations.items()):
            marked = clone(wf)
            marked["metadata"].setdefault("annotations", {}).update(annotations)
            self.store.update(WORKFLOW, marked, validate=False, check_rv=False)
        rb: Obj = {
            "apiVersion": RESOURCE_BINDING.api_version,
            "kind": RESOURCE_BINDING.kind,
            "metadata": {
                "name": f"{meta['name']}-workflow",
                "namespace": meta["namespace"],
                "labels": {
                    k.replace("/name", "/permanent-id").replace("/namespace", "/ns"): v
                    for k, v in annotations.items()
                    if k.endswith("/name")
                },
                "annotations": annotations,
                "ownerReferences": [
                    {
                        "apiVersion": WORKFLOW.api_version,
                        "kind": "Workflow",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                "resource": {
                    "apiVersion": WORKFLOW.api_version,
                    "kind": "Workflow",
                    "namespace": meta["namespace"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "resourceVersion": meta["resourceVersion"],
                },
                "placement": clone((policy.get("spec") or {}).get("placement") or {}),
                "schedulerName": (policy.get("spec") or {}).get(
                    "schedulerName", "default-scheduler"
                ),
                "conflictResolution": "Abort",
            },
        }
        req = workflow_requests(wf)
        if req:
            rb["spec"]["replicaRequirements"] = {"resourceRequest": quantity.fmt_map(req)}
        created = self.store.create(RESOURCE_BINDING, rb, validate=False)
        return created

    def _schedule_binding(self, wf: Obj, rb: Obj) -> Obj:
        target, why = self.schedule(wf, rb["spec"].get("placement") or {})
        new = clone(rb)
        status = new.setdefault("status", {})
        if target is None:
            cond = {
                "type": "Scheduled",
                "status": "False",
                "reason": "NoClusterFit",
                "message": why,
            }
        else:
            new["spec"]["clusters"] = [{"name": target}]
            cond = {
                "type": "Scheduled",
                "status": "True",
                "reason": "Success",
                "message": "Binding has been scheduled successfully.",
            }
            status["schedulerObservedGeneration"] = new["metadata"].get("generation", 1) + 1
        prev = _condition(status, "Scheduled")
        if prev is not None and {k: prev.get(k) for k in cond} == cond:
            return rb
        cond["lastTransitionTime"] = now_iso()
        status["conditions"] = [
            c for c in status.get("conditions") or [] if c.get("type") != "Scheduled"
        ] + [cond]
        wf_name = f"{wf['metadata']['namespace']}/{wf['metadata']['name']}"
        if target is None:
            log.info("workflow %s unschedulable: %s", wf_name, why)
        else:
            log.info(
                "workflow %s scheduled to %s (policy %s)",
                wf_name,
                target,
                (rb["metadata"].get("annotations") or {}).get(PP_NAME)
                or (rb["metadata"].get("annotations") or {}).get(CPP_NAME),
            )
        return self.store.update(
            RESOURCE_BINDING, new, subresource="all", validate=False, check_rv=False
        )

    def _member_copy(self, wf: Obj, cluster: str) -> Obj:
        meta = wf["metadata"]
        obj: Obj = {
            "apiVersion": wf["apiVersion"],
            "kind": wf["kind"],
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "labels": dict(meta.get("labels") or {}),
                "annotations": dict(meta.get("annotations") or {}),
            },
            "spec": clone(wf.get("spec") or {}),
        }
        obj["metadata"]["labels"]["karmada.io/managed"] = "true"
        applied = []
        cluster_obj = self.store.find(CLUSTER, None, cluster) or {"metadata": {"name": cluster}}
        policies = sorted(
            self.store.all(CLUSTER_OVERRIDE_POLICY), key=lambda p: p["metadata"]["name"]
        ) + sorted(
            (
                p
                for p in self.store.all(OVERRIDE_POLICY)
                if p["metadata"].get("namespace") == meta["namespace"]
            ),
            key=lambda p: p["metadata"]["name"],
        )
        for policy in policies:
            spec = policy.get("spec") or {}
            if spec.get("resourceSelectors") and policy_precision(policy, wf) < 0:
                continue
            rules = list(spec.get("overrideRules") or [])
            if spec.get("overriders"):
                rules.append(
                    {"targetCluster": spec.get("targetCluster"), "overriders": spec["overriders"]}
                )
            for rule in rules:
                if not affinity_matches(rule.get("targetCluster"), cluster_obj):
                    continue
                try:
                    obj = apply_overriders(obj, rule.get("overriders") or {})
                except ApiError as exc:
                    log.warning("override %s failed: %s", policy["metadata"]["name"], exc.message)
                    continue
                applied.append(policy["metadata"]["name"])
        if applied:
            obj["metadata"]["annotations"][APPLIED_OVERRIDES] = json.dumps(
                [{"policyName": n} for n in applied]
            )
        return obj

    def _propagate(self, wf: Obj, rb: Obj, cluster: str) -> None:
        meta = wf["metadata"]
        key = (meta["namespace"], meta["name"])
        # Any change to the template (spec, labels, annotations) changes its resourceVersion;
        # its status is never written on the control plane, so nothing else does.
        stamp = (meta["uid"], str(meta["resourceVersion"]))
        if self._propagated.get(key) == stamp:
            return
        member = self.sb.members.get(cluster)
        if member is None:
            return
        member.apply(self._member_copy(wf, cluster))
        self._propagated[key] = stamp

    def _reflect(self, wf: Obj, rb: Obj, cluster: str) -> None:
        member = self.sb.members.get(cluster)
        if member is None or cluster in self._frozen:
            return
        meta = wf["metadata"]
        rb_key = (rb["metadata"]["namespace"], rb["metadata"]["name"])
        version = member.status_version(meta["namespace"], meta["name"])
        # Reflecting always writes FullyApplied, so an unchanged version means nothing to do.
        if version is None or self._reflected.get(rb_key) == version:
            return
        applied_before = _condition(rb.get("status") or {}, "FullyApplied") is not None
        member_status = member.status_of(meta["namespace"], meta["name"]) or {}
        phase = member_status.get("phase")
        health = "Unhealthy" if not phase or phase in ("Error", "Failed") else "Healthy"
        new = clone(rb)
        status = new.setdefault("status", {})
        status["aggregatedStatus"] = [
            {
                "clusterName": cluster,
                "applied": True,
                "health": health,
                "status": member_status,
            }
        ]
        if not applied_before:
            status["conditions"] = [
                *(status.get("conditions") or []),
                {
                    "type": "FullyApplied",
                    "status": "True",
                    "reason": "FullyAppliedSuccess",
                    "message": "All works have been successfully applied",
                    "lastTransitionTime": now_iso(),
                },
            ]
        self.store.update(RESOURCE_BINDING, new, subresource="all", validate=False, check_rv=False)
        self._reflected[rb_key] = version


def _condition(status: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == ctype), None)
