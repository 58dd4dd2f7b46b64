"""The state of one member Workflow: lifecycle, nodes, pods against the quota, and the
status Argo would write."""

from __future__ import annotations

import asyncio
import base64
import collections
import gzip
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from sandbox.argo.expr import DONE, as_param, fnv32a, with_defaults
from sandbox.argo.site import SiteExecution
from sandbox.store import Obj, clone, now_iso

Parent = str | list[str] | None

# The name of the member's ResourceQuota on pods, as its refusals quote it.
POD_QUOTA = "pods-per-workflow"


class StepFailed(Exception):
    pass


@dataclass
class Ctx:
    """What a template invocation sees: its boundary and the variables in scope."""

    scope: dict[str, Any]
    boundary: str | None
    attempt: int = 0


# maxK8sResourceNameLength - k8sNamingHashLength - 1 (workflow/util/pod_name.go).
POD_PREFIX_MAX = 253 - 10 - 1
POD_NAME_FORMAT = "workflows.argoproj.io/pod-name-format"


class Capacity(Protocol):
    """The member's capacity as a pod takes it: a lease on a node for the pod's requests,
    waited for while the member is full."""

    async def acquire(self, req: dict[str, float], on_wait: Callable[[str], None]) -> int: ...

    def release(self, lease_id: int) -> None: ...

    def node_of(self, lease_id: int) -> str: ...


class Execute(Protocol):
    """A template invoked as a node of the Workflow (`Templates.execute`); the graph walker
    and the hooks call it for each step, task and hook."""

    async def __call__(
        self,
        tmpl_name: str,
        args: dict[str, str],
        art_args: dict[str, Any],
        name: str,
        display: str,
        ctx: Ctx,
        parent: Parent,
        inline: dict[str, Any] | None = None,
    ) -> dict[str, Any]: ...


