"""A member cluster: capacity leases and the Workflows it runs."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from sandbox import quantity
from sandbox.argo.site import ArgoHost, SiteExecution
from sandbox.argo.workflow import WorkflowRun
from sandbox.fleet import DEFAULT_CAPACITY, Site
from sandbox.pod import Tail
from sandbox.store import Obj, clone


@dataclass
class Lease:
    req: dict[str, float]
    node: str


@dataclass
class Member(SiteExecution):
    sb: ArgoHost
    name: str
    capacity: dict[str, float]
    baseline: dict[str, float]
    nodes: list[str]
    bucket: str
    kubernetes_version: str
    leases: dict[int, Lease] = field(default_factory=dict)
    waiters: list[tuple[dict[str, float], asyncio.Future[int]]] = field(default_factory=list)
    runs: dict[tuple[str, str], WorkflowRun] = field(default_factory=dict)
    # The runs whose spec has a ttlStrategy: the garbage collector looks at these, not at
    # every run of the member on every tick (20,000 runs of two fan-outs, none with a TTL).
    ttl_keys: set[tuple[str, str]] = field(default_factory=set)
    # Workflows created on the member itself (not propagated): Karmada does not manage them.
    direct: dict[tuple[str, str], WorkflowRun] = field(default_factory=dict)
    objects: dict[tuple[str, str, str], Obj] = field(default_factory=dict)
    logs: OrderedDict[tuple[str, str], Tail] = field(default_factory=OrderedDict)
    _ids: Iterator[int] = field(default_factory=itertools.count)
    _rr: int = 0
    # The leases' requests summed, kept as leases come and go: summing them on every read
    # made each scheduling decision and each waiter's check cost as much as the pods running.
    _leased: dict[str, float] = field(default_factory=dict)

    @classmethod
    def for_cluster(cls, sb: ArgoHost, name: str, site: Site | None, cluster: Obj) -> Member:
        if site is None:
            raw = (cluster["metadata"].get("annotations") or {}).get(
                sb.config.annotation("capacity")
            )
            try:
                cap = quantity.parse_map(json.loads(raw) if raw else DEFAULT_CAPACITY)
            except ValueError:
                cap = quantity.parse_map(DEFAULT_CAPACITY)
            site = Site(name=name, capacity=cap, bucket=f"{name}-artifacts")
        return cls(
            sb=sb,
            name=name,
            capacity=dict(site.capacity),
            baseline=dict(site.baseline),
            nodes=[f"{name}-node-{i}" for i in range(max(site.nodes, 1))],
            bucket=site.bucket,
            kubernetes_version=site.kubernetes_version,
        )

    # capacity -------------------------------------------------------------------------------
    @property
    def allocated(self) -> dict[str, float]:
        out = dict(self.baseline)
        for k, v in self._leased.items():
            out[k] = out.get(k, 0.0) + v
        return out

    def pending_requests(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for req, _fut in self.waiters:
            for k, v in req.items():
                out[k] = out.get(k, 0.0) + v
        return out

    def fits(self, req: dict[str, float]) -> bool:
        alloc = self.allocated
        for k, v in req.items():
            if k == "ephemeral-storage" and k not in self.capacity:
                # Every kubelet reports its node's disk as allocatable; a fleet file that
                # gives a site no figure for it means room enough, not none.
                continue
            if v > self.capacity.get(k, 0.0) - alloc.get(k, 0.0) + 1e-9:
                return False
        return True

    def free_fraction(self) -> float:
        cpu = self.capacity.get("cpu", 0.0)
        return (cpu - self.allocated.get("cpu", 0.0)) / cpu if cpu else 0.0

    def _grant(self, req: dict[str, float]) -> int:
        lease_id = next(self._ids)
        self._rr = (self._rr + 1) % len(self.nodes)
        self.leases[lease_id] = Lease(req, self.nodes[self._rr])
        for k, v in req.items():
            self._leased[k] = self._leased.get(k, 0.0) + v
        return lease_id

    async def acquire(self, req: dict[str, float], on_wait: Callable[[str], None]) -> int:
        req = dict(req, pods=req.get("pods", 0.0) + 1)
        # A pod that fits is bound even while others wait: kube-scheduler keeps a pod it found
        # unschedulable in ``unschedulablePods`` (pkg/scheduler/internal/queue/
        # scheduling_queue.go: "unschedulablePods holds pods that were already attempted for
        # scheduling and are currently determined to be unschedulable") and goes on with the
        # pods of its activeQ; one pod too big for the site never holds the site's others.
        if self.fits(req):
            return self._grant(req)
        short = [
            k
            for k, v in req.items()
            if v > self.capacity.get(k, 0.0) - self.allocated.get(k, 0.0) + 1e-9
        ]
        on_wait(
            f"Unschedulable: 0/{len(self.nodes)} nodes are available: "
            + ", ".join(f"Insufficient {k}" for k in short or ["resources"])
            + "."
        )
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.waiters.append((req, fut))
        self.sb.poke()
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(fut.result())
            self.waiters = [w for w in self.waiters if w[1] is not fut]
            raise

    def release(self, lease_id: int) -> None:
        lease = self.leases.pop(lease_id, None)
        if lease is None:
            return
        if self.leases:
            for k, v in lease.req.items():
                self._leased[k] = self._leased.get(k, 0.0) - v
        else:
            self._leased.clear()  # no float residue once nothing is leased
        still = []
        for req, fut in self.waiters:
            if fut.done():
                continue
            if self.fits(req):
                fut.set_result(self._grant(req))
            else:
                still.append((req, fut))
        self.waiters = still
        self.sb.poke()

    def node_of(self, lease_id: int) -> str:
        lease = self.leases.get(lease_id)
        return lease.node if lease else self.nodes[0]

    # workflows ------------------------------------------------------------------------------
    def apply(self, obj: Obj) -> None:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        run = self.runs.get(key)
        if run is None:
            run = WorkflowRun(self, self, obj)
            self.runs[key] = run
            run.start()
        else:
            run.state.update(obj)
        if (obj.get("spec") or {}).get("ttlStrategy"):
            self.ttl_keys.add(key)
        else:
            self.ttl_keys.discard(key)

    def apply_direct(self, obj: Obj) -> None:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        old = self.direct.pop(key, None)
        if old is not None:
            old.cancel()
        run = WorkflowRun(self, self, obj)
        self.direct[key] = run
        run.start()

    def delete(self, namespace: str, name: str) -> None:
        run = self.runs.pop((namespace, name), None)
        self.ttl_keys.discard((namespace, name))
        if run is not None:
            run.cancel()
            if self.sb.config.execute:  # only an executing fleet saves artifacts
                self.collect_artifacts(run.state.obj, run.state.render_status())
            # A step's pods are owned by their Workflow (workflow/controller/workflowpod.go:
            # ``OwnerReferences: NewControllerRef(woc.wf, ...)``): the garbage collector deletes
            # them with it, and their logs with them.
            for pod in run.state.nodes:
                self.logs.pop((namespace, pod), None)

    def collect_artifacts(self, obj: Obj, status: Obj) -> int:
        """Argo's artifact GC at deletion: every output artifact whose strategy is
        ``OnWorkflowDeletion`` (its own ``artifactGC.strategy``, else the workflow's
        ``spec.artifactGC.strategy``: ``GetArtifactGCStrategy`` in workflow_types.go) is
        deleted from where it was saved, with every key under it (an unarchived folder is one
        object per file). Argo runs GC pods for it (workflow/controller/artifact_gc.go);
        here it is done at once, and ``OnWorkflowCompletion`` (which the portal turns into
        ``OnWorkflowDeletion``) is not collected. Returns how many objects went."""
        spec = obj.get("spec") or {}
        default = str(((spec.get("artifactGC") or {}).get("strategy")) or "")
        ref = (status.get("artifactRepositoryRef") or {}).get("artifactRepository") or {}
        repo = ref.get("s3") or {}
        gone = 0
        for node in (status.get("nodes") or {}).values():
            if not isinstance(node, dict) or node.get("type") != "Pod":
                continue
            for art in (node.get("outputs") or {}).get("artifacts") or []:
                own = str(((art.get("artifactGC") or {}).get("strategy")) or "")
                s3 = art.get("s3") if isinstance(art, dict) else None
                if (own or default) != "OnWorkflowDeletion" or not isinstance(s3, dict):
                    continue
                endpoint = str(s3.get("endpoint") or repo.get("endpoint") or "")
                bucket = str(s3.get("bucket") or repo.get("bucket") or "")
                site = self.sb.repositories.site_of_endpoint(endpoint.split(":")[0])
                store = self.sb.repositories.of(site).bucket(bucket) if site else None
                key = str(s3.get("key") or "")
                if store is None or not key:
                    continue
                for found, _size in store.list_keys(key):
                    if found == key or found.startswith(key.rstrip("/") + "/"):
                        store.delete_key(found)
                        gone += 1
        return gone

    def orphans(self, live: set[tuple[str, str]]) -> list[tuple[str, str]]:
        return [k for k in self.runs if k not in live]

    def clear(self) -> None:
        for run in [*self.runs.values(), *self.direct.values()]:
            run.cancel()
        self.runs.clear()
        self.ttl_keys.clear()
        self.direct.clear()
        self.leases.clear()
        self._leased.clear()
        for _req, fut in self.waiters:
            if not fut.done():
                fut.cancel()
        self.waiters.clear()
        self.objects.clear()
        self.logs.clear()

    def status_version(self, namespace: str, name: str) -> int | None:
        run = self.runs.get((namespace, name))
        return run.state.version if run else None

    def status_of(self, namespace: str, name: str) -> Obj | None:
        run = self.runs.get((namespace, name))
        return run.state.render_status() if run else None

    def resume(self, namespace: str, name: str, node: str | None) -> int:
        run = self.runs.get((namespace, name)) or self.direct.get((namespace, name))
        return run.state.resume(node) if run else 0

    def workflow_objects(self) -> list[Obj]:
        runs = [*self.runs.values(), *self.direct.values()]
        return [dict(clone(r.state.obj), status=r.state.render_status()) for r in runs]

    def pod_node(self, namespace: str, pod: str) -> dict[str, Any] | None:
        """The Pod node whose pod is named ``pod`` (the member's POD_NAMES decides how)."""
        for (ns, _n), r in [*self.runs.items(), *self.direct.items()]:
            if ns != namespace:
                continue
            for node in r.state.nodes.values():
                if node["type"] == "Pod" and r.state.pod_name(node) == pod:
                    return node
        return None

    def has_pod(self, namespace: str, pod: str) -> bool:
        return self.pod_node(namespace, pod) is not None

    def pod_log(
        self, namespace: str, pod: str, container: str | None, tail_lines: int | None
    ) -> str | None:
        """A pod's log (stdout and stderr as they came) as the kubelet serves it; None when
        the member has no such pod. Only `main` has a log here."""
        data = self.logs.get((namespace, pod))
        if data is None:
            # A pod that was simulated, or has not started yet, has printed nothing here.
            return "" if self.has_pod(namespace, pod) else None
        if container not in (None, "", "main"):
            return ""
        text = bytes(data.data).decode("utf-8", "replace")
        if tail_lines is not None:
            # The kubelet counts "\n" in the container's CRI log file, where every record
            # (an unfinished last line too, as a partial record) ends in one
            # (pkg/util/tail/tail.go, FindTailLineStartIndex; pkg/kubelet/kuberuntime/logs):
            # only "\n" ends a line, and a "\r" of a progress bar is part of its line.
            lines = text.split("\n")
            whole = [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
            text = "".join(whole[-tail_lines:]) if tail_lines > 0 else ""
        return text

    def summary(self) -> dict[str, Any]:
        return {
            "capacity": quantity.fmt_map(self.capacity),
            "allocated": quantity.fmt_map(self.allocated),
            "waiting": len(self.waiters),
            # Pods that exist (created and not ended), over every Workflow the member runs.
            "pods": sum(r.state.pods_live for r in [*self.runs.values(), *self.direct.values()]),
            "workflows": {f"{k[0]}/{k[1]}": r.state.phase for k, r in self.runs.items()},
        }


class ClusterHost(ArgoHost, Protocol):
    """What Karmada's controllers, the cluster proxy and RBAC ask of the sandbox: besides a
    member's needs, the member clusters themselves."""

    @property
    def members(self) -> dict[str, Member]: ...
