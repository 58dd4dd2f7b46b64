"""Objects, one global resourceVersion counter, a window of events per resource (its watch
cache, ``sandbox.watchcache``) and watch fan-out.

Everything runs on one asyncio loop, so the store needs no locks. Stored objects are never
mutated after they are committed: readers may serialise them directly, writers clone first.
That is what lets the event log share references with the object table instead of copying.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from sandbox import chunks, coordination, watchcache
from sandbox.errors import ApiError
from sandbox.keyindex import KeyIndex
from sandbox.resources import Registry, ResourceType

Obj = dict[str, Any]

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def clone(value: Any) -> Any:
    """Deep copy for JSON-shaped data. A round trip through orjson is three times faster
    than copying in Python (a Work: 32 against 112 us), and copies were a fifth of the
    sandbox's time under a 10,000-item fan-out; what orjson refuses (keys that are not
    strings, integers past 64 bits) is copied in Python."""
    if isinstance(value, dict | list):
        try:
            return orjson.loads(orjson.dumps(value))
        except (TypeError, orjson.JSONEncodeError):
            return _clone(value)
    return value


def share_unchanged(new: Obj, old: Obj) -> None:
    """Make ``new`` hold ``old``'s own parts where an update left them equal (its spec, its
    labels, a status section), two levels deep. Committed objects are never mutated, so
    versions may share parts. The watch caches keep each version for 75 s; a version then
    costs what changed, not a whole copy (a Work's manifest, a Workflow's templates): after
    a 10,000-item fan-out the sandbox held 846 MB, not 1,172 MB. (Versions kept as JSON
    bytes instead took more: 1,315 MB.)"""
    for key, value in new.items():
        was = old.get(key)
        if was is value or not isinstance(value, dict | list) or type(was) is not type(value):
            continue
        if value == was:
            new[key] = was
        elif isinstance(value, dict) and isinstance(was, dict):
            for sub, part in value.items():
                held = was.get(sub)
                if (
                    held is not part
                    and isinstance(part, dict | list)
                    and type(held) is type(part)
                    and part == held
                ):
                    value[sub] = held


def _clone(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clone(v) for v in value]
    return value


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


@dataclass(slots=True)
class Event:
    rv: int
    rtype: ResourceType
    type: str
    obj: Obj
    old: Obj | None


@dataclass(eq=False)
class Watcher:
    rtype: ResourceType
    namespace: str | None
    label_match: Callable[[Mapping[str, str]], bool]
    field_match: Callable[[Mapping[str, Any]], bool]
    queue: asyncio.Queue[Event | None] = field(default_factory=lambda: asyncio.Queue(2000))
    overflowed: bool = False

    def wants(self, ev: Event) -> str | None:
        """The event type this watcher should see, following how selectors behave upstream:
        an object that stops matching is DELETED for the watcher, one that starts is ADDED."""
        if ev.rtype is not self.rtype:
            return None
        new_in = self._matches(ev.obj)
        if ev.type == "MODIFIED" and ev.old is not None:
            old_in = self._matches(ev.old)
            if new_in and not old_in:
                return "ADDED"
            if old_in and not new_in:
                return "DELETED"
        return ev.type if new_in else None

    def _matches(self, obj: Obj) -> bool:
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return self.label_match(meta.get("labels") or {}) and self.field_match(obj)


class Store:
    def __init__(self, registry: Registry, event_log_size: int = watchcache.UPPER_BOUND) -> None:
        self.registry = registry
        # Seeded from the clock so that versions keep growing across restarts of the sandbox;
        # anything a client holds from an earlier run is then too old (410) and it re-lists.
        self.rv = int(time.time() * 1000)
        self.objects: dict[str, dict[tuple[str, str], Obj]] = {t.key: {} for t in registry.types}
        # The same keys in etcd's order: chunked lists read a range, as etcd does.
        self.order: dict[str, KeyIndex] = {t.key: KeyIndex() for t in registry.types}
        # Each resource's recent events, at most ``event_log_size`` of them: a watch from a
        # version whose events have left its resource's window gets 410 Expired.
        self.logs: dict[str, watchcache.WatchCache[Event]] = {
            t.key: watchcache.WatchCache(self.rv, upper=event_log_size) for t in registry.types
        }
        # etcd's compaction, which chunked lists' continue tokens do not outlive. In wall
        # time, not divided by the time scale: the scale speeds steps up, and a chunked list
        # takes as long in wall time at any scale.
        self.compactor = chunks.Compactor(chunks.COMPACTION_INTERVAL_S, time.monotonic(), self.rv)
        self.watchers: set[Watcher] = set()
        self.listeners: list[Callable[[Event], None]] = []
        self.validator: Callable[[ResourceType, Obj], None] | None = None

    # -- reads ---------------------------------------------------------------------------
    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj:
        obj = self.objects[rtype.key].get((namespace or "", name))
        if obj is None:
            raise ApiError.not_found(rtype.group, rtype.plural, name)
        return obj

    def find(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj | None:
        return self.objects[rtype.key].get((namespace or "", name))

    def list_objects(
        self,
        rtype: ResourceType,
        namespace: str | None = None,
        label_match: Callable[[Mapping[str, str]], bool] | None = None,
        field_match: Callable[[Mapping[str, Any]], bool] | None = None,
    ) -> list[Obj]:
        return self.list_range(rtype, namespace, label_match, field_match)[0]

    def list_range(
        self,
        rtype: ResourceType,
        namespace: str | None = None,
        label_match: Callable[[Mapping[str, str]], bool] | None = None,
        field_match: Callable[[Mapping[str, Any]], bool] | None = None,
        *,
        start: str = "",
        limit: int = 0,
    ) -> tuple[list[Obj], int]:
        """The matching objects in etcd's order (``<namespace>/<name>``) from key ``start``
        on, at most ``limit`` of them (0: all), and how many follow: exactly without
        selectors, at least one (1) with them, 0 when none does."""
        objects = self.objects[rtype.key]
        order = self.order[rtype.key]
        lo, hi = order.bounds(namespace, start)
        selected = label_match is not None or field_match is not None
        out: list[Obj] = []
        for i, key in enumerate(order.keys(lo, hi), lo):
            obj = objects[key]
            if namespace is not None and key[0] != namespace:
                continue  # "" asks for the cluster-wide keys only
            meta = obj["metadata"]
            if label_match is not None and not label_match(meta.get("labels") or {}):
                continue
            if field_match is not None and not field_match(obj):
                continue
            if limit and len(out) == limit:
                return out, 1 if selected or namespace == "" else hi - i
            out.append(obj)
        return out, 0

    def all(self, rtype: ResourceType) -> Iterable[Obj]:
        return list(self.objects[rtype.key].values())

    # -- writes --------------------------------------------------------------------------
    def _next_rv(self) -> int:
        # The compactor notes the revision current at each of its ticks; the revision only
        # changes here, so a tick taken before the change notes exactly what was current then
        # (taken only when a token was checked, a long pause caught up several ticks at once
        # and noted the newest revision for all of them: a token just issued was expired).
        self.compactor.advance(time.monotonic(), self.rv)
        self.rv += 1
        return self.rv

    def _emit(self, rtype: ResourceType, etype: str, obj: Obj, old: Obj | None) -> None:
        ev = Event(int(obj["metadata"]["resourceVersion"]), rtype, etype, obj, old)
        self.logs[rtype.key].add(ev)
        for w in list(self.watchers):
            # One cacher per resource, as kube-apiserver's (storage/cacher: a watch's buffer
            # holds its resource's events only): a fan-out's Workflow and Work events do not
            # fill a binding or Cluster watch's buffer and close it.
            if w.overflowed or w.rtype is not rtype:
                continue
            try:
                w.queue.put_nowait(ev)
            except asyncio.QueueFull:
                # A watcher this far behind is closed, as the apiserver does; the client
                # re-lists or resumes from its last resourceVersion.
                w.overflowed = True
                self.watchers.discard(w)
        for listener in self.listeners:
            listener(ev)

    def _check_meta(self, rtype: ResourceType, obj: Obj, namespace: str | None) -> None:
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            raise _invalid(rtype, "", "FieldValueRequired", "metadata", "Required value")
        name = meta.get("name", "")
        if not isinstance(name, str) or not name:
            raise _invalid(
                rtype,
                "",
                "FieldValueRequired",
                "metadata.name",
                "Required value: name or generateName is required",
            )
        if rtype.path_segment_names:
            # RBAC objects (``ValidateRBACName``: ``path.IsValidPathSegmentName``), so that
            # "system:discovery" is a name.
            bad = name in (".", "..") or "/" in name or "%" in name
        else:
            bad = len(name) > 253 or not _DNS_SUBDOMAIN.match(name)
        if bad:
            raise _invalid(
                rtype,
                name,
                "FieldValueInvalid",
                "metadata.name",
                f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must '
                "consist of lower case alphanumeric characters, '-' or '.'",
            )
        if rtype.namespaced:
            meta["namespace"] = self._namespace_of(meta, namespace)
        else:
            meta.pop("namespace", None)

    def _namespace_of(self, meta: dict[str, Any], namespace: str | None) -> Any:
        """The namespace a namespaced object goes to: the request's and the body's must
        agree, and the namespace must exist."""
        body_ns = meta.get("namespace")
        if namespace and body_ns and body_ns != namespace:
            raise ApiError.bad_request(
                "the namespace of the provided object does not match the namespace sent "
                "on the request"
            )
        ns = namespace or body_ns
        if not ns:
            raise ApiError.bad_request("the server could not find the requested resource")
        ns_type = self.registry.lookup("", "v1", "namespaces")
        if ns_type is not None and (("", ns) not in self.objects[ns_type.key]):
            raise ApiError.not_found("", "namespaces", ns)
        return ns

    def create(
        self, rtype: ResourceType, obj: Obj, namespace: str | None = None, *, validate: bool = True
    ) -> Obj:
        obj = clone(obj)
        obj["apiVersion"] = rtype.api_version
        obj["kind"] = rtype.kind
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        self._check_meta(rtype, obj, namespace)
        if validate and self.validator is not None:
            self.validator(rtype, obj)
        if validate:
            coordination.validate(rtype, obj)
        key = (meta.get("namespace", ""), meta["name"])
        if key in self.objects[rtype.key]:
            raise ApiError.already_exists(rtype.group, rtype.plural, meta["name"])
        for drop in ("resourceVersion", "deletionTimestamp", "managedFields"):
            meta.pop(drop, None)
        if rtype.kind == "Namespace":
            # pkg/registry/core/namespace/strategy.go, PrepareForCreate: "on create, status
            # is active".
            obj["status"] = {"phase": "Active"}
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_iso()
        meta["generation"] = 1
        meta["resourceVersion"] = str(self._next_rv())
        self.objects[rtype.key][key] = obj
        self.order[rtype.key].add(key)
        self._emit(rtype, "ADDED", obj, None)
        return obj

    def update(
        self,
        rtype: ResourceType,
        obj: Obj,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        validate: bool = True,
        check_rv: bool = True,
    ) -> Obj:
        """PUT semantics. subresource None keeps the stored status, "status" keeps all but the
        status, "all" (internal callers) replaces both."""
        obj = clone(obj)
        meta = obj.setdefault("metadata", {})
        name = meta.get("name", "")
        key_ns = (namespace or meta.get("namespace") or "") if rtype.namespaced else ""
        old = self.objects[rtype.key].get((key_ns, name))
        if old is None:
            raise ApiError.not_found(rtype.group, rtype.plural, name)
        if check_rv:
            _check_rv(rtype, name, meta.get("resourceVersion"), old)
        new = _replaced(rtype, obj, old, subresource, name)
        if validate and self.validator is not None:
            self.validator(rtype, new)
        if validate:
            coordination.validate(rtype, new)
        new["metadata"]["resourceVersion"] = str(self._next_rv())
        share_unchanged(new, old)
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            del self.objects[rtype.key][(key_ns, name)]
            self.order[rtype.key].remove((key_ns, name))
            self._emit(rtype, "DELETED", new, old)
            return new
        self.objects[rtype.key][(key_ns, name)] = new
        self._emit(rtype, "MODIFIED", new, old)
        return new

    def delete(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        preconditions: Mapping[str, Any] | None = None,
    ) -> Obj:
        key = ((namespace or "") if rtype.namespaced else "", name)
        old = self.objects[rtype.key].get(key)
        if old is None:
            raise ApiError.not_found(rtype.group, rtype.plural, name)
        if preconditions:
            for field_name in ("uid", "resourceVersion"):
                want = preconditions.get(field_name)
                if want and want != old["metadata"].get(field_name):
                    raise ApiError.conflict(
                        rtype.group,
                        rtype.plural,
                        name,
                        f"Precondition failed: {field_name} in precondition: {want}, "
                        f"{field_name} in object meta: {old['metadata'].get(field_name)}",
                    )
        if old["metadata"].get("finalizers"):
            if old["metadata"].get("deletionTimestamp"):
                return old
            held: Obj = clone(old)
            held["metadata"]["deletionTimestamp"] = now_iso()
            held["metadata"]["resourceVersion"] = str(self._next_rv())
            self.objects[rtype.key][key] = held
            self._emit(rtype, "MODIFIED", held, old)
            return held
        del self.objects[rtype.key][key]
        self.order[rtype.key].remove(key)
        gone: Obj = clone(old)
        gone["metadata"]["resourceVersion"] = str(self._next_rv())
        self._emit(rtype, "DELETED", gone, None)
        if rtype.kind == "Namespace":
            for t in self.registry.types:
                if t.namespaced:
                    for ns, n in [k for k in self.objects[t.key] if k[0] == name]:
                        self.delete(t, ns, n)
        return gone

    # -- watches -------------------------------------------------------------------------
    def compact(self) -> None:
        """An etcd compaction now: watches and continue tokens from before it get 410."""
        for window in self.logs.values():
            window.clear(self.rv)
        self.compactor.compact_now(self.rv)

    @property
    def evicted_rv(self) -> int:
        """The newest version some resource's window no longer serves."""
        return max(window.evicted_rv for window in self.logs.values())

    def events_logged(self) -> int:
        return sum(len(window) for window in self.logs.values())

    def events_since(self, rtype: ResourceType, rv: int) -> list[Event]:
        if rv > self.rv:
            # Only possible with a version from another run of the sandbox.
            raise ApiError.expired(f"too large resource version: {rv}, current: {self.rv}")
        window = self.logs[rtype.key]
        events = window.since(rv)
        if events is None:
            raise ApiError.expired(f"too old resource version: {rv} ({window.evicted_rv + 1})")
        return events