class RunState:
    """One member Workflow's state: its object, its nodes, its phase and what it waits on,
    and the Argo-shaped status written from them. The parts that run it (`workflow.py`)
    read and write it; nothing here runs a template."""

    def __init__(self, member: SiteExecution, capacity: Capacity, obj: Obj) -> None:
        self.member = member
        self.capacity = capacity
        self.sb = member.sb
        self.obj = obj
        meta = obj["metadata"]
        self.name: str = meta["name"]
        self.namespace: str = meta["namespace"]
        # The member apiserver's uid of this object: a new one for every create, as Kubernetes
        # does, so a copy Karmada re-creates is told apart from the one deleted (Python's id()
        # of the run is reused once the old one is freed).
        self.uid = str(uuid.uuid4())
        self.nodes: dict[str, dict[str, Any]] = {}
        self.phase = "Pending"
        self.started_at: str | None = None
        self.finished_at: str | None = None
        self.message = ""
        self.outputs: dict[str, Any] = {}
        self.version = 1
        # status.artifactRepositoryRef once the repository is resolved (repository.py).
        self.repository_ref: dict[str, Any] | None = None
        self._rendered: tuple[int, Obj] | None = None
        self.main: asyncio.Task[dict[str, Any]] | None = None
        self.shutdown: str | None = None
        self.deadline_exceeded = False
        self.resumes: dict[str, tuple[asyncio.Event, dict[str, Any]]] = {}
        # Pods of this Workflow that exist (created, not yet ended), against the member's quota.
        self.pods_live = 0
        self._pod_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._change_waiters: set[asyncio.Future[None]] = set()
        self.unsuspended = asyncio.Event()
        spec = obj.get("spec") or {}
        if not spec.get("suspend"):
            self.unsuspended.set()
        par = spec.get("parallelism")
        self.parallel = asyncio.Semaphore(int(par)) if par else None
        defaults = spec.get("templateDefaults")
        self.templates = {
            t.get("name"): with_defaults(t, defaults) for t in spec.get("templates") or []
        }
        self.global_scope = global_scope(obj)

    # -- lifecycle ----------------------------------------------------------------------------
    def touch(self) -> None:
        self.version += 1
        self.sb.karmada.mark((self.namespace, self.name))
        self.sb.poke()
        for waiter in self._change_waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait_change(self, task: asyncio.Future[Any], timeout: float) -> None:
        """Until the workflow changes, `task` ends or `timeout` passes: Argo's controller
        reconciles on every change of a workflow's pods, so what it evaluates then (hooks) sees
        each phase a node goes through, however short."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._change_waiters.add(waiter)
        try:
            await asyncio.wait({task, waiter}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._change_waiters.discard(waiter)
            waiter.cancel()

    def update(self, obj: Obj) -> None:
        self.obj = obj
        spec = obj.get("spec") or {}
        if spec.get("suspend"):
            self.unsuspended.clear()
        else:
            self.unsuspended.set()
        shutdown = spec.get("shutdown")
        if (
            shutdown in ("Stop", "Terminate")
            and self.shutdown is None
            and self.phase in ("Pending", "Running")
        ):
            self.shutdown = shutdown
            if self.main is not None and not self.main.done():
                self.main.cancel()
        self.touch()

    def exceed_deadline(self) -> None:
        """`activeDeadlineSeconds` passed: the run is terminated as Failed."""
        if self.main is not None and not self.main.done():
            self.deadline_exceeded = True
            self.shutdown = "Terminate"
            self.main.cancel()

    def shutdown_message(self) -> str:
        if self.deadline_exceeded:
            return "Step exceeded its deadline"
        return (
            f"workflow shutdown with strategy:  {self.shutdown}"
            if self.shutdown
            else "workflow deleted"
        )

    def resume(self, node: str | None) -> int:
        count = 0
        for node_id, (event, _values) in self.resumes.items():
            n = self.nodes.get(node_id) or {}
            if node in (None, n.get("name"), n.get("displayName"), node_id) and not event.is_set():
                event.set()
                count += 1
        if not self.unsuspended.is_set():
            self.unsuspended.set()
            count += 1
        return count

    def annotation(self, tmpl: dict[str, Any], name: str) -> str | None:
        key = self.sb.config.annotation(name)
        value = ((tmpl.get("metadata") or {}).get("annotations") or {}).get(key)
        if value is None:
            value = (self.obj["metadata"].get("annotations") or {}).get(key)
        return None if value is None else str(value)

    # -- pods against the member's quota ----------------------------------------------------
    async def admit_pod(self, node: dict[str, Any]) -> None:
        """Create the node's pod as kube-apiserver's ResourceQuota admission allows it
        (staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go:
        ``exceeded quota: %s, requested: %s, used: %s, limited: %s``, a 403 Forbidden). The
        member's quota on `pods` is counted per Workflow (fleet file: `podsPerWorkflow`).

        Argo takes the refusal as transient (``isExceededQuotaErr`` in util/errors/errors.go):
        ``requeueIfTransientErr`` in workflow/controller/operator.go marks the node Pending with
        the error as its message and tries again at its next reconcile, for as long as it takes.
        The sandbox does the same, creating the pod as soon as one of the Workflow's pods ends
        (oldest refusal first)."""
        limit = self.member.site.pods_per_workflow
        if self.pods_live < limit and not self._pod_waiters:
            self.pods_live += 1
            return
        node["phase"] = "Pending"
        node["message"] = (
            f'pods "{self.pod_name(node)}" is forbidden: exceeded quota: {POD_QUOTA}, '
            f"requested: pods=1, used: pods={self.pods_live}, limited: pods={limit}"
        )
        self.touch()
        slot: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pod_waiters.append(slot)
        try:
            await slot
        except asyncio.CancelledError:
            # A cancelled slot stays in the queue (``pod_ended`` skips it): removing each one
            # would cost a stop of thousands of refused pods their square.
            if slot.done() and not slot.cancelled():
                self.pod_ended()  # the slot was handed over: pass it on
            raise
        node.pop("message", None)
        self.touch()

    def pod_ended(self) -> None:
        """The pod is gone (ended or killed): its place goes to the oldest refused pod."""
        while self._pod_waiters:
            slot = self._pod_waiters.popleft()
            if not slot.done():
                slot.set_result(None)
                return
        self.pods_live -= 1

    # -- status -------------------------------------------------------------------------------
    def render_status(self) -> Obj:
        if self._rendered is not None and self._rendered[0] == self.version:
            return self._rendered[1]
        pods = [n for n in self.nodes.values() if n["type"] == "Pod"]
        done = sum(1 for n in pods if n["phase"] == "Succeeded")
        status: Obj = {
            "phase": self.phase,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
            "progress": f"{done}/{len(pods)}",
            "nodes": clone(self.nodes),
        }
        if self.message:
            status["message"] = self.message
        if self.outputs:
            status["outputs"] = clone(self.outputs)
        if self.phase in DONE:
            status["conditions"] = [
                {"type": "PodRunning", "status": "False"},
                {"type": "Completed", "status": "True"},
            ]
        else:
            running = any(n["phase"] == "Running" for n in pods)
            status["conditions"] = [
                {"type": "PodRunning", "status": "True" if running else "False"}
            ]
        cpu = sum(n.get("resourcesDuration", {}).get("cpu", 0) for n in pods)
        mem = sum(n.get("resourcesDuration", {}).get("memory", 0) for n in pods)
        status["resourcesDuration"] = {"cpu": cpu, "memory": mem}
        status["artifactRepositoryRef"] = self.repository_ref or {
            "default": True,
            "artifactRepository": {
                "s3": {
                    "bucket": self.member.bucket,
                    "endpoint": self.member.site.artifact_endpoint,
                    # The controller's default repository here: plain HTTP, the nodes'
                    # identity for credentials (sandbox/s3/repositories.py).
                    "region": self.member.site.artifact_region,
                    "insecure": True,
                    "useSDKCreds": True,
                }
            },
        }
        # Argo's controller packs a large status whatever its steps run (packer.go).
        self._pack(status)
        self._rendered = (self.version, status)
        return status

    def _pack(self, status: Obj) -> None:
        """Nodes above the size limit go as `compressedNodes`: base64 of gzipped JSON
        (workflow/packer/packer.go, util/file/fileutil.go)."""
        raw = json.dumps(status["nodes"], separators=(",", ":")).encode()
        if len(raw) > self.member.execution.max_node_status_bytes:
            status["compressedNodes"] = base64.b64encode(gzip.compress(raw)).decode()
            del status["nodes"]

    # -- nodes --------------------------------------------------------------------------------
    def pod_name(self, node: dict[str, Any]) -> str:
        """Argo's ``GeneratePodName`` (workflow/util/pod_name.go) under the member controller's
        ``POD_NAMES``: v1 is the node's id; v2 (the default) ``<workflow>-<template>-<fnv32a
        of the node name>``, the workflow's own name for its root node."""
        if self.member.site.pod_names == "v1":
            return str(node["id"])
        name = str(node["name"])
        if name == self.name:
            return self.name
        template = node.get("templateName") or (node.get("templateRef") or {}).get("template")
        prefix = f"{self.name}-{template}" if template else self.name
        return f"{prefix[:POD_PREFIX_MAX]}-{fnv32a(name)}"

    def pod_name_format(self) -> dict[str, str]:
        """setWfPodNamesAnnotation (workflow/controller/operator.go): the controller records
        on each Workflow it starts which names its pods have."""
        return {POD_NAME_FORMAT: self.member.site.pod_names}

    def node_id(self, name: str) -> str:
        return self.name if name == self.name else f"{self.name}-{fnv32a(name)}"

    def new_node(
        self, name: str, display: str, ntype: str, tmpl_name: str, ctx: Ctx, parent: Parent
    ) -> dict[str, Any]:
        node_id = self.node_id(name)
        node: dict[str, Any] = {
            "id": node_id,
            "name": name,
            "displayName": display,
            "type": ntype,
            "templateName": tmpl_name,
            "templateScope": f"local/{self.name}",
            "phase": "Pending",
            "startedAt": now_iso(),
        }
        if ctx.boundary:
            node["boundaryID"] = ctx.boundary
        self.nodes[node_id] = node
        for pid in [parent] if isinstance(parent, str) else parent or []:
            if pid in self.nodes:
                children = self.nodes[pid].setdefault("children", [])
                if node_id not in children:
                    children.append(node_id)
        self.touch()
        return node

    def finish(self, node: dict[str, Any], phase: str, message: str = "") -> dict[str, Any]:
        node["phase"] = phase
        node["finishedAt"] = now_iso()
        if message:
            node["message"] = message
        if node["type"] == "Pod":
            node["progress"] = "1/1" if phase == "Succeeded" else "0/1"
        self.touch()
        return node


