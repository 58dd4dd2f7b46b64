"""core/v1 Events the Karmada controllers record on karmada-apiserver (client-go's
`record.EventRecorder`): one Event per object, reason and message, its `count` raised when it
repeats. Events live an hour (the apiserver's `--event-ttl` default) and at most `MAX_EVENTS`
are kept, so memory stays flat over a day."""

from __future__ import annotations

import time

from sandbox.argo.expr import fnv32a
from sandbox.resources import EVENT
from sandbox.store import Obj, Store, clone, now_iso

EVENT_TTL_S = 3600.0
MAX_EVENTS = 1000


class Events:
    def __init__(self, store: Store) -> None:
        self.store = store
        # (namespace, name) of each Event -> monotonic time of its last change.
        self._seen: dict[tuple[str, str], float] = {}

    def reset(self) -> None:
        self._seen.clear()

    def record(self, obj: Obj, etype: str, reason: str, message: str, component: str) -> Obj:
        meta = obj["metadata"]
        ns = meta.get("namespace") or "default"
        name = f"{meta['name']}.{fnv32a(meta['uid'] + reason + message):x}"
        now = now_iso()
        old = self.store.find(EVENT, ns, name)
        self._seen[(ns, name)] = time.monotonic()
        if old is not None:
            new = clone(old)
            new["count"] = int(old.get("count", 1)) + 1
            new["lastTimestamp"] = now
            return self.store.update(EVENT, new, validate=False, check_rv=False)
        self._bound()
        return self.store.create(
            EVENT,
            {
                "metadata": {"name": name, "namespace": ns},
                "involvedObject": {
                    "apiVersion": obj.get("apiVersion", ""),
                    "kind": obj.get("kind", ""),
                    "namespace": meta.get("namespace", ""),
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "resourceVersion": meta.get("resourceVersion", ""),
                },
                "type": etype,
                "reason": reason,
                "message": message,
                "source": {"component": component},
                "reportingComponent": component,
                "firstTimestamp": now,
                "lastTimestamp": now,
                "eventTime": None,
                "count": 1,
            },
            validate=False,
        )

    def prune(self) -> None:
        horizon = time.monotonic() - EVENT_TTL_S
        for key, seen in list(self._seen.items()):
            if seen < horizon:
                self._drop(key)

    def _bound(self) -> None:
        while len(self._seen) >= MAX_EVENTS:
            oldest = min(self._seen, key=lambda k: self._seen[k])
            self._drop(oldest)

    def _drop(self, key: tuple[str, str]) -> None:
        self._seen.pop(key, None)
        if self.store.find(EVENT, *key) is not None:
            self.store.delete(EVENT, *key)