def _spec_of(obj: Obj, status_apart: bool = True) -> dict[str, Any]:
    """What bumps metadata.generation: everything but metadata, and but status when status is
    a subresource (without one, as for CRDs, a status change is a change like any other)."""
    skip = ("metadata", "status", "apiVersion", "kind") if status_apart else ("metadata",)
    return {k: v for k, v in obj.items() if k not in skip}


def _invalid(rtype: ResourceType, name: str, reason: str, field: str, message: str) -> ApiError:
    """A 422 Invalid naming one field, as the apiserver's validation answers."""
    return ApiError.invalid(
        rtype.group, rtype.kind, name, [{"reason": reason, "field": field, "message": message}]
    )


def _check_rv(rtype: ResourceType, name: str, sent_rv: Any, old: Obj) -> None:
    """An update names the resourceVersion it was made from, and only the current one."""
    if not sent_rv and not rtype.unconditional_update:
        # k8s.io/apiserver pkg/registry/generic/registry/store.go, Update: "must be
        # specified for an update", with the resource as the kind.
        raise ApiError.invalid(
            rtype.group,
            rtype.plural,
            name,
            [
                {
                    "reason": "FieldValueInvalid",
                    "field": "metadata.resourceVersion",
                    "message": "Invalid value: 0x0: must be specified for an update",
                }
            ],
        )
    if sent_rv and sent_rv != old["metadata"]["resourceVersion"]:
        raise ApiError.conflict(
            rtype.group,
            rtype.plural,
            name,
            "the object has been modified; please apply your changes to the latest "
            "version and try again",
        )


