"""The state of one DAG template's run: its tasks' dependencies, results and failures, and
the task states its `depends` expressions read (workflow/controller/dag.go)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from sandbox.argo.expr import FAILED, ExprError


class Dag:
    """The state of one DAG template's run: its tasks' dependencies and results."""

    def __init__(
        self, node: dict[str, Any], scope: dict[str, Any], tasks: dict[str, dict[str, Any]]
    ) -> None:
        self.node = node
        self.scope = scope
        self.tasks = tasks
        self.deps: dict[str, set[str]] = {}
        self.exprs: dict[str, str] = {}
        for tname, t in tasks.items():
            if t.get("depends"):
                self.exprs[tname] = str(t["depends"])
                self.deps[tname] = {
                    w.split(".")[0]
                    for w in re.findall(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", self.exprs[tname])
                    if w.split(".")[0] in tasks
                }
            else:
                self.deps[tname] = set(t.get("dependencies") or [])
                self.exprs[tname] = " && ".join(self.deps[tname])
        self.handled: set[str] = set()
        for expr in self.exprs.values():
            for ref, _suffix in re.findall(
                r"([A-Za-z0-9_-]+)\.(Failed|Errored|AnyFailed|AllFailed|Completed)", expr
            ):
                self.handled.add(ref)
        for tname, t in tasks.items():
            cont = t.get("continueOn") or {}
            if cont.get("failed") or cont.get("error"):
                self.handled.add(tname)
        self.results: dict[str, dict[str, Any]] = {}
        self.loops: dict[str, list[dict[str, Any]] | None] = {}
        self.running: dict[str, asyncio.Task[tuple[dict[str, Any], list[Any] | None]]] = {}
        self.unhandled: list[dict[str, Any]] = []
        self.error: str | None = None

    def parents(self, tname: str) -> list[str]:
        # Argo's DAG shape: tasks without dependencies hang off the DAG node, every other
        # task off the tasks it depends on.
        if not self.deps[tname]:
            return [self.node["id"]]
        return [self.results[d]["id"] for d in sorted(self.deps[tname]) if d in self.results]

    def task_state(self, word: str) -> bool:
        ref, _, suffix = word.partition(".")
        n = self.results.get(ref)
        if n is None:
            raise ExprError(f"unknown task {ref}")
        ph = str(n["phase"])
        children = list(self.loops.get(ref) or [])
        if suffix == "":
            return ph in ("Succeeded", "Skipped")
        if suffix == "Succeeded":
            return ph == "Succeeded"
        if suffix == "Failed":
            return ph == "Failed"
        if suffix == "Errored":
            return ph == "Error"
        if suffix == "Skipped":
            return ph == "Skipped"
        if suffix == "Omitted":
            return ph == "Omitted"
        if suffix == "Daemoned":
            return False
        if suffix == "Completed":
            return ph in ("Succeeded", "Failed")
        if suffix == "AnySucceeded":
            return any(c["phase"] == "Succeeded" for c in children)
        if suffix == "AllFailed":
            return bool(children) and all(c["phase"] in FAILED for c in children)
        if suffix == "AnyFailed":
            return any(c["phase"] in FAILED for c in children)
        raise ExprError(f"unknown task result {suffix}")
