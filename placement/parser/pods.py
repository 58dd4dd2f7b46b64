"""How many pods one unit's step workflow can create: its template's leaves times the sizes of
the loops nested above them, through local templates, ``templateRef`` and recursion.

A unit runs whole at one site, so everything nested inside it is expanded by that site's Argo,
not by the portal: this count is the only bound the portal can put on it before it runs.

* A leaf that runs in a pod of its own (container, script, containerSet, resource, data) is one
  pod; suspend, http and plugin templates are none (Argo runs the last two in the workflow's one
  agent pod).
* A step or task is its loop's size times its template's pods, plus its exit handler's and
  hooks'. A ``when`` is not evaluated: what may be skipped is counted.
* A loop whose size is not known at submission (``withParam`` over an output, a templated
  ``withSequence``) counts as ``Limits.unknown_loop_items`` items.
* Recursion (a template that calls itself, directly or through other templates and the
  catalogue) is counted to 100 levels, Argo's stack depth (``maxAllowedStackDepth`` = 100 in
  `workflow/controller/controller.go`: past it ``executeTemplate`` errors the node, "Maximum
  recursion depth exceeded", and creates no pod; Argo's depth counts every nested call, so
  this over-counts, never under-counts): a recursion that calls itself once per level counts
  its pods a hundred times and one that calls itself twice is refused. Templates that call
  nothing back are counted once, wherever they are called from.
* Retries are not counted: attempts run one after another, each bounded by its own limit.

Counts saturate just past the limit, so a fan-out of fan-outs is refused by arithmetic on a few
integers, never by building anything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from placement.parser.arguments import substitute_wf_params
from placement.parser.errors import join_path
from placement.parser.expansion import SequenceInvalid, sequence_range
from placement.parser.references import TemplateIndex

# Argo's workflow/controller/controller.go: ``const maxAllowedStackDepth = 100``.
ARGO_MAX_STACK_DEPTH = 100

_POD_LEAVES = ("container", "script", "containerSet", "resource", "data")


@dataclass(frozen=True)
class PodCount:
    """Pods a template can create (at most ``cap``), the loops that multiply most of them,
    and the first template found calling itself (None without recursion)."""

    pods: int
    # (field path, items counted, whether the size is known at submission), outermost first.
    loops: tuple[tuple[str, int, bool], ...] = ()
    recursion: str | None = None

    def describe(self) -> str:
        """Why the count is what it is, for the message that refuses it."""
        parts = [
            f"{path}: {size} items" + ("" if known else " (known only at run time)")
            for path, size, known in self.loops
        ]
        why = f" (loops {' x '.join(parts)})" if parts else ""
        if self.recursion:
            why += (
                f"; template {self.recursion!r} calls itself, counted to Argo's "
                f"{ARGO_MAX_STACK_DEPTH} nested calls"
            )
        return why


class PodCounter:
    """Pod counts of the templates one workflow's parser has resolved, memoised."""

    def __init__(
        self, index: TemplateIndex, wf_params: Mapping[str, str], cap: int, unknown_items: int
    ) -> None:
        self.index = index
        self.wf_params = wf_params
        # Counts stay exact far past the limit (the message says how far), and small.
        self.cap = max(cap, 1) * 1_000_000
        self.unknown_items = unknown_items
        self._memo: dict[tuple[str, int], PodCount] = {}
        self._flat: dict[str, PodCount] = {}
        self._edge_cache: dict[str, list[tuple[int, bool, str | None, tuple[str, ...]]]] = {}
        # Templates on the path being counted, with how often (recursion re-enters them).
        self._on: dict[str, int] = {}

    def count(self, key: str) -> PodCount:
        return self._count(key, 0)

    def shown(self, pods: int) -> str:
        return f"more than {self.cap - 1}" if pods >= self.cap else str(pods)

    def _count(self, key: str, depth: int) -> PodCount:
        """``depth``: how many times this path re-entered a template it was already in."""
        if depth >= ARGO_MAX_STACK_DEPTH:
            # Cut by recursion: what called it depends on the depth, never memoised flat.
            return PodCount(0, recursion=key)
        memo = self._flat.get(key) or self._memo.get((key, depth))
        if memo is not None:
            return memo
        t = self.index.templates.get(key)
        if not isinstance(t, Mapping):
            return PodCount(0)
        if any(t.get(k) is not None for k in _POD_LEAVES):
            return PodCount(1)
        recursion = key if self._on.get(key) else None
        self._on[key] = self._on.get(key, 0) + 1
        try:
            found = self._calls(key, depth)
        finally:
            self._on[key] -= 1
        if recursion and not found.recursion:
            found = PodCount(found.pods, found.loops, recursion)
        if found.recursion:
            self._memo[(key, depth)] = found
        else:
            # Nothing below it calls back up: the same count wherever it is called from.
            self._flat[key] = found
        return found

    def _calls(self, key: str, depth: int) -> PodCount:
        total = 0
        heaviest = PodCount(0)
        recursion: str | None = None
        for items, known, loop_path, targets in self._edges(key):
            inner = 0
            inner_heaviest = PodCount(0)
            for target in targets:
                sub = self._count(target, depth + 1 if self._on.get(target) else depth)
                inner = min(inner + sub.pods, self.cap)
                recursion = recursion or sub.recursion
                if sub.pods > inner_heaviest.pods:
                    inner_heaviest = sub
            pods = min(inner * items, self.cap)
            total = min(total + pods, self.cap)
            if pods > heaviest.pods:
                loops = inner_heaviest.loops
                if loop_path is not None:
                    loops = ((loop_path, items, known), *loops)
                heaviest = PodCount(pods, loops)
            if total >= self.cap:
                break  # refused whatever the rest adds
        return PodCount(total, heaviest.loops, recursion)

    def _edges(self, key: str) -> list[tuple[int, bool, str | None, tuple[str, ...]]]:
        """(items, size known, loop path, templates called) of each call in a template: its
        steps or tasks, their exit handlers and hooks, and the template's own hooks. Resolved
        once per template, however often recursion visits it."""
        cached = self._edge_cache.get(key)
        if cached is not None:
            return cached
        t = self.index.templates[key]
        scope = self.index.scopes.get(key, "")
        calls = list(self.index.calls(key))
        hooks = t.get("hooks")
        for name, hook in hooks.items() if isinstance(hooks, Mapping) else ():
            if isinstance(hook, Mapping):
                where = join_path(join_path(self.index.template_paths[key], "hooks"), str(name))
                calls.append(("hook", hook, where))
        out = []
        for _kind, call, path in calls:
            size, loop_path = self._loop_size(call, path)
            targets = tuple(self.index.call_targets(call, scope, path))
            items = self.unknown_items if size is None else size
            out.append((items, size is not None, loop_path, targets))
        self._edge_cache[key] = out
        return out

    def _loop_size(self, call: Mapping[str, Any], path: str) -> tuple[int | None, str | None]:
        """(items, loop field path) of a call's loop; (1, None) without one; items None when
        the size is only known at run time."""
        items = call.get("withItems")
        if isinstance(items, list):
            return len(items), join_path(path, "withItems")
        seq = call.get("withSequence")
        if isinstance(seq, Mapping):
            filled = {
                k: substitute_wf_params(v, self.wf_params) if isinstance(v, str) else v
                for k, v in seq.items()
            }
            try:
                numbers = sequence_range(filled)
            except SequenceInvalid:
                numbers = None
            return (None if numbers is None else len(numbers)), join_path(path, "withSequence")
        param = call.get("withParam")
        if isinstance(param, str) and param.strip():
            text = substitute_wf_params(param, self.wf_params)
            if "{{" not in text:
                try:
                    data = json.loads(text)
                except ValueError:
                    data = None
                if isinstance(data, list):
                    return len(data), join_path(path, "withParam")
            return None, join_path(path, "withParam")
        return 1, None
