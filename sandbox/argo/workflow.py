"""A member Workflow run: its state, and the parts that run it, each given what it works
with: the templates (`templates.py`) run each node, the graph walker (`graph.py`) steps and
DAGs, the hooks (`hooks.py`) lifecycle hooks and call arguments, the leaves (`leaves.py`) pods
and suspend nodes, the pod runner (`pods.py`) pods that really run, with their volumes
(`volumes.py`), their files (`podfiles.py`) and the Workflow's artifact repository
(`repository.py`)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from sandbox.argo import admission
from sandbox.argo.expr import FAILED, as_param
from sandbox.argo.graph import GraphWalker
from sandbox.argo.hooks import Hooks
from sandbox.argo.leaves import Leaves
from sandbox.argo.podfiles import PodFiles
from sandbox.argo.pods import PodRunner
from sandbox.argo.repository import ArtifactRepository
from sandbox.argo.run import Capacity, Ctx, Parent, RunState, StepFailed
from sandbox.argo.site import SiteExecution
from sandbox.argo.templates import Templates
from sandbox.argo.validate import invalid_claim, unresolved
from sandbox.artifacts import ArtifactError
from sandbox.store import Obj, clone, now_iso

log = logging.getLogger("sandbox.argo")


class WorkflowRun:
    """Walks a Workflow's templates (dag, steps and the leaf kinds) the way Argo's controller
    does, writing an Argo-shaped status into `state`."""

    def __init__(self, member: SiteExecution, capacity: Capacity, obj: Obj) -> None:
        self.state = RunState(member, capacity, obj)
        self.repository = ArtifactRepository(self.state)
        self.pods = PodRunner(self.state, self.repository, PodFiles(self.state, self.repository))
        self.hooks = Hooks(self.state, self.execute)
        self.graph = GraphWalker(self.state, self.hooks, self.execute)
        self.leaves = Leaves(self.state, self.pods)
        self.templates = Templates(self.state, self.graph, self.leaves, self.pods)
        self.task: asyncio.Task[None] | None = None

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
        """Run a template as a node (what steps, tasks and hooks call)."""
        return await self.templates.execute(
            tmpl_name, args, art_args, name, display, ctx, parent, inline
        )

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.run())

    def cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            await self.pods.teardown()

    async def _run(self) -> None:
        state = self.state
        spec = state.obj.get("spec") or {}
        state.phase = "Running"
        state.started_at = now_iso()
        arguments = self._arguments(spec)
        if arguments is None:
            state.finished_at = now_iso()
            state.touch()
            return
        state.touch()
        try:
            root = await self._entrypoint(spec, *arguments)
            phase = await self._exit_handler(spec, self._outcome(root))
            if root is not None and root.get("outputs"):
                state.outputs = clone(root["outputs"])
            state.phase = phase if phase in ("Succeeded", "Failed", "Error") else "Succeeded"
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # pragma: no cover - a bug in the engine, shown as Argo would
            log.exception("workflow %s/%s crashed", state.namespace, state.name)
            state.phase = "Error"
            state.message = str(exc)
        state.finished_at = now_iso()
        state.touch()

    def _arguments(self, spec: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]] | None:
        """The Workflow's parameter and artifact arguments; None, with the phase and message
        set, when the Workflow is refused or a parameter cannot be read."""
        refused = self.refusal()
        if refused:
            # What the controller does with a Workflow that fails validation ("invalid spec:
            # ...", Failed) or whose artifact repository it cannot resolve (Error)
            # (workflow/controller/operator.go).
            self.state.phase, self.state.message = refused
            return None
        try:
            from_config_maps = self._config_map_parameters(spec)
        except StepFailed as exc:
            self.state.phase, self.state.message = "Error", str(exc)
            return None
        args = {
            p["name"]: as_param(p["value"])
            for p in (spec.get("arguments") or {}).get("parameters") or []
            if "value" in p
        }
        args.update(from_config_maps)
        arts = {
            a["name"]: a
            for a in (spec.get("arguments") or {}).get("artifacts") or []
            if "name" in a
        }
        return args, arts

    async def _entrypoint(
        self, spec: dict[str, Any], args: dict[str, str], arts: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The entrypoint's node once it ended (with the workflow's hooks), under the
        Workflow's `activeDeadlineSeconds`; on a shutdown, the root node as it was left."""
        state = self.state
        loop = asyncio.get_running_loop()
        scope = dict(state.global_scope)
        state.main = loop.create_task(
            self.execute(
                spec.get("entrypoint") or "",
                args,
                arts,
                state.name,
                state.name,
                Ctx(scope, None),
                parent=None,
            )
        )
        deadline = spec.get("activeDeadlineSeconds")
        timer = (
            loop.call_later(float(deadline) / state.sb.config.time_scale, state.exceed_deadline)
            if deadline is not None
            else None
        )
        try:
            return await self.hooks.await_main(spec)
        except asyncio.CancelledError:
            if state.shutdown is None:
                raise
            return state.nodes.get(state.name)
        finally:
            if timer is not None:
                timer.cancel()

    def _outcome(self, root: dict[str, Any] | None) -> str:
        """The Workflow's phase from its root node, a deadline or a shutdown, and its message."""
        state = self.state
        phase = str((root or {}).get("phase", "Error"))
        if state.deadline_exceeded:
            state.message = "Max duration limit exceeded"
            return "Failed"
        if state.shutdown:
            state.message = f"Stopped with strategy '{state.shutdown}'"
            return "Failed"
        if phase in FAILED:
            state.message = (root or {}).get("message") or f"child '{state.name}' failed"
        return phase

    async def _exit_handler(self, spec: dict[str, Any], phase: str) -> str:
        """The workflow's onExit template, which sees workflow.status and .failures."""
        on_exit = spec.get("onExit")
        if not on_exit or self.state.shutdown == "Terminate":
            return phase
        exit_scope = dict(
            self.state.global_scope,
            **{
                "workflow.status": phase,
                "workflow.failures": json.dumps(
                    [
                        {
                            "displayName": n["displayName"],
                            "message": n.get("message", ""),
                            "templateName": n.get("templateName", ""),
                            "phase": n["phase"],
                            "podName": self.state.pod_name(n),
                            "finishedAt": n.get("finishedAt", ""),
                        }
                        for n in self.state.nodes.values()
                        if n["type"] == "Pod" and n["phase"] in FAILED
                    ]
                ),
            },
        )
        exit_node = await self.execute(
            on_exit,
            {},
            {},
            f"{self.state.name}.onExit",
            f"{self.state.name}.onExit",
            Ctx(exit_scope, None),
            parent=None,
        )
        if exit_node["phase"] in FAILED and phase == "Succeeded":
            phase = "Failed"
            self.state.message = exit_node.get("message") or "exit handler failed"
        return phase

    def _config_map_parameters(self, spec: dict[str, Any]) -> dict[str, str]:
        """Workflow arguments with ``valueFrom.configMapKeyRef``, read from this member's
        ConfigMap in the Workflow's namespace, else their ``valueFrom.default``; without either
        the Workflow errors (``setGlobalParameters`` in workflow/controller/operator.go)."""
        out: dict[str, str] = {}
        for p in (spec.get("arguments") or {}).get("parameters") or []:
            vf = p.get("valueFrom") or {}
            ref = vf.get("configMapKeyRef")
            if "value" in p or not isinstance(ref, dict):
                continue
            value, error, _ = self.state.member.config_map_parameter(
                self.state.namespace, ref.get("name"), ref.get("key")
            )
            if value is None:
                if "default" not in vf:
                    raise StepFailed(
                        f"failed to set global parameter {p['name']} from configmap with name "
                        f"{ref.get('name')} and key {ref.get('key')}: {error}"
                    )
                value = as_param(vf["default"])
            out[p["name"]] = value
            self.state.global_scope[f"workflow.parameters.{p['name']}"] = value
        return out

    def refusal(self) -> tuple[str, str] | None:
        spec = self.state.obj.get("spec") or {}
        claims = admission.claim_template_refusal(
            self.state.name, spec.get("volumeClaimTemplates") or []
        )
        if claims:
            return "Error", claims
        invalid = invalid_claim(self.state.obj)
        if invalid:
            # operator.go: createPVCs failing with a non-transient error is markWorkflowError.
            return "Error", f"pvc create error: {invalid}"
        if not self.state.sb.config.execute:
            return None
        bad = unresolved(self.state.obj)
        if bad:
            return "Failed", f"invalid spec: {bad}"
        try:
            self.repository.resolve()
        except ArtifactError as exc:
            return "Error", f"failed to resolve artifact repository: {exc}"
        return None
