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
  catalogue) is counted to Argo's stack depth (``maxAllowedStackDepth`` = 100 in
  `workflow/controller/controller.go`: past it ``executeTemplate`` errors the node, "Maximum
  recursion depth exceeded", and creates no pod), so a recursion that calls itself once per
  level counts its pods a hundred times and one that calls itself twice is refused.
* Retries are not counted: attempts run one after another, each bounded by its own limit.

Counts saturate just past the limit, so a fan-out of fan-outs is refused by arithmetic on a few
integers, never by building anything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from placement.parser.arguments import _substitute_wf_params
from placement.parser.errors import _join
from placement.parser.expansion import SequenceInvalid, sequence_range
from placement.parser.references import _TemplateIndex

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
        self, index: _TemplateIndex, wf_params: Mapping[str, str], cap: int, unknown_items: int
    ) -> None:
        self.index = index
        self.wf_params = wf_params
        # Counts stay exact far past the limit (the message says how far), and small.
        self.cap = max(cap, 1) * 1_000_000
        self.unknown_items = unknown_items
        self._memo: dict[tuple[str, int], PodCount] = {}
        self._stack: list[str] = []

    def count(self, key: str) -> PodCount:
        return self._count(key, 1)

    def shown(self, pods: int) -> str:
        return f"more than {self.cap - 1}" if pods >= self.cap else str(pods)

    def _count(self, key: str, depth: int) -> PodCount:
        if depth >= ARGO_MAX_STACK_DEPTH:
            return PodCount(0)
        memo = self._memo.get((key, depth))
        if memo is not None:
            return memo
        t = self.index.templates.get(key)
        if not isinstance(t, Mapping):
            return PodCount(0)
        recursion = key if key in self._stack else None
        self._stack.append(key)
        try:
            found = self._template(t, key, depth)
        finally:
            self._stack.pop()
        if recursion and not found.recursion:
            found = PodCount(found.pods, found.loops, recursion)
        self._memo[(key, depth)] = found
        return found

    def _template(self, t: Mapping[str, Any], key: str, depth: int) -> PodCount:
        if any(t.get(k) is not None for k in _POD_LEAVES):
            return PodCount(1)
        total = 0
        heaviest = PodCount(0)
        recursion: str | None = None
        scope = self.index.scopes.get(key, "")
        hooks = t.get("hooks")
        calls = list(self.index.calls(key))
        for name, hook in hooks.items() if isinstance(hooks, Mapping) else ():
            if isinstance(hook, Mapping):
                where = _join(_join(self.index.template_paths[key], "hooks"), str(name))
                calls.append(("hook", hook, where))
        for _kind, call, path in calls:
            size, loop_path = self._loop_size(call, path)
            inner = 0
            inner_heaviest = PodCount(0)
            for target in self.index._targets(call, scope, path):
                sub = self._count(target, depth + 1)
                inner = min(inner + sub.pods, self.cap)
                recursion = recursion or sub.recursion
                if sub.pods > inner_heaviest.pods:
                    inner_heaviest = sub
            items = self.unknown_items if size is None else size
            pods = min(inner * items, self.cap)
            total = min(total + pods, self.cap)
            if pods > heaviest.pods:
                loops = inner_heaviest.loops
                if loop_path is not None:
                    loops = ((loop_path, items, size is not None), *loops)
                heaviest = PodCount(pods, loops)
        return PodCount(total, heaviest.loops, recursion)

    def _loop_size(self, call: Mapping[str, Any], path: str) -> tuple[int | None, str | None]:
        """(items, loop field path) of a call's loop; (1, None) without one; items None when
        the size is only known at run time."""
        items = call.get("withItems")
        if isinstance(items, list):
            return len(items), _join(path, "withItems")
        seq = call.get("withSequence")
        if isinstance(seq, Mapping):
            filled = {
                k: _substitute_wf_params(v, self.wf_params) if isinstance(v, str) else v
                for k, v in seq.items()
            }
            try:
                numbers = sequence_range(filled)
            except SequenceInvalid:
                numbers = None
            return (None if numbers is None else len(numbers)), _join(path, "withSequence")
        param = call.get("withParam")
        if isinstance(param, str) and param.strip():
            text = _substitute_wf_params(param, self.wf_params)
            if "{{" not in text:
                try:
                    data = json.loads(text)
                except ValueError:
                    data = None
                if isinstance(data, list):
                    return len(data), _join(path, "withParam")
            return None, _join(path, "withParam")
        return 1, None
