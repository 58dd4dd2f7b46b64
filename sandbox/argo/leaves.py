"""The leaves of a Workflow: pods (simulated, or really run with `--execute`), their outputs
and failures, and suspend nodes."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

from sandbox import executor
from sandbox.argo.containers import NotRunnable, containers_of
from sandbox.argo.expr import as_param, parse_duration, render, template_requests
from sandbox.argo.pods import PodRunner
from sandbox.argo.run import Ctx, RunState
from sandbox.pod import Tail
from sandbox.simulated import outcome as outcome_of_simulated
from sandbox.store import clone, now_iso


class Leaves:
    """Runs a leaf node: waits for the member's quota and capacity, runs its pod (`pods`) or
    simulates it, and records its outputs."""

    def __init__(self, state: RunState, pods: PodRunner) -> None:
        self.state = state
        self.pods = pods

    def _leaf_outputs(
        self, tmpl: dict[str, Any], node: dict[str, Any], scope: dict[str, Any], failed: bool
    ) -> None:
        given_raw = self.state.annotation(tmpl, "outputs")
        try:
            given = json.loads(given_raw) if given_raw else {}
        except ValueError:
            given = {}
        outputs: dict[str, Any] = {}
        params = self._simulated_parameters(tmpl, node, scope, given)
        if params:
            outputs["parameters"] = params
        arts = self._simulated_artifacts(tmpl, node, scope, failed)
        if arts:
            outputs["artifacts"] = arts
        result = self.state.annotation(tmpl, "result")
        if result is None and "result" in given:
            result = as_param(given["result"])
        if result is None and "script" in tmpl:
            # Argo captures a script's stdout as its result; the sandbox runs nothing, so the
            # script printed nothing unless an annotation says what it printed.
            result = ""
        if result is not None:
            outputs["result"] = result
        outputs["exitCode"] = self.state.annotation(tmpl, "exit-code") or ("1" if failed else "0")
        if failed and outputs["exitCode"] == "0":
            outputs["exitCode"] = "1"
        node["outputs"] = outputs

    def _simulated_parameters(
        self, tmpl: dict[str, Any], node: dict[str, Any], scope: dict[str, Any], given: Any
    ) -> list[dict[str, Any]]:
        """A simulated leaf's output parameters: what its `outputs` annotation gives, else
        their value, default or parameter, else a value named after the node."""
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
                self.state.global_scope[f"workflow.outputs.parameters.{p['globalName']}"] = value
        return params

    def _simulated_artifacts(
        self, tmpl: dict[str, Any], node: dict[str, Any], scope: dict[str, Any], failed: bool
    ) -> list[dict[str, Any]]:
        """A simulated leaf's output artifacts, recorded as a pod that ran would record them
        (a failed leaf records only its optional ones)."""
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
                    f"{self.state.name}/{node['id']}/{a['name']}{'' if none else '.tgz'}"
                )
                art = {k: clone(v) for k, v in a.items() if k in ("name", "path", "archive")}
                located = own.get("bucket") and own.get("endpoint")
                if (a.get("http") or {}).get("url"):
                    art["http"] = clone(a["http"])  # a pre-signed PUT: recorded as declared
                else:
                    art["s3"] = {**clone(own), "key": key} if located else {"key": key}
            arts.append(art)
        return arts

    def _failure(self, tmpl: dict[str, Any], ctx: Ctx, fault: str | None) -> str | None:
        """Why the leaf fails: ``fault`` as read when it started (a fault with a ``count`` is
        used up by reading it: read again, it would spare this leaf), else one set since,
        else its annotations."""
        msg = fault or self._fault(tmpl)
        if msg:
            return msg
        fail = self.state.annotation(tmpl, "fail")
        if fail and fail.lower() not in ("false", "0", "no"):
            return "Error (exit code 1)" if fail.lower() in ("true", "1", "yes") else fail
        attempts = self.state.annotation(tmpl, "fail-attempts")
        if attempts and attempts.isdigit() and ctx.attempt < int(attempts):
            return f"Error (exit code 1): failing attempt {ctx.attempt} of {attempts}"
        return None

    async def run_leaf(
        self, body: dict[str, Any], tmpl: dict[str, Any], node: dict[str, Any], ctx: Ctx
    ) -> None:
        if self.state.parallel is not None:
            async with self.state.parallel:
                await self._run_leaf(body, tmpl, node, ctx)
        else:
            await self._run_leaf(body, tmpl, node, ctx)

    async def _run_leaf(
        self, body: dict[str, Any], tmpl: dict[str, Any], node: dict[str, Any], ctx: Ctx
    ) -> None:
        await self.state.unsuspended.wait()
        if "http" in tmpl or "plugin" in tmpl:
            # Argo runs these in the workflow's one agent pod (workflow/controller/agent.go),
            # not in a pod of their own: nothing to count against the quota.
            await self._run_pod_leaf(body, tmpl, node, ctx)
            return
        await self.state.admit_pod(node)
        daemon = False
        try:
            daemon = await self._run_pod_leaf(body, tmpl, node, ctx)
        finally:
            if not daemon:
                self.state.pod_ended()

    async def _run_pod_leaf(
        self, body: dict[str, Any], tmpl: dict[str, Any], node: dict[str, Any], ctx: Ctx
    ) -> bool:
        """The leaf's pod, once created, to its end; True when it goes on as a daemon (its
        quota and lease are freed when the daemon ends)."""
        req = template_requests(body)

        def waiting(msg: str) -> None:
            node["message"] = msg
            self.state.touch()

        await self._wait_for_claims(body, node, waiting)
        lease = await self.state.capacity.acquire(req, waiting)
        started = asyncio.get_running_loop().time()
        runner = self.pods.runner(body)
        real: tuple[str, str] | None = None
        try:
            node.pop("message", None)
            node["phase"] = "Running"
            node["startedAt"] = now_iso()
            node["hostNodeName"] = self.state.capacity.node_of(lease)
            self.state.touch()
            fault = self._fault(tmpl)
            if runner is not None and fault is None and tmpl.get("daemon"):
                # The lease and the quota are the daemon's until its scope ends.
                def release() -> None:
                    self.state.capacity.release(lease)
                    self.state.pod_ended()

                self.pods.start_daemon(body, tmpl, node, runner, ctx, release)
                return True
            if runner is not None and fault is None:
                real = await self._run_real(body, tmpl, node, runner, ctx.scope)
            else:
                await asyncio.sleep(self._duration(tmpl) / self.state.sb.config.time_scale)
        except asyncio.CancelledError:
            self._account(node, req, started)
            self.state.capacity.release(lease)
            raise
        self._account(node, req, started)
        self.state.capacity.release(lease)
        if real is not None:
            self.state.finish(node, real[0], real[1])
            return False
        self._finish_simulated(body, tmpl, node, ctx, fault)
        return False

    def _finish_simulated(
        self,
        body: dict[str, Any],
        tmpl: dict[str, Any],
        node: dict[str, Any],
        ctx: Ctx,
        fault: str | None,
    ) -> None:
        """End a leaf that ran nothing: failed as a fault or its annotations say, else as
        its simulated containers' outcome (`--execute` with an image not executable here)."""
        failure = self._failure(tmpl, ctx, fault)
        simulated: tuple[str, str] | None = None
        if (
            not failure
            and self.state.sb.config.execute
            and any(k in tmpl for k in ("container", "script", "containerSet"))
        ):
            images = self.state.member.execution.images
            simulated = outcome_of_simulated(
                [
                    c
                    for c in containers_of(body)
                    if executor.runner_for(str(c.get("image") or ""), images) is None
                ],
                self.state.member.execution.simulated,
            )
        failed = failure is not None or (simulated is not None and simulated[0] != "Succeeded")
        self._leaf_outputs(tmpl, node, ctx.scope, failed=failed)
        self._simulated_log(node)
        if failure:
            self.state.finish(node, "Failed", failure)
        elif simulated is not None:
            self.state.finish(node, *simulated)
        else:
            self.state.finish(node, "Succeeded")

    async def _wait_for_claims(
        self, body: dict[str, Any], node: dict[str, Any], waiting: Callable[[str], None]
    ) -> None:
        """Pending, with the scheduler's message, while a claim the pod mounts is missing."""
        while (unbound := self.pods.volumes.missing_claims(body)) is not None:
            if node.get("message") != unbound:
                waiting(unbound)
            await asyncio.sleep(1.0)

    def _simulated_log(self, node: dict[str, Any]) -> None:
        """A simulated pod's log is what it is said to have printed: its ``result``, so the
        pod log API (and the cluster proxy) serve what the node's outputs show."""
        result = (node.get("outputs") or {}).get("result")
        if result is None:
            return
        log = Tail(executor.LOG_BYTES)
        log.write(f"{result}\n".encode())
        self.state.member.keep_log(self.state.namespace, self.state.pod_name(node), log)

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
                return await self.pods.run_pod(body, tmpl, node, runner, scope)
            except NotRunnable as exc:
                # The kubelet keeps trying; the node stays Pending with its reason
                # (getPendingReason, workflow/controller/operator.go).
                if node.get("message") != str(exc) or node["phase"] != "Pending":
                    node["phase"] = "Pending"
                    node["message"] = str(exc)
                    self.state.touch()
                await asyncio.sleep(1.0)
            if node["phase"] == "Pending":
                node["phase"] = "Running"
                node.pop("message", None)
                self.state.touch()

    def _duration(self, tmpl: dict[str, Any]) -> float:
        default = parse_duration(
            (self.state.obj["metadata"].get("annotations") or {}).get(
                self.state.sb.config.annotation("duration")
            ),
            self.state.sb.config.default_duration,
        )
        return parse_duration(self.state.annotation(tmpl, "duration"), default)

    def _fault(self, tmpl: dict[str, Any]) -> str | None:
        return self.state.sb.faults.workflow_failure(
            self.state.namespace, self.state.name
        ) or self.state.sb.faults.template_failure(
            self.state.namespace, self.state.name, tmpl.get("name", "")
        )

    def _account(self, node: dict[str, Any], req: dict[str, float], started: float) -> None:
        secs = max(
            1, int((asyncio.get_running_loop().time() - started) * self.state.sb.config.time_scale)
        )
        node["resourcesDuration"] = {
            "cpu": int(secs * max(req.get("cpu", 0.1), 0.001)) or 1,
            "memory": int(secs * req.get("memory", 0) / 2**20) or 1,
        }

    async def run_suspend(
        self, body: dict[str, Any], tmpl: dict[str, Any], node: dict[str, Any], ctx: Ctx
    ) -> None:
        node["phase"] = "Running"
        self.state.touch()
        duration = (body.get("suspend") or {}).get("duration")
        event = asyncio.Event()
        values: dict[str, Any] = {}
        self.state.resumes[node["id"]] = (event, values)
        if duration not in (None, ""):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    event.wait(), parse_duration(duration, 0.0) / self.state.sb.config.time_scale
                )
        else:
            await event.wait()
        self._leaf_outputs(tmpl, node, ctx.scope, failed=False)
        node["outputs"].pop("exitCode", None)
        if not node["outputs"]:
            node.pop("outputs")
        self.state.finish(node, "Succeeded")