def _replaced(rtype: ResourceType, obj: Obj, old: Obj, subresource: str | None, name: str) -> Obj:
    """What an update stores: through /status the old object with the new status; else the
    new object, keeping the old status (with a status subresource, unless "all"), the
    server-set metadata, and a generation moved on by a change of spec."""
    # Without a status subresource the main endpoint stores `status` as sent (Argo's
    # Workflow CRD declares `subresources: {}`).
    has_status = rtype.status_subresource
    if subresource == "status":
        new: Obj = clone(old)
        if "status" in obj:
            new["status"] = obj["status"]
        else:
            new.pop("status", None)
        return new
    new = obj
    new["apiVersion"] = rtype.api_version
    new["kind"] = rtype.kind
    if subresource is None and has_status:
        if "status" in old:
            new["status"] = old["status"]
        else:
            new.pop("status", None)
    nmeta = new["metadata"]
    for keep in ("uid", "creationTimestamp", "deletionTimestamp", "namespace"):
        if keep in old["metadata"]:
            nmeta[keep] = old["metadata"][keep]
        else:
            nmeta.pop(keep, None)
    nmeta["name"] = name
    nmeta["generation"] = old["metadata"].get("generation", 1)
    if _spec_of(new, has_status) != _spec_of(old, has_status):
        nmeta["generation"] += 1
    return new
