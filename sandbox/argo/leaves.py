"""Template invocation, retries, inputs and the leaves (pods and suspend nodes)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from sandbox import executor
from sandbox.argo import expressions
from sandbox.argo.expr import (
    DONE,
    LEAF_KINDS,
    MAX_NODE_NAME,
    as_param,
    parse_duration,
    render,
    template_requests,
)
from sandbox.argo.pods import NotRunnable, Pods, containers_of
from sandbox.argo.retry import retry_decision
from sandbox.argo.run import Ctx, Parent, StepFailed
from sandbox.pod import Tail
from sandbox.simulated import outcome as outcome_of_simulated
from sandbox.store import clone, now_iso


class Leaves(Pods):
    # -- execution ----------------------------------------------------------------------------
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
        tmpl = inline or self.templates.get(tmpl_name)
        if tmpl is None or len(name) > MAX_NODE_NAME:
            node = self.new_node(name[:MAX_NODE_NAME], display, "Pod", tmpl_name, ctx, parent)
            why = (
                f"template {tmpl_name!r} not found"
                if tmpl is None
                else "nesting too deep (recursion without an end?)"
            )
            if tmpl is None and not tmpl_name:
                why = "templateRef / WorkflowTemplates are not simulated by the sandbox"
            return self.finish(node, "Error", why)
        strategy = tmpl.get("retryStrategy")
        if strategy is None:
            return await self.execute_once(tmpl, args, art_args, name, display, ctx, parent)
        # Argo substitutes the template's inputs into the whole template, retryStrategy
        # included, before it reads it (common.ProcessArgs in workflow/controller/operator.go
        # executeTemplate, ahead of `argoexpr.EvalBool(retryStrategy.Expression, ...)`).
        try:
            scope = self._inputs(tmpl, args, art_args, ctx)[1]
        except StepFailed:
            scope = ctx.scope  # execute_once reports the missing input
        strategy = expressions.fill(render(dict(strategy), scope), scope)
        retry = self.new_node(name, display, "Retry", tmpl.get("name", tmpl_name), ctx, parent)
        retry["phase"] = "Running"
        attempt_node: dict[str, Any] = retry
        message: str | None = None
        loop = asyncio.get_running_loop()
        first_started = loop.time()
        attempt = 0
        try:
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
                    break
                if wait is not None:
                    elapsed = (loop.time() - first_started) * self.sb.config.time_scale
                    most = parse_duration((strategy.get("backoff") or {}).get("maxDuration"), 0)
                    if most and elapsed + wait > most:
                        # operator.go: "Backoff would exceed max duration limit"
                        message = "Backoff would exceed max duration limit"
                        break
                    await asyncio.sleep(wait / self.sb.config.time_scale)
                attempt += 1
        except asyncio.CancelledError:
            self.finish(retry, "Failed", self._shutdown_message())
            raise
        except expressions.ExprError as exc:
            return self.finish(retry, "Error", str(exc))
        if attempt_node.get("outputs"):
            retry["outputs"] = clone(attempt_node["outputs"])
        return self.finish(retry, attempt_node["phase"], message or "")

    def _shutdown_message(self) -> str:
        if self.deadline_exceeded:
            return "Step exceeded its deadline"
        return (
            f"workflow shutdown with strategy:  {self.shutdown}"
            if self.shutdown
            else "workflow deleted"
        )

    def _input_from_config_map(self, pname: str, vf: dict[str, Any]) -> str:
        """``inputs.parameters[].valueFrom.configMapKeyRef`` from this member's ConfigMap, else
        its default (substituteAndGetConfigMapValue in workflow/common/util.go)."""
        ref = vf["configMapKeyRef"]
        value, error, not_found = self.member.config_map_parameter(
            self.namespace, ref.get("name"), ref.get("key")
        )
        if value is not None:
            return value
        if "default" in vf and not_found:
            return as_param(vf["default"])
        raise StepFailed(f"unable to retrieve inputs.parameters.{pname} from ConfigMap: {error}")

    def _inputs(
        self, tmpl: dict[str, Any], args: dict[str, str], art_args: dict[str, Any], ctx: Ctx
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        scope = dict(self.global_scope)
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
        node = self.new_node(name, display, ntype, tname, ctx, parent)
        try:
            inputs, scope = self._inputs(tmpl, args, art_args, ctx)
        except StepFailed as exc:
            return self.finish(node, "Error", str(exc))
        if inputs:
            node["inputs"] = inputs
        # Argo's SubstituteParams (workflow/common/util.go): simple tags, then `{{= }}` tags in
        # the lenient mode (a tag that cannot be evaluated yet stays as it is).
        body = expressions.fill(
            render({k: v for k, v in tmpl.items() if k not in ("steps", "dag", "outputs")}, scope),
            scope,
        )
        scope["pod.name"] = self.pod_name(node)
        scope["node.name"] = name
        sub = Ctx(scope, ctx.boundary, ctx.attempt)
        try:
            if ntype == "Steps":
                try:
                    await self.run_steps(tmpl, node, sub)
                finally:
                    await self.stop_daemons(node["id"])
            elif ntype == "DAG":
                try:
                    await self.run_dag(tmpl, node, sub)
                finally:
                    await self.stop_daemons(node["id"])
            elif ntype == "Suspend":
                await self.run_suspend(body, tmpl, node, sub)
            elif any(k in tmpl for k in LEAF_KINDS):
                await self.run_leaf(body, tmpl, node, sub)
            else:
                return self.finish(node, "Error", f"template {tname!r} has nothing to run")
        except asyncio.CancelledError:
            if node["phase"] not in DONE:
                self.finish(node, "Failed", self._shutdown_message())
            raise
        return node

    # leaves ---------------------------------------------------------------------------------
    def _leaf_outputs(
        self, tmpl: dict[str, Any], node: dict[str, Any], scope: dict[str, Any], failed: bool
    ) -> None:
        given_raw = self.annotation(tmpl, "outputs")
        try:
            given = json.loads(given_raw) if given_raw else {}
        except ValueError:
            given = {}
        outputs: dict[str, Any] = {}
        params = []
        for p in (tmpl.get("outputs") or {}).get("parameters") or []:
            pname = p.get("name")
            vf = p.get("valueFrom") or {}
            if pname in given:
                value = as_param(given[pname])
            elif "value" in p:
                value = as_param(render(p["value"], scope))
            elif "default" in vf:
                value = as_param(render(vf["default"], scope))
            elif "parameter" in vf:
                value = as_param(render(vf["parameter"], scope))
            else:
                value = f"{pname}-{node['id']}"
            params.append(
                {
                    "name": pname,
                    "value": value,
                    **({"globalName": p["globalName"]} if p.get("globalName") else {}),
                }
            )
            if p.get("globalName"):
                self.global_scope[f"workflow.outputs.parameters.{p['globalName']}"] = value
        if params:
            outputs["parameters"] = params
        arts = []
        for a in (tmpl.get("outputs") or {}).get("artifacts") or []:
            if failed and not a.get("optional"):
                continue
            if a.get("from"):
                ref = scope.get(str(a["from"]).strip("{} "))
                art = dict(clone(ref), name=a["name"]) if isinstance(ref, dict) else clone(a)
            else:
                # Exactly what the executing path records (pods.py `_save_outputs`), as Argo's
                # executor does since v3: name, path, archive and a key-only location (the
                # repository is the workflow's status.artifactRepositoryRef), or the output's
                # own location in full when it has one (bucket and endpoint); no size (Argo
                # records none).
                none = (a.get("archive") or {}).get("none") is not None
                own = a.get("s3") or {}
                key = own.get("key") or (
                    f"{self.name}/{node['id']}/{a['name']}{'' if none else '.tgz'}"
                )
                art = {k: clone(v) for k, v in a.items() if k in ("name", "path", "archive")}
                located = own.get("bucket") and own.get("endpoint")
                if (a.get("http") or {}).get("url"):
                    art["http"] = clone(a["http"])  # a pre-signed PUT: recorded as declared
                else:
                    art["s3"] = {**clone(own), "key": key} if located else {"key": key}
            arts.append(art)
        if arts:
            outputs["artifacts"] = arts
        result = self.annotation(tmpl, "result")
        if result is None and "result" in given:
            result = as_param(given["result"])
        if result is None and "script" in tmpl:
            # Argo captures a script's stdout as its result; the sandbox runs nothing, so the
            # script printed nothing unless an annotation says what it printed.
            result = ""
        if result is not None:
            outputs["result"] = result
        outputs["exitCode"] = self.annotation(tmpl, "exit-code") or ("1" if failed else "0")
        if failed and outputs["exitCode"] == "0":
            outputs["exitCode"] = "1"
        node["outputs"] = outputs

    def _failure(self, tmpl: dict[str, Any], ctx: Ctx, fault: str | None) -> str | None:
        """Why the leaf fails: ``fault`` as read when it started (a fault with a ``count`` is
        used up by reading it: read again, it would spare this leaf), else one set since,
        else its annotations."""
        msg = fault or self._fault(tmpl)
        if msg:
            return msg
        fail = self.annotation(tmpl, "fail")
        if fail and fail.lower() not in ("false", "0", "no"):
            return "Error (exit code 1)" if fail.lower() in ("true", "1", "yes") else fail
        attempts = self.annotation(tmpl, "fail-attempts")
        if attempts and attempts.isdigit() and ctx.attempt < int(attempts):
            return f"Error (exit code 1): failing attempt {ctx.attempt} of {attempts}"
        return None

    async def run_leaf(
        self, body: dict[str, Any], tmpl: dict[str, Any], node: dict[str, Any], ctx: Ctx
    ) -> None:
        if self.parallel is not None:
            async with self.parallel:
                await self._run_leaf(body, tmpl, node, ctx)
        else:
            await self._run_leaf(body, tmpl, node, ctx)

    async def _run_leaf(
        self, body: dict[str, Any], tmpl: dict[str, Any], node: dict[str, Any], ctx: Ctx
    ) -> None:
        await self.unsuspended.wait()
        if "http" in tmpl or "plugin" in tmpl:
            # Argo runs these in the workflow's one agent pod (workflow/controller/agent.go),
            # not in a pod of their own: nothing to count against the quota.
            await self._run_pod_leaf(body, tmpl, node, ctx)
            return
        await self.admit_pod(node)
        daemon = False
        try:
            daemon = await self._run_pod_leaf(body, tmpl, node, ctx)
        finally:
            if not daemon:
                self.pod_ended()

    async def _run_pod_leaf(
        self, body: dict[str, Any], tmpl: dict[str, Any], node: dict[str, Any], ctx: Ctx
    ) -> bool:
        """The leaf's pod, once created, to its end; True when it goes on as a daemon (its
        quota and lease are freed when the daemon ends)."""
        req = template_requests(body)

        def waiting(msg: str) -> None:
            node["message"] = msg
            self.touch()

        while (unbound := self.missing_claims(body)) is not None:
            if node.get("message") != unbound:
                waiting(unbound)
            await asyncio.sleep(1.0)
        lease = await self.member.acquire(req, waiting)
        started = asyncio.get_running_loop().time()
        runner = self.runner(body)
        real: tuple[str, str] | None = None
        try:
            node.pop("message", None)
            node["phase"] = "Running"
            node["startedAt"] = now_iso()
            node["hostNodeName"] = self.member.node_of(lease)
            self.touch()
            fault = self._fault(tmpl)
            if runner is not None and fault is None and tmpl.get("daemon"):
                # The lease and the quota are the daemon's until its scope ends.
                def release() -> None:
                    self.member.release(lease)
                    self.pod_ended()

                self.start_daemon(body, tmpl, node, runner, ctx, release)
                return True
            if runner is not None and fault is None:
                real = await self._run_real(body, tmpl, node, runner, ctx.scope)
            else:
                await asyncio.sleep(self._duration(tmpl) / self.sb.config.time_scale)
        except asyncio.CancelledError:
            self._account(node, req, started)
            self.member.release(lease)
            raise
        self._account(node, req, started)
        self.member.release(lease)
        if real is not None:
            self.finish(node, real[0], real[1])
            return False
        failure = self._failure(tmpl, ctx, fault)
        simulated: tuple[str, str] | None = None
        if (
            not failure
            and self.sb.config.execute
            and any(k in tmpl for k in ("container", "script", "containerSet"))
        ):
            images = self.member.execution.images
            simulated = outcome_of_simulated(
                [
                    c
                    for c in containers_of(body)
                    if executor.runner_for(str(c.get("image") or ""), images) is None
                ],
                self.member.execution.simulated,
            )
        failed = failure is not None or (simulated is not None and simulated[0] != "Succeeded")
        self._leaf_outputs(tmpl, node, ctx.scope, failed=failed)
        self._simulated_log(node)
        if failure:
            self.finish(node, "Failed", failure)
        elif simulated is not None:
            self.finish(node, *simulated)
        else:
            self.finish(node, "Succeeded")
        return False

    def _simulated_log(self, node: dict[str, Any]) -> None:
        """A simulated pod's log is what it is said to have printed: its ``result``, so the
        pod log API (and the cluster proxy) serve what the node's outputs show."""
        result = (node.get("outputs") or {}).get("result")
        if result is None:
            return
        log = Tail(executor.LOG_BYTES)
        log.write(f"{result}\n".encode())
        self.member.keep_log(self.namespace, self.pod_name(node), log)

    async def _run_real(
        self,
        body: dict[str, Any],
        tmpl: dict[str, Any],
        node: dict[str, Any],
        runner: str,
        scope: dict[str, Any],
    ) -> tuple[str, str]:
        while True:
            try:
                return await self.run_pod(body, tmpl, node, runner, scope)
            except NotRunnable as exc:
                # The kubelet keeps trying; the node stays Pending with its reason
                # (getPendingReason, workflow/controller/operator.go).
                if node.get("message") != str(exc) or node["phase"] != "Pending":
                    node["phase"] = "Pending"
                    node["message"] = str(exc)
                    self.touch()
                await asyncio.sleep(1.0)
            if node["phase"] == "Pending":
                node["phase"] = "Running"
                node.pop("message", None)
                self.touch()

    def _duration(self, tmpl: dict[str, Any]) -> float:
        default = parse_duration(
            (self.obj["metadata"].get("annotations") or {}).get(
                self.sb.config.annotation("duration")
            ),
            self.sb.config.default_duration,
        )
        return parse_duration(self.annotation(tmpl, "duration"), default)

    def _fault(self, tmpl: dict[str, Any]) -> str | None:
        return self.sb.faults.workflow_failure(
            self.namespace, self.name
        ) or self.sb.faults.template_failure(self.namespace, self.name, tmpl.get("name", ""))

    def _account(self, node: dict[str, Any], req: dict[str, float], started: float) -> None:
        secs = max(
            1, int((asyncio.get_running_loop().time() - started) * self.sb.config.time_scale)
        )
        node["resourcesDuration"] = {
            "cpu": int(secs * max(req.get("cpu", 0.1), 0.001)) or 1,
            "memory": int(secs * req.get("memory", 0) / 2**20) or 1,
        }

    async def run_suspend(
        self, body: dict[str, Any], tmpl: dict[str, Any], node: dict[str, Any], ctx: Ctx
    ) -> None:
        node["phase"] = "Running"
        self.touch()
        duration = (body.get("suspend") or {}).get("duration")
        event = asyncio.Event()
        values: dict[str, Any] = {}
        self.resumes[node["id"]] = (event, values)
        if duration not in (None, ""):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    event.wait(), parse_duration(duration, 0.0) / self.sb.config.time_scale
                )
        else:
            await event.wait()
        self._leaf_outputs(tmpl, node, ctx.scope, failed=False)
        node["outputs"].pop("exitCode", None)
        if not node["outputs"]:
            node.pop("outputs")
        self.finish(node, "Succeeded")
