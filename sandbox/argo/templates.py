"""Template invocation: a template's inputs, its retries, and the node it runs as (steps
and DAGs by the graph walker, suspend nodes and pods by the leaves), as Argo's controller
executes a template (workflow/controller/operator.go, executeTemplate)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from sandbox.argo import expressions
from sandbox.argo.expr import (
    DONE,
    LEAF_KINDS,
    MAX_NODE_NAME,
    as_param,
    parse_duration,
    render,
)
from sandbox.argo.graph import GraphWalker
from sandbox.argo.leaves import Leaves
from sandbox.argo.pods import PodRunner
from sandbox.argo.retry import retry_decision
from sandbox.argo.run import Ctx, Parent, RunState, StepFailed
from sandbox.store import clone


class Templates:
    """Runs a template as a node: steps and DAGs through `graph`, the leaf kinds through
    `leaves`; the daemons a steps or DAG template started stop with it (`pods`)."""

    def __init__(
        self, state: RunState, graph: GraphWalker, leaves: Leaves, pods: PodRunner
    ) -> None:
        self.state = state
        self.graph = graph
        self.leaves = leaves
        self.pods = pods

    async def execute(
        self,
        tmpl_name: str,
        args: dict[str, str],
        art_args: dict[str, Any],
        name: str,
        display: str,
        ctx: Ctx,
        parent: Parent,
        inline: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        tmpl = inline or self.state.templates.get(tmpl_name)
        if tmpl is None or len(name) > MAX_NODE_NAME:
            node = self.state.new_node(name[:MAX_NODE_NAME], display, "Pod", tmpl_name, ctx, parent)
            why = (
                f"template {tmpl_name!r} not found"
                if tmpl is None
                else "nesting too deep (recursion without an end?)"
            )
            if tmpl is None and not tmpl_name:
                why = "templateRef / WorkflowTemplates are not simulated by the sandbox"
            return self.state.finish(node, "Error", why)
        if tmpl.get("retryStrategy") is None:
            return await self.execute_once(tmpl, args, art_args, name, display, ctx, parent)
        return await self._with_retries(tmpl, tmpl_name, args, art_args, name, display, ctx, parent)

    async def _with_retries(
        self,
        tmpl: dict[str, Any],
        tmpl_name: str,
        args: dict[str, str],
        art_args: dict[str, Any],
        name: str,
        display: str,
        ctx: Ctx,
        parent: Parent,
    ) -> dict[str, Any]:
        """A template with a `retryStrategy`: a Retry node over its attempts."""
        # Argo substitutes the template's inputs into the whole template, retryStrategy
        # included, before it reads it (common.ProcessArgs in workflow/controller/operator.go
        # executeTemplate, ahead of `argoexpr.EvalBool(retryStrategy.Expression, ...)`).
        try:
            scope = self._inputs(tmpl, args, art_args, ctx)[1]
        except StepFailed:
            scope = ctx.scope  # execute_once reports the missing input
        strategy = expressions.fill(render(dict(tmpl["retryStrategy"]), scope), scope)
        retry = self.state.new_node(
            name, display, "Retry", tmpl.get("name", tmpl_name), ctx, parent
        )
        retry["phase"] = "Running"
        try:
            attempt_node, message = await self._attempts(
                tmpl, strategy, retry, args, art_args, (name, display), ctx
            )
        except asyncio.CancelledError:
            self.state.finish(retry, "Failed", self.state.shutdown_message())
            raise
        except expressions.ExprError as exc:
            return self.state.finish(retry, "Error", str(exc))
        if attempt_node.get("outputs"):
            retry["outputs"] = clone(attempt_node["outputs"])
        return self.state.finish(retry, attempt_node["phase"], message or "")

    async def _attempts(
        self,
        tmpl: dict[str, Any],
        strategy: dict[str, Any],
        retry: dict[str, Any],
        args: dict[str, str],
        art_args: dict[str, Any],
        names: tuple[str, str],
        ctx: Ctx,
    ) -> tuple[dict[str, Any], str | None]:
        """Attempts until the strategy says stop: the last attempt's node and the message
        the Retry node ends with."""
        name, display = names
        loop = asyncio.get_running_loop()
        first_started = loop.time()
        attempt = 0
        while True:
            sub = Ctx(dict(ctx.scope, retries=str(attempt)), ctx.boundary, attempt)
            attempt_node = await self.execute_once(
                tmpl,
                args,
                art_args,
                f"{name}({attempt})",
                f"{display}({attempt})",
                sub,
                retry["id"],
            )
            message, wait = retry_decision(strategy, attempt, attempt_node)
            if message is not None:
                return attempt_node, message
            if wait is not None:
                elapsed = (loop.time() - first_started) * self.state.sb.config.time_scale
                most = parse_duration((strategy.get("backoff") or {}).get("maxDuration"), 0)
                if most and elapsed + wait > most:
                    # operator.go: "Backoff would exceed max duration limit"
                    return attempt_node, "Backoff would exceed max duration limit"
                await asyncio.sleep(wait / self.state.sb.config.time_scale)
            attempt += 1

    def _input_from_config_map(self, pname: str, vf: dict[str, Any]) -> str:
        """``inputs.parameters[].valueFrom.configMapKeyRef`` from this member's ConfigMap, else
        its default (substituteAndGetConfigMapValue in workflow/common/util.go)."""
        ref = vf["configMapKeyRef"]
        value, error, not_found = self.state.member.config_map_parameter(
            self.state.namespace, ref.get("name"), ref.get("key")
        )
        if value is not None:
            return value
        if "default" in vf and not_found:
            return as_param(vf["default"])
        raise StepFailed(f"unable to retrieve inputs.parameters.{pname} from ConfigMap: {error}")

    def _inputs(
        self, tmpl: dict[str, Any], args: dict[str, str], art_args: dict[str, Any], ctx: Ctx
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        scope = dict(self.state.global_scope)
        for k, v in ctx.scope.items():
            if k.startswith("workflow."):
                scope[k] = v
        globals_ = dict(scope)  # before any input: Argo's first pass knows none
        inputs: dict[str, Any] = {}
        params = []
        for p in (tmpl.get("inputs") or {}).get("parameters") or []:
            pname = p.get("name")
            vf = p.get("valueFrom") or {}
            if pname in args:
                # Globals first: an argument may carry {{workflow.parameters.x}} the caller
                # could not fill (substituteParams in workflow/common/util.go).
                value = as_param(render(args[pname], globals_))
            elif isinstance(vf.get("configMapKeyRef"), dict):
                value = self._input_from_config_map(pname, vf)
            elif "value" in p:
                value = as_param(expressions.fill(render(p["value"], scope), scope))
            elif "default" in p:
                value = as_param(expressions.fill(render(p["default"], scope), scope))
            else:
                raise StepFailed(f"inputs.parameters.{pname} was not supplied")
            scope[f"inputs.parameters.{pname}"] = value
            params.append({"name": pname, "value": value})
        if params:
            inputs["parameters"] = params
        arts = []
        for a in (tmpl.get("inputs") or {}).get("artifacts") or []:
            art = clone(art_args.get(a.get("name"), {}))
            # The template's own name and path win over what the argument carried.
            art = dict(clone(a), **{k: v for k, v in art.items() if k not in ("name", "path")})
            art = render(art, scope)
            if a.get("path"):
                scope[f"inputs.artifacts.{a['name']}.path"] = a["path"]
            scope[f"inputs.artifacts.{a['name']}"] = art
            arts.append(art)
        outs = tmpl.get("outputs") or {}
        for p in outs.get("parameters") or []:
            if (p.get("valueFrom") or {}).get("path"):
                scope[f"outputs.parameters.{p['name']}.path"] = p["valueFrom"]["path"]
        for a in outs.get("artifacts") or []:
            if a.get("path"):
                scope[f"outputs.artifacts.{a['name']}.path"] = a["path"]
        if arts:
            inputs["artifacts"] = arts
        if params:
            scope["inputs.parameters"] = json.dumps(params)
        return inputs, scope

    async def execute_once(
        self,
        tmpl: dict[str, Any],
        args: dict[str, str],
        art_args: dict[str, Any],
        name: str,
        display: str,
        ctx: Ctx,
        parent: Parent,
    ) -> dict[str, Any]:
        tname = tmpl.get("name", "")
        if "steps" in tmpl:
            ntype = "Steps"
        elif "dag" in tmpl:
            ntype = "DAG"
        elif "suspend" in tmpl:
            ntype = "Suspend"
        else:
            ntype = "Pod"
        node = self.state.new_node(name, display, ntype, tname, ctx, parent)
        try:
            inputs, scope = self._inputs(tmpl, args, art_args, ctx)
        except StepFailed as exc:
            return self.state.finish(node, "Error", str(exc))
        if inputs:
            node["inputs"] = inputs
        # Argo's SubstituteParams (workflow/common/util.go): simple tags, then `{{= }}` tags in
        # the lenient mode (a tag that cannot be evaluated yet stays as it is).
        body = expressions.fill(
            render({k: v for k, v in tmpl.items() if k not in ("steps", "dag", "outputs")}, scope),
            scope,
        )
        scope["pod.name"] = self.state.pod_name(node)
        scope["node.name"] = name
        sub = Ctx(scope, ctx.boundary, ctx.attempt)
        try:
            if ntype == "Steps":
                try:
                    await self.graph.run_steps(tmpl, node, sub)
                finally:
                    await self.pods.stop_daemons(node["id"])
            elif ntype == "DAG":
                try:
                    await self.graph.run_dag(tmpl, node, sub)
                finally:
                    await self.pods.stop_daemons(node["id"])
            elif ntype == "Suspend":
                await self.leaves.run_suspend(body, tmpl, node, sub)
            elif any(k in tmpl for k in LEAF_KINDS):
                await self.leaves.run_leaf(body, tmpl, node, sub)
            else:
                return self.state.finish(node, "Error", f"template {tname!r} has nothing to run")
        except asyncio.CancelledError:
            if node["phase"] not in DONE:
                self.state.finish(node, "Failed", self.state.shutdown_message())
            raise
        return node
