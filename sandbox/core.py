"""The sandbox as one object: configuration, store, controllers, members and faults."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from typing import Any

from sandbox.argo.member import Member
from sandbox.argo.site import seed_buckets
from sandbox.authz.guard import Authz
from sandbox.config import Config
from sandbox.errors import ApiError
from sandbox.faults import Faults
from sandbox.fleet import Site, load_fleet
from sandbox.karmada import admission
from sandbox.karmada.controller import Karmada
from sandbox.resources import CLUSTER, NAMESPACE, SECRET, Registry, ResourceType
from sandbox.s3.repositories import Repositories
from sandbox.schema import SchemaRegistry
from sandbox.store import Obj, Store, clone
from sandbox.ttl import WorkflowGC

log = logging.getLogger("sandbox")

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "karmada-system", "karmada-cluster")


class Sandbox:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.store = Store(Registry(), event_log_size=config.event_log_size)
        self.schemas = SchemaRegistry()
        if config.crds:
            self.schemas.load(config.crds)
            self.store.validator = self.schemas.validate
        self.faults = Faults()
        self.sites: dict[str, Site] = {s.name: s for s in load_fleet(config.fleet)}
        self.members: dict[str, Member] = {}
        self.karmada = Karmada(self)
        self.gc = WorkflowGC(self)
        self._wake = asyncio.Event()
        self.store.listeners.append(lambda ev: self._wake.set())
        self.authz = Authz(self)
        self.seed()
        # Each site's artifact repository as an S3 endpoint over HTTP (sandbox/s3/).
        self.repositories = Repositories(self)
        if config.execute:
            seed_buckets(self)
            self.repositories.start()

    def seed(self) -> None:
        for ns in DEFAULT_NAMESPACES:
            if self.store.find(NAMESPACE, None, ns) is None:
                self.store.create(NAMESPACE, {"metadata": {"name": ns}}, validate=False)
                self._namespace_active(ns)
        for site in self.sites.values():
            if self.store.find(CLUSTER, None, site.name) is None:
                self.store.create(CLUSTER, site.cluster_object(), validate=False)
        self.authz.seed()

    def _namespace_active(self, name: str) -> None:
        obj = clone(self.store.get(NAMESPACE, None, name))
        obj["status"] = {"phase": "Active"}
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        self.store.update(NAMESPACE, obj, subresource="all", validate=False)

    def poke(self, everything: bool = False) -> None:
        """Wake the controllers; `everything` when the change (a fault) may affect any
        workflow, not only those events name."""
        if everything:
            self.karmada.mark_all()
        self._wake.set()

    def _default(self, rtype: ResourceType, obj: Obj) -> None:
        """The CRD's structural defaults (with `--crds`), else the policy defaults built in."""
        if self.schemas.has(rtype):
            self.schemas.default(rtype, obj)
        else:
            admission.default_policy_spec(rtype, obj)

    async def admit_create(self, rtype: ResourceType, obj: Any, namespace: str | None) -> Obj:
        """The apiserver's CREATE chain: defaults, mutating admission (Karmada's own webhooks,
        then those registered), defaults again, validating admission. Schema validation
        follows in the store."""
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata", {}), dict):
            raise ApiError.bad_request("the body must be a JSON object with object metadata")
        body: Obj = clone(obj)
        meta = body.setdefault("metadata", {})
        if rtype.namespaced and namespace:
            meta.setdefault("namespace", namespace)
        self._default(rtype, body)
        body = admission.mutate(rtype, body, "CREATE")
        body = await self.karmada.webhooks.admit(rtype, body, namespace)
        self._default(rtype, body)
        admission.validate(rtype, body, None)
        return _secret_data(rtype, body)

    def admit_update(self, rtype: ResourceType, obj: Obj, old: Obj | None) -> Obj:
        """The UPDATE chain (registered webhooks are called on CREATE only)."""
        if old is None:
            return obj
        obj = clone(obj)
        self._default(rtype, obj)
        obj = admission.mutate(rtype, obj, "UPDATE")
        admission.validate(rtype, obj, old)
        return _secret_data(rtype, obj)

    async def run(self) -> None:
        """The controllers' loop: reconcile whenever something changed, coalescing bursts."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=0.5)
            self._wake.clear()
            try:
                self.gc.collect()
                self.karmada.reconcile()
                if self.karmada.busy():
                    self._wake.set()
            except Exception:  # pragma: no cover - keep the fleet alive, but say why
                log.exception("reconcile failed")
            await asyncio.sleep(self.config.tick)

    # -- control endpoints ---------------------------------------------------------------
    def reset(self) -> None:
        """Back to the fleet as it started: objects gone, members empty, faults cleared.
        resourceVersion keeps counting so that clients holding old versions stay correct."""
        self.faults.clear()
        for member in self.members.values():
            member.clear()
        for rtype in self.store.registry.types:
            if rtype is CLUSTER:
                continue
            for obj in list(self.store.all(rtype)):
                meta = obj["metadata"]
                if rtype is NAMESPACE and meta["name"] in DEFAULT_NAMESPACES:
                    continue
                if meta.get("finalizers"):
                    stripped = clone(obj)
                    stripped["metadata"]["finalizers"] = []
                    self.store.update(
                        rtype,
                        stripped,
                        meta.get("namespace"),
                        subresource="all",
                        validate=False,
                        check_rv=False,
                    )
                if self.store.find(rtype, meta.get("namespace"), meta["name"]) is not None:
                    self.store.delete(rtype, meta.get("namespace"), meta["name"])
        for obj in list(self.store.all(CLUSTER)):
            name = obj["metadata"]["name"]
            if name not in self.sites:
                self.store.delete(CLUSTER, None, name)
            else:
                fresh = self.sites[name].cluster_object()
                cur = clone(obj)
                cur["metadata"]["labels"] = fresh["metadata"]["labels"]
                cur["spec"] = fresh["spec"]
                self.store.update(CLUSTER, cur, validate=False, check_rv=False)
        self.seed()
        self.karmada.reset()
        self.poke()

    def state(self) -> dict[str, Any]:
        return {
            "resourceVersion": self.store.rv,
            "eventLog": {
                "size": self.store.events_logged(),
                "evictedUpTo": self.store.evicted_rv,
                # Each resource's watch cache: how many events it holds, and may hold now.
                "byResource": {
                    key: [len(window), window.capacity]
                    for key, window in self.store.logs.items()
                    if len(window)
                },
            },
            "watchers": len(self.store.watchers),
            "members": {name: m.summary() for name, m in self.members.items()},
            "faults": [f.to_dict() for f in self.faults.active()],
        }

    def resume(self, namespace: str, name: str, node: str | None) -> int:
        count = 0
        for member in self.members.values():
            count += member.resume(namespace, name, node)
        return count

    def member_workflows(self, cluster: str) -> list[Obj]:
        member = self.members.get(cluster)
        return member.workflow_objects() if member else []


def _secret_data(rtype: ResourceType, obj: Obj) -> Obj:
    """A Secret's `stringData` is write-only: the apiserver merges it into `data`, base64
    encoded, over keys of the same name (kubernetes `pkg/apis/core/v1/conversion.go`,
    `Convert_v1_Secret_To_core_Secret`), so what is stored and propagated is `data` only."""
    if rtype is not SECRET or not isinstance(obj.get("stringData"), dict):
        return obj
    data = dict(obj.get("data") or {})
    for key, value in obj.pop("stringData").items():
        data[str(key)] = base64.b64encode(str(value).encode()).decode()
    obj["data"] = data
    return obj
