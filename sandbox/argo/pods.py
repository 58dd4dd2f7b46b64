"""Pods that really run (`python -m sandbox --execute`): the folders a step sees, its
environment and volumes, its containers and sidecars as the executor runs them, and daemons.
Its files (inputs, outputs) are `podfiles.py`'s, its repository `repository.py`'s."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
from collections.abc import Callable
from typing import Any

from sandbox import executor, quantity
from sandbox.argo import admission, archivelogs
from sandbox.argo.containers import NotRunnable, containers_of
from sandbox.argo.expr import as_param, parse_duration, render
from sandbox.argo.layout import PodLayout
from sandbox.argo.podfiles import PodFiles
from sandbox.argo.repository import ArtifactRepository
from sandbox.argo.run import RunState
from sandbox.argo.volumes import PodVolumes
from sandbox.artifacts import ArtifactError
from sandbox.pod import PodResult, PodSpec, Tail


class PodRunner:
    """Runs a leaf's pod on the member: `repository` resolves where its artifacts go, `files`
    loads and saves them."""

    def __init__(self, state: RunState, repository: ArtifactRepository, files: PodFiles) -> None:
        self.state = state
        self.repository = repository
        self.files = files
        self.volumes = PodVolumes(state)
        self.network: executor.Network | None = None
        self.daemons: dict[str, list[tuple[dict[str, Any], asyncio.Task[None]]]] = {}

    async def teardown(self) -> None:
        await self.stop_daemons(None)
        if self.network is not None:
            self.network.close()
            self.network = None
        if self.state.sb.config.execute:
            volumes = (
                self.state.member.data_dir / "volumes" / self.state.namespace / self.state.name
            )
            await asyncio.to_thread(shutil.rmtree, volumes, True)

    def start_daemon(
        self,
        body: dict[str, Any],
        tmpl: dict[str, Any],
        node: dict[str, Any],
        runner: str,
        ctx: Any,
        release: Any,
    ) -> None:
        """`daemon: true`: the pod keeps running, the step counts as done once it started,
        and it is stopped when the steps or DAG template that started it ends. Its IP is
        127.0.0.1: a Workflow's pods share one network namespace (only a loopback)."""

        async def daemon() -> None:
            try:
                _phase, message = await self.run_pod(body, tmpl, node, runner, ctx.scope)
                # A daemon that ends by itself has failed (workflow/controller/operator.go).
                self.state.finish(node, "Failed", message or "daemoned pod exited")
            except asyncio.CancelledError:
                self.state.finish(node, "Succeeded")
                raise
            finally:
                node.pop("daemoned", None)
                release()

        node["daemoned"] = True
        node["podIP"] = "127.0.0.1"
        task = asyncio.get_running_loop().create_task(daemon())
        self.daemons.setdefault(str(ctx.boundary), []).append((node, task))
        self.state.touch()

    async def stop_daemons(self, boundary: str | None) -> None:
        keys = list(self.daemons) if boundary is None else [boundary]
        tasks = [t for k in keys for _n, t in self.daemons.pop(k, [])]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def runner(self, body: dict[str, Any]) -> str | None:
        if not self.state.sb.config.execute:
            return None
        runners = [
            executor.runner_for(str(c.get("image") or ""), self.state.member.execution.images)
            for c in containers_of(body)
        ]
        if not runners or any(r is None for r in runners):
            return None
        return runners[0]

    def _argv(
        self, body: dict[str, Any], container: dict[str, Any], runner: str, layout: PodLayout
    ) -> list[str]:
        if container is body.get("script") and container.get("source"):
            script = container
            staging = layout.root / "staging"
            staging.mkdir(parents=True, exist_ok=True)
            # workflow/executor/executor.go StageFiles: the source at
            # common.ExecutorScriptSourcePath, mode 0755, so `command: [sh, -c]` can run it;
            # operator.go appends that path to the container's args (a script without a source
            # runs as a container).
            (staging / "script").write_text(str(script.get("source", "")))
            (staging / "script").chmod(0o755)
            layout.add(staging, "/argo/staging", readonly=True)
            args = [*(script.get("args") or []), "/argo/staging/script"]
            return executor.container_argv(runner, dict(script, args=args))
        return executor.container_argv(runner, container)

    def _env(self, container: dict[str, Any], pod: str) -> dict[str, str]:
        env: dict[str, str] = {}
        for e in container.get("env") or []:
            name = str(e.get("name"))
            if "value" in e:
                env[name] = as_param(e["value"])
                continue
            vf = e.get("valueFrom") or {}
            field = (vf.get("fieldRef") or {}).get("fieldPath")
            if field:
                env[name] = {
                    "metadata.name": pod,
                    "metadata.namespace": self.state.namespace,
                    "status.podIP": "127.0.0.1",
                    "spec.nodeName": "",
                }.get(str(field), "")
                continue
            for ref_kind, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
                ref = vf.get(ref_kind)
                if ref is None:
                    continue
                value = self.state.member.object_value(
                    kind, self.state.namespace, ref.get("name"), ref["key"]
                )
                if value is None and not ref.get("optional"):
                    what = "secret" if kind == "Secret" else "configmap"
                    raise NotRunnable(
                        f'CreateContainerConfigError: {what} "{ref.get("name")}" not found'
                        if not self.state.member.has_object(
                            kind, self.state.namespace, ref.get("name")
                        )
                        else f"CreateContainerConfigError: couldn't find key {ref['key']} in "
                        f"{kind} {self.state.namespace}/{ref.get('name')}"
                    )
                if value is not None:
                    env[name] = value
        return env

    async def run_pod(
        self,
        body: dict[str, Any],
        tmpl: dict[str, Any],
        node: dict[str, Any],
        runner: str,
        scope: dict[str, Any],
    ) -> tuple[str, str]:
        """Run the pod; returns the node's (phase, message) and fills node outputs."""
        pod = self.state.pod_name(node)
        refused = admission.pod_refusal(pod, self.volumes.declared(body), containers_of(body))
        if refused:
            # Argo's controller marks the node Error with the API server's answer.
            return "Error", refused
        layout = PodLayout(self.state.member.pod_dir(self.state.namespace, pod))
        try:
            return await self._run_pod(body, tmpl, node, runner, scope, layout)
        finally:
            layout.close()

    async def _run_pod(
        self,
        body: dict[str, Any],
        tmpl: dict[str, Any],
        node: dict[str, Any],
        runner: str,
        scope: dict[str, Any],
        layout: PodLayout,
    ) -> tuple[str, str]:
        pod, root = self.state.pod_name(node), layout.root
        containers = containers_of(body)
        prepared = await self._prepare(body, tmpl, node, scope, layout)
        if isinstance(prepared, str):
            return "Error", prepared
        envs, netns = prepared
        # The log is served while the pod runs, and kept after.
        live = Tail(executor.LOG_BYTES)
        self.state.member.keep_log(self.state.namespace, pod, live)
        uid = self.state.member.next_uid()

        def spec_of(c: dict[str, Any], env: dict[str, str]) -> PodSpec:
            return self._container_spec(body, c, env, runner, layout, (uid, netns), live)

        results = await self._run_containers(
            body, list(zip(containers, envs, strict=True)), spec_of, pod
        )
        last = results[-1][1]
        if last.killed is None and last.exit_code == 0:
            result = next((r for c, r in results if c.get("name") == "main"), last)
        else:
            result = last
        failed = result.killed is not None or result.exit_code != 0
        outs = render(tmpl.get("outputs") or {}, scope)
        message = await asyncio.to_thread(
            self.files.real_outputs, outs, node, layout, result, failed
        )
        if archivelogs.enabled(self.state.obj.get("spec") or {}, tmpl, self.repository.conf()):
            problem = await asyncio.to_thread(
                self.repository.archive_log, tmpl, node, bytes(live.data)
            )
            message = message or problem
        # Outputs are saved and the log is in memory: the pod's folder can go (a demo runs
        # all day).
        await asyncio.to_thread(shutil.rmtree, root, True)
        return _verdict(results, result, message)

    async def _prepare(
        self,
        body: dict[str, Any],
        tmpl: dict[str, Any],
        node: dict[str, Any],
        scope: dict[str, Any],
        layout: PodLayout,
    ) -> tuple[list[dict[str, str]], int] | str:
        """The pod's folders, volumes and environment, its network and its inputs: each
        container's environment and the network namespace, or why the pod errors."""
        pod = self.state.pod_name(node)
        containers = containers_of(body)
        self.volumes.hosts_file(layout.root, pod, layout)
        for c in [*containers, *(body.get("sidecars") or [])]:
            self.volumes.mount(body, c, layout)
        envs = [self._env(c, pod) for c in containers]
        try:
            self.repository.artifact_secrets(node, tmpl, scope)
        except ArtifactError as exc:
            return str(exc)
        try:
            # Before the inputs: an http input is fetched from the pod's network namespace.
            netns = await self._network()
        except RuntimeError as exc:
            return f"failed to create pod sandbox: {exc}"
        try:
            await asyncio.to_thread(self.files.load_inputs, node, layout, netns)
        except ArtifactError as exc:
            return str(exc)
        return envs, netns

    def _container_spec(
        self,
        body: dict[str, Any],
        c: dict[str, Any],
        env: dict[str, str],
        runner: str,
        layout: PodLayout,
        ids: tuple[int, int],
        live: Tail,
    ) -> PodSpec:
        """How the executor runs container `c` of the pod: `ids` are the pod's user id (one
        for all its containers) and the network namespace it joins."""
        uid, netns = ids
        execution = self.state.member.execution
        # The kubelet evicts a pod past the sum of its containers' limits.
        storage = (
            sum(int(self.limit_of(x, "ephemeral-storage")) for x in containers_of(body)) or None
        )
        image_runner = executor.runner_for(str(c.get("image")), execution.images)
        return PodSpec(
            root=layout.root,
            argv=self._argv(body, c, image_runner or runner, layout),
            env=env,
            mounts=layout.mounts,
            workdir=str(c.get("workingDir") or "/"),
            uid=uid,
            memory=self._memory(c),
            ephemeral_storage=storage,
            ephemeral_storage_text=quantity.fmt("ephemeral-storage", storage or 0),
            eviction_interval=execution.eviction_interval_seconds,
            deadline=self._pod_deadline(body),
            sim_deadline=self._sim_deadline(body),
            ash=executor.image_name(str(c.get("image") or "")).startswith(
                ("alpine", "busybox", "argoproj/argosay")
            ),
            wallclock=execution.step_wallclock_seconds,
            time_scale=self.state.sb.config.time_scale,
            netns=netns,
            log=live,
        )

    async def _run_containers(
        self,
        body: dict[str, Any],
        containers: list[tuple[dict[str, Any], dict[str, str]]],
        spec_of: Callable[[dict[str, Any], dict[str, str]], PodSpec],
        pod: str,
    ) -> list[tuple[dict[str, Any], PodResult]]:
        """A containerSet's containers one after the other, in the pod's folders, up to the
        first that fails; sidecars beside the first, killed when the last ends."""
        results: list[tuple[dict[str, Any], PodResult]] = []
        sidecars: list[asyncio.Task[PodResult]] = []
        for c, env in containers:
            spec = spec_of(c, env)
            running = asyncio.ensure_future(executor.run_pod(spec))
            if not results:
                # Sidecars run beside the main container, in its pod's folders and volumes,
                # and are killed when it ends (workflow/executor: killSidecars).
                sidecars = [
                    asyncio.ensure_future(executor.run_pod(sc))
                    for sc in self._sidecar_specs(body, spec, pod)
                ]
            try:
                results.append((c, await running))
            except asyncio.CancelledError:
                for task in sidecars:
                    task.cancel()
                raise
            if results[-1][1].killed or results[-1][1].exit_code != 0:
                break
        for task in sidecars:
            task.cancel()
        await asyncio.gather(*sidecars, return_exceptions=True)
        return results

    def _sidecar_specs(self, body: dict[str, Any], main: PodSpec, pod: str) -> list[PodSpec]:
        specs = []
        for sc in body.get("sidecars") or []:
            runner = executor.runner_for(str(sc.get("image")), self.state.member.execution.images)
            if runner is None:
                continue  # not executable here: simulated as absent
            specs.append(
                dataclasses.replace(
                    main,
                    argv=executor.container_argv(runner, sc),
                    env=self._env(sc, pod),
                    workdir=str(sc.get("workingDir") or "/"),
                    memory=self._memory(sc),
                    deadline=None,
                    log=Tail(executor.LOG_BYTES),
                )
            )
        return specs

    async def _network(self) -> int:
        if self.network is None:
            self.network = executor.Network()
        return await self.network.pid()

    def _pod_deadline(self, body: dict[str, Any]) -> float | None:
        sim = self._sim_deadline(body)
        # Plus half a real second for starting the sandbox's processes, which at a high time
        # scale would otherwise eat a short deadline before the step began (the pod's sleeps
        # count against the simulated deadline itself: executor.prepare_bin).
        return sim / self.state.sb.config.time_scale + 0.5 if sim is not None else None

    @staticmethod
    def _sim_deadline(body: dict[str, Any]) -> float | None:
        limits = [
            parse_duration(body[k], 0.0)
            for k in ("activeDeadlineSeconds", "timeout")
            if body.get(k) not in (None, "") and "{{" not in str(body[k])
        ]
        limits = [x for x in limits if x > 0]
        return min(limits) if limits else None

    def limit_of(self, container: dict[str, Any], resource: str) -> float:
        """The container's limit of `resource` in bytes, 0 for none: its own, else the
        member's LimitRange default, as the LimitRanger admission plugin sets it
        (mergeContainerResources, plugin/pkg/admission/limitranger/admission.go):
            for k, v := range defaultRequirements.Limits {
                _, found := container.Resources.Limits[k]
                if !found {
                    container.Resources.Limits[k] = *v.Copy()"""
        own = ((container.get("resources") or {}).get("limits") or {}).get(resource)
        if own not in (None, "") and "{{" not in str(own):
            try:
                return quantity.parse(str(own))
            except ValueError:
                pass
        ranges = self.state.member.site.limit_range or self.state.member.execution.limit_range
        return float((ranges.get("default") or {}).get(resource, 0))

    def _memory(self, container: dict[str, Any]) -> int | None:
        return int(self.limit_of(container, "memory")) or None


