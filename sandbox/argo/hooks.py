"""Lifecycle hooks on expressions, of a step or task and of the workflow, as Argo's controller
runs them (workflow/controller/hooks.go); exit hooks are run with the node (graph.py). The
arguments of a call (a step, a task, a hook) are resolved here too."""

from __future__ import annotations

import asyncio
import posixpath
from typing import Any

from sandbox.argo import expressions
from sandbox.argo.expr import VAR_RE, as_param, render
from sandbox.argo.run import Ctx, Execute, Parent, RunState, StepFailed
from sandbox.store import clone

# How often a running step's expression hooks are evaluated (Argo: on every reconcile).
HOOK_POLL_SECONDS = 0.1


class Hooks:
    """Arguments of a call, and the hooks that run beside a node (`execute` runs each hook's
    template)."""

    def __init__(self, state: RunState, execute: Execute) -> None:
        self.state = state
        self.execute = execute

    def call_args(
        self, call: dict[str, Any], scope: dict[str, Any]
    ) -> tuple[dict[str, str], dict[str, Any]]:
        arguments = call.get("arguments") or {}
        tmpl = call.get("inline") or self.state.templates.get(call.get("template", "")) or {}
        defaults = {
            p.get("name")
            for p in (tmpl.get("inputs") or {}).get("parameters") or []
            if "default" in p
        }
        params = {}
        for p in arguments.get("parameters") or []:
            try:
                self.absent(p.get("value", ""), scope)
            except StepFailed:
                # workflow/common/util.go substituteParams: an argument naming an absent
                # optional takes the input's default, and without one errors
                if p["name"] in defaults:
                    continue
                raise StepFailed(
                    f"inputs.parameters.{p['name']}: argument references an absent optional "
                    "(skipped/omitted node output with no default)"
                ) from None
            params[p["name"]] = as_param(self.fill(render(p.get("value", ""), scope), scope))
        self.absent(arguments.get("artifacts"), scope)
        arts: dict[str, Any] = {}
        for a in arguments.get("artifacts") or []:
            ref = a.get("from")
            if ref:
                found = scope.get(str(render(ref, scope)).strip("{} "))
                if isinstance(found, dict):
                    arts[a["name"]] = with_sub_path(
                        dict(clone(found), name=a["name"]),
                        self.fill(render(str(a.get("subPath") or ""), scope), scope),
                    )
                    continue
            arts[a["name"]] = render(clone(a), scope)
        return params, arts

    @staticmethod
    def absent(value: Any, scope: dict[str, Any]) -> None:
        """A simple tag naming a skipped or omitted node's output that has no default (an
        absent optional, None in the scope) cannot be substituted: the step errors
        (util/template/simple_template.go)."""
        if isinstance(value, str):
            for m in VAR_RE.finditer(value):
                key = m.group(1).strip()
                if key in scope and scope[key] is None:
                    raise StepFailed(
                        f"unable to substitute {{{{{key}}}}}: output is an absent optional "
                        "(skipped/omitted node with no default)"
                    )
        elif isinstance(value, dict):
            for v in value.values():
                Hooks.absent(v, scope)
        elif isinstance(value, list):
            for v in value:
                Hooks.absent(v, scope)

    @staticmethod
    def fill(value: Any, scope: dict[str, Any]) -> Any:
        """A step's or task's `{{= }}` tags, as Argo resolves a step (strict on steps/tasks);
        what Argo cannot evaluate errors the step as `failed to resolve references`."""
        try:
            return expressions.fill(value, scope, expressions.STRICT)
        except expressions.ExprError as exc:
            raise StepFailed(f"failed to resolve references: {exc}") from None

    async def with_hooks(
        self,
        running: Any,
        hooks: dict[str, Any],
        call: dict[str, Any],
        name: str,
        scope: dict[str, Any],
        boundary: str,
        parent: Parent,
    ) -> dict[str, Any]:
        """A step's or task's expression hooks (executeTmplLifeCycleHook in
        workflow/controller/hooks.go): evaluated against the step's status while it runs and
        once it ended; each runs once, as `<node>.hooks.<hook>`, and the step is done only
        when the hooks it fired are (steps.go waits for hookCompleted)."""
        task: asyncio.Future[dict[str, Any]] = asyncio.ensure_future(running)
        fired: dict[str, asyncio.Future[dict[str, Any]]] = {}
        try:
            await self._fire_hooks(task, fired, hooks, call, name, scope, boundary, parent)
        except BaseException:
            for t in (task, *fired.values()):
                t.cancel()
            raise
        if fired:
            await asyncio.gather(*fired.values())
        return task.result()

    async def _fire_hooks(
        self,
        task: asyncio.Future[dict[str, Any]],
        fired: dict[str, asyncio.Future[dict[str, Any]]],
        hooks: dict[str, Any],
        call: dict[str, Any],
        name: str,
        scope: dict[str, Any],
        boundary: str,
        parent: Parent,
    ) -> None:
        while True:
            ended = task.done()
            node = self.state.nodes.get(self.state.node_id(name)) or {}
            hook_scope = dict(scope)
            for prefix in ("steps", "tasks"):
                hook_scope[f"{prefix}.{call.get('name')}.status"] = node.get("phase", "Pending")
            for hname, hook in hooks.items():
                if hname not in fired and self._hook_due(hook, hook_scope, f"{name}.hooks.{hname}"):
                    hparams, harts = self.call_args(hook, hook_scope)
                    fired[hname] = asyncio.ensure_future(
                        self.execute(
                            hook.get("template", ""),
                            hparams,
                            harts,
                            f"{name}.hooks.{hname}",
                            f"{name}.hooks.{hname}",
                            Ctx(hook_scope, boundary),
                            parent,
                        )
                    )
            if ended:
                return
            await self.state.wait_change(task, HOOK_POLL_SECONDS)

    async def await_main(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The entrypoint's node once it ended, with the workflow's expression hooks
        (executeWfLifeCycleHook in workflow/controller/hooks.go): evaluated against the
        workflow's scope (`workflow.status` is Running until it ends) while it runs; each runs
        once, as `<workflow>.hooks.<hook>`, and is waited for before the exit handler."""
        assert self.state.main is not None
        hooks = {k: v for k, v in (spec.get("hooks") or {}).items() if k != "exit"}
        if not hooks:
            return await self.state.main
        main = self.state.main
        fired: dict[str, asyncio.Future[dict[str, Any]]] = {}
        try:
            while True:
                ended = main.done()
                scope = dict(self.state.global_scope, **{"workflow.status": "Running"})
                for hname, hook in hooks.items():
                    where = f"{self.state.name}.hooks.{hname}"
                    if hname not in fired and self._hook_due(hook, scope, where):
                        params, arts = self.call_args(hook, scope)
                        fired[hname] = asyncio.ensure_future(
                            self.execute(
                                hook.get("template", ""),
                                params,
                                arts,
                                where,
                                where,
                                Ctx(scope, None),
                                self.state.node_id(self.state.name),
                            )
                        )
                if ended:
                    break
                await self.state.wait_change(main, HOOK_POLL_SECONDS)
        except BaseException:
            for t in (main, *fired.values()):
                t.cancel()
            raise
        if fired:
            await asyncio.gather(*fired.values())
        return main.result()

    def _hook_due(self, hook: dict[str, Any], scope: dict[str, Any], where: str) -> bool:
        """Whether a hook's expression holds now: Argo's expr language over the step's scope
        (argoexpr.EvalBool in workflow/controller/hooks.go), which reads `steps["x"].status`
        and `steps.x.status` alike; an expression that does not evaluate to a boolean errors
        the step, as a hook error marks the node Error in Argo."""
        expression = str(hook.get("expression") or "")
        if not expression:
            raise StepFailed(f"Expression required for hook {where}")
        try:
            return expressions.evaluate_bool(expression, scope)
        except expressions.ExprError as exc:
            raise StepFailed(f"hook {where}: {exc}") from exc


def with_sub_path(art: dict[str, Any], sub: str) -> dict[str, Any]:
    """An artifact argument's `subPath` joined to the key of the artifact it names
    (`resolveArtifact` in workflow/controller/scope.go, `ArtifactLocation.AppendToKey`): an
    `archive: none` folder is read below it, a tarball's key with it does not exist."""
    if not sub:
        return art
    for kind in ("s3", "gcs", "oss", "azure", "hdfs", "artifactory", "git", "http"):
        loc = art.get(kind)
        if isinstance(loc, dict) and "key" in loc:
            loc["key"] = posixpath.join(str(loc["key"]), sub)
            return art
    return art
