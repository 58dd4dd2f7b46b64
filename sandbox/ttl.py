"""Argo's workflow garbage collection at the members: `spec.ttlStrategy`
(`secondsAfterCompletion`, `secondsAfterSuccess`, `secondsAfterFailure`;
`workflow/gccontroller/gc_controller.go` upstream) deletes a finished Workflow from its
cluster. On a Karmada member that copy is then re-created from its Work and runs again."""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from sandbox.argo.member import ClusterHost
from sandbox.karmada.controller import Karmada

log = logging.getLogger("sandbox.argo")
DONE = ("Succeeded", "Failed", "Error")


def ttl_seconds(spec: dict[str, Any], phase: str) -> float | None:
    ttl = spec.get("ttlStrategy") or {}
    key = "secondsAfterSuccess" if phase == "Succeeded" else "secondsAfterFailure"
    value = ttl.get(key, ttl.get("secondsAfterCompletion"))
    return None if value is None else float(value)


class GCHost(ClusterHost, Protocol):
    """The members whose Workflows expire, and Karmada, told of each one deleted."""

    @property
    def karmada(self) -> Karmada: ...


class WorkflowGC:
    def __init__(self, sandbox: GCHost) -> None:
        self.sb = sandbox
        # (cluster, namespace, name, run id) -> monotonic time the run was first seen done.
        self._done: dict[tuple[str, str, str, str], float] = {}

    def collect(self) -> None:
        now = time.monotonic()
        live = set()
        for member in self.sb.members.values():
            for key in list(member.ttl_keys):
                run = member.runs.get(key)
                if run is None or run.state.phase not in DONE:
                    continue
                secs = ttl_seconds(run.state.obj.get("spec") or {}, run.state.phase)
                if secs is None:
                    continue
                mark = (member.name, key[0], key[1], run.state.uid)
                live.add(mark)
                since = self._done.setdefault(mark, now)
                if (now - since) * self.sb.config.time_scale >= secs:
                    log.info("%s: ttlStrategy deletes %s/%s", member.name, *key)
                    member.delete(*key)
                    self.sb.karmada.mark(key)
                    live.discard(mark)
        for mark in set(self._done) - live:
            del self._done[mark]