def _verdict(
    results: list[tuple[dict[str, Any], PodResult]], result: PodResult, message: str
) -> tuple[str, str]:
    """The node's phase and message from the container that decides it, as Argo's
    controller reads a pod's status."""
    if result.killed == "evicted":
        # The pod's status message is the eviction manager's, and Argo shows a pod's
        # message as the node's (inferFailedReason, workflow/controller/operator.go).
        return "Failed", result.message
    if result.killed == "oom":
        # inferFailedReason (workflow/controller/operator.go) words a failed container
        #   msg := fmt.Sprintf("%s (exit code %d)", t.Reason, t.ExitCode)
        #   msg = fmt.Sprintf("%s: %s", ctr.Name, msg)
        # and the kubelet's reason for a container the kernel killed is OOMKilled.
        name = next((c.get("name") for c, r in results if r is result), None) or "main"
        return "Failed", f"{name}: OOMKilled (exit code {result.exit_code})"
    if result.killed == "deadline":
        # workflow/executor/executor.go
        return "Failed", "Step exceeded its deadline"
    if result.killed:
        return "Failed", "Step exceeded the sandbox's wall-clock limit for a step"
    if result.exit_code != 0:
        return "Failed", f"Error (exit code {result.exit_code})"
    if message:
        return "Error", message
    return "Succeeded", ""