def global_scope(obj: Obj) -> dict[str, Any]:
    """The `workflow.*` variables every template sees (workflow/common/common.go)."""
    meta = obj["metadata"]
    spec = obj.get("spec") or {}
    scope: dict[str, Any] = {
        "workflow.name": meta["name"],
        "workflow.namespace": meta["namespace"],
        "workflow.uid": meta.get("uid", ""),
        "workflow.serviceAccountName": spec.get("serviceAccountName", "default"),
        # RFC 3339, as Argo's GlobalVarWorkflowCreationTimestamp (operator.go).
        "workflow.creationTimestamp": str(meta.get("creationTimestamp") or ""),
    }
    for k, v in (meta.get("labels") or {}).items():
        scope[f"workflow.labels.{k}"] = v
    for k, v in (meta.get("annotations") or {}).items():
        scope[f"workflow.annotations.{k}"] = v
    for p in (spec.get("arguments") or {}).get("parameters") or []:
        if "value" in p:
            scope[f"workflow.parameters.{p['name']}"] = as_param(p["value"])
    # The `.json` forms (workflow/common/common.go: GlobalVarWorkflowParametersJSON ...).
    scope["workflow.labels.json"] = json.dumps(meta.get("labels") or {})
    scope["workflow.annotations.json"] = json.dumps(meta.get("annotations") or {})
    scope["workflow.parameters.json"] = json.dumps(
        (spec.get("arguments") or {}).get("parameters") or []
    )
    return scope
