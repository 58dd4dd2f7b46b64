"""The graph walker: the nodes of `steps` and `dag` templates, their loops, conditions and
results, as Argo's controller walks them (workflow/controller/steps.go, dag.go)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from sandbox.argo import expressions
from sandbox.argo.dag import Dag
from sandbox.argo.expr import (
    FAILED,
    ExprError,
    as_param,
    evaluate,
    literal_json,
    render,
)
from sandbox.argo.hooks import Hooks
from sandbox.argo.run import Ctx, Execute, Parent, RunState, StepFailed
from sandbox.store import clone


class GraphWalker:
    """Runs a steps or DAG template's children through `execute`, with their hooks."""

    def __init__(self, state: RunState, hooks: Hooks, execute: Execute) -> None:
        self.state = state
        self.hooks = hooks
        self.execute = execute

    def _expand(self, step: dict[str, Any], scope: dict[str, Any]) -> list[Any] | None:
        for key in ("withItems", "withParam"):
            self.hooks.absent(step.get(key), scope)
        if "withItems" in step:
            return list(self.hooks.fill(render(step["withItems"], scope), scope) or [])
        if "withParam" in step:
            raw = self.hooks.fill(render(step["withParam"], scope), scope)
            if isinstance(raw, list):
                return raw
            if str(raw).strip() == "":
                return []
            try:
                items = json.loads(raw)
            except ValueError as exc:
                raise StepFailed(
                    f"withParam value could not be parsed as a JSON list: {raw}"
                ) from exc
            if not isinstance(items, list):
                raise StepFailed(f"withParam value is not a JSON list: {raw}")
            return items
        if "withSequence" in step:
            seq = self.hooks.fill(render(step["withSequence"], scope), scope)
            fmt = seq.get("format")
            if "count" in seq:
                start = int(seq.get("start", 0))
                nums = list(range(start, start + int(seq["count"])))
            else:
                start, end = int(seq.get("start", 0)), int(seq.get("end", 0))
                nums = (
                    list(range(start, end + 1)) if end >= start else list(range(start, end - 1, -1))
                )
            return [fmt % n if fmt else str(n) for n in nums]
        return None

    @staticmethod
    def _item_scope(item: Any) -> dict[str, Any]:
        scope: dict[str, Any] = {"item": as_param(item)}
        if isinstance(item, dict):
            for k, v in item.items():
                scope[f"item.{k}"] = as_param(v)
        return scope

    @staticmethod
    def _item_label(item: Any) -> str:
        if isinstance(item, dict):
            return ",".join(f"{k}:{as_param(v)}" for k, v in sorted(item.items()))
        return as_param(item)

    def _record(
        self,
        scope: dict[str, Any],
        prefix: str,
        node: dict[str, Any],
        group: list[dict[str, Any]] | None = None,
    ) -> None:
        """Make a finished step/task's results visible as {{steps.X...}} / {{tasks.X...}}."""
        scope[f"{prefix}.status"] = node["phase"]
        if node.get("podIP"):
            scope[f"{prefix}.ip"] = node["podIP"]
        scope[f"{prefix}.id"] = node["id"]
        scope[f"{prefix}.startedAt"] = node.get("startedAt", "")
        scope[f"{prefix}.finishedAt"] = node.get("finishedAt", "")
        if group is not None:
            values: dict[str, list[Any]] = {}
            results = []
            for child in group:
                outs = child.get("outputs") or {}
                for p in outs.get("parameters") or []:
                    values.setdefault(p["name"], []).append(p["value"])
                if "result" in outs:
                    results.append(literal_json(outs["result"]))
            for pname, vals in values.items():
                scope[f"{prefix}.outputs.parameters.{pname}"] = json.dumps(vals)
            scope[f"{prefix}.outputs.parameters"] = json.dumps(
                [
                    {
                        p["name"]: p["value"]
                        for p in (c.get("outputs") or {}).get("parameters") or []
                    }
                    for c in group
                ]
            )
            scope[f"{prefix}.outputs.result"] = json.dumps(results)
            return
        if node["phase"] in ("Skipped", "Omitted") and not node.get("outputs"):
            self._record_absent(scope, prefix, node)
        outs = node.get("outputs") or {}
        for p in outs.get("parameters") or []:
            scope[f"{prefix}.outputs.parameters.{p['name']}"] = p["value"]
        for a in outs.get("artifacts") or []:
            scope[f"{prefix}.outputs.artifacts.{a['name']}"] = a
        if "result" in outs:
            scope[f"{prefix}.outputs.result"] = outs["result"]
        if "exitCode" in outs:
            scope[f"{prefix}.exitCode"] = outs["exitCode"]

    def _record_absent(self, scope: dict[str, Any], prefix: str, node: dict[str, Any]) -> None:
        """A skipped or omitted node's declared output parameters: the producer's default, else
        an absent (None) value an expression can replace with `??`
        (workflow/controller/scope.go `addSkippedNodeOutputsToScope`)."""
        tmpl = self.state.templates.get(node.get("templateName")) or {}
        for p in (tmpl.get("outputs") or {}).get("parameters") or []:
            vf = p.get("valueFrom") or {}
            value = as_param(vf["default"]) if "default" in vf else None
            scope[f"{prefix}.outputs.parameters.{p['name']}"] = value

    async def _call(
        self,
        call: dict[str, Any],
        name: str,
        display: str,
        scope: dict[str, Any],
        boundary: str,
        parent: Parent,
    ) -> dict[str, Any]:
        params, arts = self.hooks.call_args(call, scope)
        running = self.execute(
            call.get("template", ""),
            params,
            arts,
            name,
            display,
            Ctx(scope, boundary),
            parent,
            inline=call.get("inline"),
        )
        hooks = {k: v for k, v in (call.get("hooks") or {}).items() if k != "exit"}
        if hooks:
            node = await self.hooks.with_hooks(running, hooks, call, name, scope, boundary, parent)
        else:
            node = await running
        hook = (call.get("hooks") or {}).get("exit") or {}
        exit_tmpl = hook.get("template") or call.get("onExit")
        if exit_tmpl:
            hook_scope = dict(scope)
            prefix = "steps" if "[" in name.rsplit(".", 1)[0][-4:] or "]" in name else "tasks"
            self._record(hook_scope, f"{prefix}.{call.get('name')}", node)
            self._record(hook_scope, f"steps.{call.get('name')}", node)
            self._record(hook_scope, f"tasks.{call.get('name')}", node)
            hparams, harts = self.hooks.call_args(hook, hook_scope)
            await self.execute(
                exit_tmpl,
                hparams,
                harts,
                f"{name}.onExit",
                f"{display}.onExit",
                Ctx(hook_scope, boundary),
                parent,
            )
        return node

    async def _run_expanded(
        self,
        call: dict[str, Any],
        base: str,
        display: str,
        scope: dict[str, Any],
        boundary: str,
        parent: Parent,
        when_ok: Callable[[dict[str, Any]], bool],
    ) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
        """One step or task, with its loop expanded; returns (node, loop children)."""
        items = self._expand(call, scope)
        if items is None:
            if not when_ok(scope):
                skipped = self.state.new_node(
                    base, display, "Skipped", call.get("template", ""), Ctx(scope, boundary), parent
                )
                when = self.hooks.fill(render(call.get("when"), scope), scope)
                return self.state.finish(skipped, "Skipped", f"when '{when}' evaluated false"), None
            return await self._call(call, base, display, scope, boundary, parent), None
        group = self.state.new_node(
            base, display, "TaskGroup", call.get("template", ""), Ctx(scope, boundary), parent
        )
        group["phase"] = "Running"
        coros = []
        for i, item in enumerate(items):
            item_scope = dict(scope, **self._item_scope(item))
            label = f"({i}:{self._item_label(item)})"
            if not when_ok(item_scope):
                skipped = self.state.new_node(
                    f"{base}{label}",
                    f"{display}{label}",
                    "Skipped",
                    call.get("template", ""),
                    Ctx(item_scope, boundary),
                    group["id"],
                )
                self.state.finish(skipped, "Skipped", "when evaluated false")
                continue
            coros.append(
                self._call(
                    call, f"{base}{label}", f"{display}{label}", item_scope, boundary, group["id"]
                )
            )
        children = list(await asyncio.gather(*coros))
        failed = [c for c in children if c["phase"] in FAILED]
        if failed:
            self.state.finish(group, "Failed", f"child '{failed[0]['name']}' failed")
        else:
            self.state.finish(group, "Succeeded" if children or not items else "Skipped")
        return group, children

    def _when(self, call: dict[str, Any]) -> Callable[[dict[str, Any]], bool]:
        cond = call.get("when")
        if not cond:
            return lambda scope: True

        def check(scope: dict[str, Any]) -> bool:
            self.hooks.absent(str(cond), scope)
            text = self.hooks.fill(render(str(cond), scope), scope)
            if "{{=" in text:
                # A tag left unresolved (a variable outside steps/tasks that the scope lacks)
                # reaches govaluate as it is, which cannot read it (steps.go shouldExecute).
                raise StepFailed(f"Invalid 'when' expression '{text}': Invalid token: '{{{{='")
            if "{{" in text:
                # A variable that never got a value (e.g. the result of a step that printed
                # nothing) cannot satisfy a comparison.
                return False
            try:
                return evaluate(text)
            except ExprError:
                return False

        return check

    async def run_steps(self, tmpl: dict[str, Any], node: dict[str, Any], ctx: Ctx) -> None:
        node["phase"] = "Running"
        scope = ctx.scope
        prev = node["id"]
        failed_msg = ""
        for i, group in enumerate(tmpl.get("steps") or []):
            gname = f"{node['name']}[{i}]"
            gnode = self.state.new_node(
                gname, f"[{i}]", "StepGroup", tmpl.get("name", ""), Ctx(scope, node["id"]), prev
            )
            gnode["phase"] = "Running"
            prev = gnode["id"]
            steps = group if isinstance(group, list) else [group]

            async def one(
                step: dict[str, Any], gn: dict[str, Any] = gnode
            ) -> tuple[dict[str, Any], dict[str, Any], list[Any] | None]:
                n, children = await self._run_expanded(
                    step,
                    f"{gn['name']}.{step['name']}",
                    step["name"],
                    scope,
                    node["id"],
                    gn["id"],
                    self._when(step),
                )
                return step, n, children

            try:
                results = await asyncio.gather(*(one(s) for s in steps))
            except StepFailed as exc:
                # steps.go executeSteps: an errored step group makes the steps template
                # Failed with the group's message
                self.state.finish(gnode, "Error", str(exc))
                self.state.finish(node, "Failed", str(exc))
                return
            bad = []
            for step, n, children in results:
                self._record(scope, f"steps.{step['name']}", n, children)
                cont = step.get("continueOn") or {}
                if n["phase"] == "Failed" and cont.get("failed"):
                    continue
                if n["phase"] == "Error" and cont.get("error"):
                    continue
                if n["phase"] in FAILED:
                    bad.append(n)
            if bad:
                failed_msg = f"child '{bad[0]['id']}' failed"
                self.state.finish(gnode, "Failed", failed_msg)
                self.state.finish(node, "Failed", failed_msg)
                return
            self.state.finish(gnode, "Succeeded")
        try:
            self._template_outputs(tmpl, node, scope)
        except StepFailed as exc:
            self.state.finish(node, "Error", str(exc))
            return
        self.state.finish(node, "Succeeded")

    def _template_outputs(
        self, tmpl: dict[str, Any], node: dict[str, Any], scope: dict[str, Any]
    ) -> None:
        outs = tmpl.get("outputs") or {}
        if not outs:
            return
        result: dict[str, Any] = {}
        params = []
        for p in outs.get("parameters") or []:
            vf = p.get("valueFrom") or {}
            if "expression" in vf:
                value = self._output_expression(str(vf["expression"]), vf, scope)
                params.append({"name": p["name"], "value": value})
                if p.get("globalName"):
                    self.state.global_scope[f"workflow.outputs.parameters.{p['globalName']}"] = (
                        value
                    )
                continue
            raw = vf.get("parameter", p.get("value", vf.get("default", "")))
            value = as_param(render(raw, scope))
            if "{{" in value and "default" in vf:
                value = as_param(vf["default"])
            params.append({"name": p["name"], "value": value})
            if p.get("globalName"):
                self.state.global_scope[f"workflow.outputs.parameters.{p['globalName']}"] = value
        if params:
            result["parameters"] = params
        arts = []
        for a in outs.get("artifacts") or []:
            ref = scope.get(str(render(a.get("from", ""), scope)).strip("{} "))
            if isinstance(ref, dict):
                arts.append(dict(clone(ref), name=a["name"]))
        if arts:
            result["artifacts"] = arts
        if result:
            node["outputs"] = result

    @staticmethod
    def _output_expression(expression: str, vf: dict[str, Any], scope: dict[str, Any]) -> str:
        """An output parameter's `valueFrom.expression` (workflow/controller/scope.go
        `resolveParameter`): a nil value or an error takes `default` when there is one, else
        the node errors (`getTemplateOutputsFromScope`)."""
        try:
            value = expressions.evaluate(expression, scope)
            if value is None:
                raise expressions.ExprError(f'failed to evaluate expression "{expression}"')
        except expressions.ExprError as exc:
            if "default" in vf:
                return as_param(vf["default"])
            raise StepFailed(f"unable to resolve outputs from scope: {exc}") from None
        return expressions.render(value)

    async def run_dag(self, tmpl: dict[str, Any], node: dict[str, Any], ctx: Ctx) -> None:
        node["phase"] = "Running"
        self.state.touch()
        dag = tmpl.get("dag") or {}
        st = Dag(node, ctx.scope, {t["name"]: t for t in dag.get("tasks") or []})
        fail_fast = dag.get("failFast", True) is not False
        try:
            while len(st.results) < len(st.tasks):
                stop = fail_fast and bool(st.unhandled)
                for tname, t in st.tasks.items():
                    if tname not in st.results and tname not in st.running:
                        self._dag_start(st, tname, t, stop)
                if len(st.results) == len(st.tasks) or not st.running:
                    break
                done, _ = await asyncio.wait(
                    st.running.values(), return_when=asyncio.FIRST_COMPLETED
                )
                for tname in [n for n, tk in st.running.items() if tk in done]:
                    self._dag_collect(st, tname)
        except asyncio.CancelledError:
            for tk in st.running.values():
                tk.cancel()
            await asyncio.gather(*st.running.values(), return_exceptions=True)
            raise
        if st.error:
            self.state.finish(node, "Error", st.error)
            return
        if st.unhandled:
            self.state.finish(node, "Failed", f"child '{st.unhandled[0]['id']}' failed")
            return
        try:
            self._template_outputs(tmpl, node, st.scope)
        except StepFailed as exc:
            self.state.finish(node, "Error", str(exc))
            return
        self.state.finish(node, "Succeeded")

    def _dag_start(self, st: Dag, tname: str, t: dict[str, Any], stop: bool) -> None:
        """Start a task whose dependencies are done, or omit it."""
        if not st.deps[tname] <= set(st.results):
            return
        try:
            ok = evaluate(st.exprs[tname], st.task_state) if st.exprs[tname] else True
        except ExprError as exc:
            st.error = f"invalid depends of task {tname}: {exc}"
            ok = False
        node = st.node
        if not ok or stop or st.error:
            omitted = self.state.new_node(
                f"{node['name']}.{tname}",
                tname,
                "Skipped",
                t.get("template", ""),
                Ctx(st.scope, node["id"]),
                st.parents(tname),
            )
            st.results[tname] = self.state.finish(
                omitted, "Omitted", "omitted: depends condition not met"
            )
            st.loops[tname] = None
            # its outputs are absent optionals, as a skipped task's (scope.go)
            self._record(st.scope, f"tasks.{tname}", omitted, None)
            return
        st.running[tname] = asyncio.ensure_future(
            self._run_expanded(
                t,
                f"{node['name']}.{tname}",
                tname,
                st.scope,
                node["id"],
                st.parents(tname),
                self._when(t),
            )
        )

    def _dag_collect(self, st: Dag, tname: str) -> None:
        """Record a finished task: its results in scope, its failure if nothing handles it."""
        tk = st.running.pop(tname)
        node = st.node
        try:
            tnode, children = tk.result()
        except StepFailed as exc:
            st.error = str(exc)
            tnode = self.state.finish(
                self.state.new_node(
                    f"{node['name']}.{tname}",
                    tname,
                    "Pod",
                    st.tasks[tname].get("template", ""),
                    Ctx(st.scope, node["id"]),
                    st.parents(tname),
                ),
                "Error",
                str(exc),
            )
            children = None
        st.results[tname] = tnode
        st.loops[tname] = children
        self._record(st.scope, f"tasks.{tname}", tnode, children)
        if tnode["phase"] in FAILED and tname not in st.handled:
            st.unhandled.append(tnode)
