"""Pods that really run (`python -m sandbox --execute`): the folders a step sees, its
environment, its input artifacts, and its outputs read back after it ends as Argo's wait
container does (workflow/executor/executor.go)."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import os
import posixpath
import re
import shutil
import tempfile
import urllib.parse
from pathlib import Path
from typing import Any

import yaml

from sandbox import confined, executor, quantity
from sandbox.argo import admission, archivelogs
from sandbox.argo.expr import as_param, parse_duration, render
from sandbox.argo.layout import PodLayout, container_path
from sandbox.argo.run import RunCore
from sandbox.artifacts import (
    BUCKET_NAME,
    ArtifactError,
    fetch_http,
    is_archive_none,
    unpack,
)
from sandbox.pod import PodResult, PodSpec, Tail
from sandbox.s3.client import RemoteBucket, Unreachable, send
from sandbox.s3.errors import parse_error
from sandbox.store import clone


class ParameterTooLarge(Exception):
    """An output parameter's file holds more than a parameter may."""


def parameter_too_large(size: int, limit: int) -> str:
    return (
        f"the value is {size} bytes, more than the {limit} bytes "
        f"({quantity.fmt('memory', limit)}) an output parameter may hold; "
        "pass large values as an output artifact"
    )


class NotRunnable(Exception):
    """The pod cannot start; it stays Pending with this message (as the kubelet reports)."""


# A Secret's or ConfigMap's key, as kube-apiserver admits it (IsConfigMapKey): a file name.
_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


class Pods(RunCore):
    network: executor.Network | None = None
    daemons: dict[str, list[tuple[dict[str, Any], asyncio.Task[None]]]]

    # -- hooks ------------------------------------------------------------------------------
    repo: RemoteBucket | None = None
    repo_ref: dict[str, Any] | None = None

    def refusal(self) -> tuple[str, str] | None:
        spec = self.obj.get("spec") or {}
        claims = admission.claim_template_refusal(self.name, spec.get("volumeClaimTemplates") or [])
        if claims:
            return "Error", claims
        invalid = invalid_claim(self.obj)
        if invalid:
            # operator.go: createPVCs failing with a non-transient error is markWorkflowError.
            return "Error", f"pvc create error: {invalid}"
        if not self.sb.config.execute:
            return None
        bad = unresolved(self.obj)
        if bad:
            return "Failed", f"invalid spec: {bad}"
        try:
            self._resolve_repository()
        except ArtifactError as exc:
            return "Error", f"failed to resolve artifact repository: {exc}"
        return None

    def repository_status(self) -> dict[str, Any] | None:
        return self.repo_ref

    def _resolve_repository(self) -> None:
        """The repository outputs go to, as Argo resolves it
        (workflow/artifactrepositories/artifactrepositories.go): the ConfigMap that
        `spec.artifactRepositoryRef` names in the Workflow's namespace, else the namespace's
        `artifact-repositories` default, else the controller's (this site's bucket)."""
        ref = (self.obj.get("spec") or {}).get("artifactRepositoryRef")
        name = str((ref or {}).get("configMap") or "artifact-repositories")
        cm = self.member.get_object("ConfigMap", self.namespace, name)
        if cm is not None:
            annotations = (cm.get("metadata") or {}).get("annotations") or {}
            key = (ref or {}).get("key") or annotations.get(
                "workflows.argoproj.io/default-artifact-repository"
            )
            raw = self.member.object_data(cm).get(str(key)) if key else None
            try:
                conf = yaml.safe_load(raw) if raw else None
            except yaml.YAMLError:
                conf = None
            s3 = (conf or {}).get("s3") if isinstance(conf, dict) else None
            if isinstance(s3, dict) and s3.get("bucket"):
                self.repo = self._configured_repository(s3)
                self.repo_ref = {
                    "configMap": name,
                    "key": key,
                    "namespace": self.namespace,
                    "artifactRepository": conf,
                }
                return
        if ref is not None:
            raise ArtifactError(
                f'failed to find any artifact repository for artifact repository ref "{ref}"'
            )
        self.repo = self.member.repository

    def _configured_repository(self, s3: dict[str, Any]) -> RemoteBucket | None:
        """The bucket an artifact repository ConfigMap names, reached as its config says:
        its own `accessKeySecret` / `secretKeySecret` as this member holds them, else this
        site's node identity (Argo's executor then signs with the environment's
        credentials, see `SiteExecution.keys_from`), which only this site's repository
        accepts. None while a Secret it names is not on this member: Argo's controller
        resolves the repository without reading Secrets, and the pods that need it wait for
        the Secret (`_artifact_secrets`)."""
        bucket = str(s3["bucket"])
        if not BUCKET_NAME.match(bucket) or ".." in bucket:
            # What S3 answers (and where a bucket is a folder, what keeps it one).
            raise ArtifactError(
                f"bucket {bucket!r}: InvalidBucketName: The specified bucket is not valid."
            )
        owner = self.member.site_of_location(s3) or self.member.site
        if not self.member.reachable(owner):
            raise ArtifactError(
                f"bucket {bucket}: dial tcp: lookup {owner.artifact_endpoint}: no such host"
            )
        if self._missing_secret(s3):
            return None
        return self.member.bucket_of(owner, bucket, self.member.keys_from(s3, self.namespace))

    def _repository_conf(self) -> dict[str, Any]:
        conf = (self.repo_ref or {}).get("artifactRepository")
        return conf if isinstance(conf, dict) else {}

    def _archive_log(self, tmpl: dict[str, Any], node: dict[str, Any], data: bytes) -> str:
        """Save the main container's log as Argo's wait container does when archiveLogs is
        on; a failure is the step's error, as the executor's ``AddError``."""
        key = archivelogs.key_of(tmpl, self.name, node["id"])
        try:
            archivelogs.save(self.repo or self.member.repository, key, data)
        except (ArtifactError, OSError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            return f"failed to save logs: {reason}"
        outputs = node.setdefault("outputs", {})
        outputs["artifacts"] = [*(outputs.get("artifacts") or []), archivelogs.output(key)]
        return ""

    async def teardown(self) -> None:
        await self.stop_daemons(None)
        if self.network is not None:
            self.network.close()
            self.network = None
        if self.sb.config.execute:
            volumes = self.member.data_dir / "volumes" / self.namespace / self.name
            await asyncio.to_thread(shutil.rmtree, volumes, True)

    # -- daemons ----------------------------------------------------------------------------
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
                self.finish(node, "Failed", message or "daemoned pod exited")
            except asyncio.CancelledError:
                self.finish(node, "Succeeded")
                raise
            finally:
                node.pop("daemoned", None)
                release()

        node["daemoned"] = True
        node["podIP"] = "127.0.0.1"
        task = asyncio.get_running_loop().create_task(daemon())
        if not hasattr(self, "daemons"):
            self.daemons = {}
        self.daemons.setdefault(str(ctx.boundary), []).append((node, task))
        self.touch()

    async def stop_daemons(self, boundary: str | None) -> None:
        if not hasattr(self, "daemons"):
            return
        keys = list(self.daemons) if boundary is None else [boundary]
        tasks = [t for k in keys for _n, t in self.daemons.pop(k, [])]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- the container ---------------------------------------------------------------------
    def runner(self, body: dict[str, Any]) -> str | None:
        if not self.sb.config.execute:
            return None
        runners = [
            executor.runner_for(str(c.get("image") or ""), self.member.execution.images)
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
                    "metadata.namespace": self.namespace,
                    "status.podIP": "127.0.0.1",
                    "spec.nodeName": "",
                }.get(str(field), "")
                continue
            for ref_kind, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
                ref = vf.get(ref_kind)
                if ref is None:
                    continue
                value = self.member.object_value(kind, self.namespace, ref.get("name"), ref["key"])
                if value is None and not ref.get("optional"):
                    what = "secret" if kind == "Secret" else "configmap"
                    raise NotRunnable(
                        f'CreateContainerConfigError: {what} "{ref.get("name")}" not found'
                        if not self.member.has_object(kind, self.namespace, ref.get("name"))
                        else f"CreateContainerConfigError: couldn't find key {ref['key']} in "
                        f"{kind} {self.namespace}/{ref.get('name')}"
                    )
                if value is not None:
                    env[name] = value
        return env

    def missing_claims(self, body: dict[str, Any]) -> str | None:
        """The kube-scheduler's answer for a pod whose PersistentVolumeClaim does not exist in
        this member (volumebinding's PreFilter, pkg/scheduler/framework/plugins/volumebinding
        in Kubernetes): it is not scheduled, and stays Pending, until the claim exists."""
        spec = self.obj.get("spec") or {}
        declared = [*(spec.get("volumes") or []), *(body.get("volumes") or [])]
        for vol in declared:
            claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
            # A name kube-apiserver would refuse for a claim (ValidatePersistentVolumeName)
            # names no claim: it is never looked up, let alone joined to a folder.
            bad = bool(claim) and bool(admission.subdomain_errors("claimName", str(claim)))
            if claim and (
                bad or not self.member.has_object("PersistentVolumeClaim", self.namespace, claim)
            ):
                return f'0/1 nodes are available: persistentvolumeclaim "{claim}" not found.'
        return None

    @staticmethod
    def _hosts_file(root: Path, pod: str, layout: PodLayout) -> None:
        """The kubelet mounts a hosts file of its own into every container
        (`managedHostsFileContent`, pkg/kubelet/kubelet_pods.go), not the node's."""
        root.mkdir(parents=True, exist_ok=True)
        hosts = root / "hosts"
        hosts.write_text(
            "# Kubernetes-managed hosts file.\n"
            "127.0.0.1\tlocalhost\n"
            "::1\tlocalhost ip6-localhost ip6-loopback\n"
            "fe00::0\tip6-localnet\n"
            "fe00::0\tip6-mcastprefix\n"
            "fe00::1\tip6-allnodes\n"
            "fe00::2\tip6-allrouters\n"
            f"127.0.0.1\t{pod}\n"
        )
        hosts.chmod(0o644)
        layout.add(hosts, "/etc/hosts", readonly=True)
        # The same in the pod's own layer, where the sandbox reads a step's outputs.
        (root / "fs" / "etc").mkdir(parents=True, exist_ok=True)
        (root / "fs" / "etc" / "hosts").write_bytes(hosts.read_bytes())

    def declared_volumes(self, body: dict[str, Any]) -> set[str]:
        spec = self.obj.get("spec") or {}
        names = {
            str(v.get("name")) for v in [*(spec.get("volumes") or []), *(body.get("volumes") or [])]
        }
        templates = spec.get("volumeClaimTemplates") or []
        return names | {str((c.get("metadata") or {}).get("name")) for c in templates}

    def _volumes(self, body: dict[str, Any], container: dict[str, Any], layout: PodLayout) -> None:
        spec = self.obj.get("spec") or {}
        declared = [*(spec.get("volumes") or []), *(body.get("volumes") or [])]
        volumes = {v.get("name"): v for v in declared}
        templates = spec.get("volumeClaimTemplates") or []
        claims = {(c.get("metadata") or {}).get("name") for c in templates}
        # Names here passed admission.pod_refusal (DNS-1123 labels; claim names subdomains
        # by missing_claims): each is one folder name.
        for vm in container.get("volumeMounts") or []:
            vname = vm.get("name")
            vol = volumes.get(vname) or {}
            claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
            if claim:
                # The member's claim: its data outlives the Workflow, for the next one at
                # this site that mounts it (missing_claims keeps the pod Pending without it).
                host = self.member.data_dir / "volumes" / self.namespace / "_claims" / str(claim)
            elif vname in claims:
                # Argo's own claim for this Workflow (`<workflow>-<claim>`, createPVCs in
                # workflow/controller/operator.go), gone with it.
                host = self.member.data_dir / "volumes" / self.namespace / self.name / str(vname)
            else:
                host = layout.root / "volumes" / str(vname)
                self._fill_volume(vol, host)
            sub = str(vm.get("subPath") or "")
            base = confined.open_base(host, create=True)
            try:
                # The kubelet resolves a sub-path beneath its volume, following a link only
                # while it stays inside (a step may have left one), and mounts what it opened
                # (pkg/volume/util/subpath/subpath_linux.go, doBindSubPath); failing that, the
                # container is not created (pkg/kubelet/kubelet_pods.go, makeMounts).
                fd = confined.open_dir(base, sub, create=True)
            except OSError:
                # Argo names a template's container `main`; a containerSet's keep theirs.
                cname = container.get("name") if "containerSet" in body else None
                raise NotRunnable(
                    "CreateContainerConfigError: failed to prepare subPath for volumeMount "
                    f'"{vname}" of container "{cname or "main"}"'
                ) from None
            finally:
                os.close(base)
            layout.add(host / sub, str(vm["mountPath"]), bool(vm.get("readOnly")), fd)

    def _fill_volume(self, vol: dict[str, Any], host: Path) -> None:
        host.mkdir(parents=True, exist_ok=True)
        for key, kind in (("secret", "Secret"), ("configMap", "ConfigMap")):
            src = vol.get(key)
            if src is None:
                continue
            name = src.get("secretName") if key == "secret" else src.get("name")
            obj = self.member.get_object(kind, self.namespace, name)
            if obj is None:
                if src.get("optional"):
                    return
                raise NotRunnable(f'MountVolume.SetUp failed: {key.lower()} "{name}" not found')
            fd = confined.open_base(host)
            try:
                for k, v in self.member.object_data(obj).items():
                    if _KEY.match(k) and k not in (".", ".."):
                        confined.write_file(fd, k, v.encode())
            finally:
                os.close(fd)

    # -- running it -------------------------------------------------------------------------
    async def run_pod(
        self,
        body: dict[str, Any],
        tmpl: dict[str, Any],
        node: dict[str, Any],
        runner: str,
        scope: dict[str, Any],
    ) -> tuple[str, str]:
        """Run the pod; returns the node's (phase, message) and fills node outputs."""
        pod = self.pod_name(node)
        refused = admission.pod_refusal(pod, self.declared_volumes(body), containers_of(body))
        if refused:
            # Argo's controller marks the node Error with the API server's answer.
            return "Error", refused
        layout = PodLayout(self.member.pod_dir(self.namespace, pod))
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
        pod, root = self.pod_name(node), layout.root
        containers = containers_of(body)
        self._hosts_file(root, pod, layout)
        for c in [*containers, *(body.get("sidecars") or [])]:
            self._volumes(body, c, layout)
        envs = [self._env(c, pod) for c in containers]
        try:
            self._artifact_secrets(node, tmpl, scope)
        except ArtifactError as exc:
            return "Error", str(exc)
        try:
            # Before the inputs: an http input is fetched from the pod's network namespace.
            netns = await self._network()
        except RuntimeError as exc:
            return "Error", f"failed to create pod sandbox: {exc}"
        try:
            await asyncio.to_thread(self._load_inputs, node, layout, netns)
        except ArtifactError as exc:
            return "Error", str(exc)
        # The log is served while the pod runs, and kept after.
        live = Tail(executor.LOG_BYTES)
        self.member.keep_log(self.namespace, pod, live)
        # The kubelet evicts a pod past the sum of its containers' limits.
        storage = sum(int(self.limit_of(c, "ephemeral-storage")) for c in containers) or None
        # A containerSet's containers run one after the other, in the pod's folders.
        results: list[tuple[dict[str, Any], PodResult]] = []
        uid = self.member.next_uid()
        sidecars: list[asyncio.Task[PodResult]] = []
        for c, env in zip(containers, envs, strict=True):
            image_runner = executor.runner_for(str(c.get("image")), self.member.execution.images)
            spec = PodSpec(
                root=root,
                argv=self._argv(body, c, image_runner or runner, layout),
                env=env,
                mounts=layout.mounts,
                workdir=str(c.get("workingDir") or "/"),
                uid=uid,
                memory=self._memory(c),
                ephemeral_storage=storage,
                ephemeral_storage_text=quantity.fmt("ephemeral-storage", storage or 0),
                eviction_interval=self.member.execution.eviction_interval_seconds,
                deadline=self._pod_deadline(body),
                sim_deadline=self._sim_deadline(body),
                ash=executor.image_name(str(c.get("image") or "")).startswith(
                    ("alpine", "busybox", "argoproj/argosay")
                ),
                wallclock=self.member.execution.step_wallclock_seconds,
                time_scale=self.sb.config.time_scale,
                netns=netns,
                log=live,
            )
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
        last = results[-1][1]
        if last.killed is None and last.exit_code == 0:
            result = next((r for c, r in results if c.get("name") == "main"), last)
        else:
            result = last
        failed = result.killed is not None or result.exit_code != 0
        outs = render(tmpl.get("outputs") or {}, scope)
        message = await asyncio.to_thread(self._real_outputs, outs, node, layout, result, failed)
        if archivelogs.enabled(self.obj.get("spec") or {}, tmpl, self._repository_conf()):
            problem = await asyncio.to_thread(self._archive_log, tmpl, node, bytes(live.data))
            message = message or problem
        # Outputs are saved and the log is in memory: the pod's folder can go (a demo runs
        # all day).
        await asyncio.to_thread(shutil.rmtree, root, True)
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

    def _sidecar_specs(self, body: dict[str, Any], main: PodSpec, pod: str) -> list[PodSpec]:
        specs = []
        for sc in body.get("sidecars") or []:
            runner = executor.runner_for(str(sc.get("image")), self.member.execution.images)
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
        return sim / self.sb.config.time_scale + 0.5 if sim is not None else None

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
        ranges = self.member.site.limit_range or self.member.execution.limit_range
        return float((ranges.get("default") or {}).get(resource, 0))

    def _memory(self, container: dict[str, Any]) -> int | None:
        return int(self.limit_of(container, "memory")) or None

    # -- artifacts and outputs --------------------------------------------------------------
    def _artifact_secrets(
        self, node: dict[str, Any], tmpl: dict[str, Any], scope: dict[str, Any]
    ) -> None:
        """The credential Secrets an input or output artifact's location names are volumes
        of the pod, mounted into its init and wait containers, which read the keys from
        them (workflow/controller/workflowpod.go):
            func createSecretVolumesAndMounts(tmpl *wfv1.Template) (...) {
                ...
                for _, art := range tmpl.Outputs.Artifacts {
                    createSecretVolume(allVolumesMap, art, uniqueKeyMap)
                }
                for _, art := range tmpl.Inputs.Artifacts {
                    createSecretVolume(allVolumesMap, art, uniqueKeyMap)
                }
        (workflow/executor/executor.go, GetSecret: os.ReadFile(filepath.Join(
        common.SecretVolMountPath, accessKeyName, accessKey))). With one missing the kubelet
        cannot mount it, and the pod waits, Pending, until the Secret exists: an output's
        missing Secret stops the step before it runs, as an input's does; it never runs and
        then fails its save."""
        # The outputs as the controller sees them when it creates the pod: the template's,
        # with what is known before the step runs substituted.
        inputs = (node.get("inputs") or {}).get("artifacts") or []
        outputs = render((tmpl.get("outputs") or {}).get("artifacts") or [], scope)
        locations = [art.get("s3") or {} for art in [*inputs, *outputs]]
        # The repository is the pod's archive location (its Secrets mounted too) when an
        # artifact has no location of its own or the log is archived (addArchiveLocation).
        repository = self._repository_conf().get("s3")

        def located(art: dict[str, Any]) -> bool:
            return bool(
                (art.get("s3") or {}).get("endpoint") and (art.get("s3") or {}).get("bucket")
            )

        needs_repository = isinstance(repository, dict) and (
            any(not located(a) for a in inputs if "s3" in a)
            or any(
                not located(a)
                for a in outputs
                if a.get("path") and not a.get("from") and "http" not in a
            )
            or archivelogs.enabled(self.obj.get("spec") or {}, tmpl, self._repository_conf())
        )
        if needs_repository and isinstance(repository, dict):
            locations.append(repository)
        for s3 in locations:
            name = self._missing_secret(s3)
            if name:
                raise NotRunnable(
                    f'MountVolume.SetUp failed for volume "{name}" : secret "{name}" not found'
                )
        if needs_repository and isinstance(repository, dict) and self.repo is None:
            # Its Secret has come since the Workflow started.
            self.repo = self._configured_repository(repository)

    def _missing_secret(self, s3: dict[str, Any]) -> str | None:
        """The first credential Secret an `s3` location names that this member does not hold
        in the Workflow's namespace."""
        for ref in ("accessKeySecret", "secretKeySecret", "sessionTokenSecret"):
            name = str((s3.get(ref) or {}).get("name") or "")
            if "{{" in name:
                continue  # known only once the step has run: the save will say
            if name and not self.member.has_object("Secret", self.namespace, name):
                return name
        return None

    def _load_inputs(self, node: dict[str, Any], layout: PodLayout, netns: int) -> None:
        for art in (node.get("inputs") or {}).get("artifacts") or []:
            path = art.get("path")
            if not path:
                continue
            try:
                with layout.at(str(path), create=True) as dest:
                    self._load_one(art, dest, netns)
            except OSError as exc:
                # A link the step left leads out of its folder, or the path is unusable.
                if not art.get("optional"):
                    raise ArtifactError(
                        f"failed to load artifact {art.get('name')}: open {path}: "
                        f"{exc.strerror or exc}"
                    ) from exc
            except ArtifactError:
                if art.get("optional"):
                    continue
                raise

    def _load_one(self, art: dict[str, Any], dest: tuple[int, str], netns: int) -> None:
        name = art.get("name")
        if "raw" in art:
            confined.write_file(*dest, str((art.get("raw") or {}).get("data", "")).encode())
        elif "http" in art:
            url = str((art.get("http") or {}).get("url", ""))
            if not self._fetch_from_repository(url, dest):
                fetch_http(url, dest, netns, self.member.next_uid())
            if not is_archive_none(art):
                # Argo's executor untars whatever input it loaded that is a tarball, from any
                # driver, unless the artifact says `archive: none` (executor.go,
                # loadArtifacts: isTarball, then untar into the artifact's path).
                data = confined.read_file(*dest)
                os.unlink(dest[1], dir_fd=dest[0])
                unpack(data, dest)
        elif "git" in art:
            repo = (art.get("git") or {}).get("repo", "")
            raise ArtifactError(
                f"failed to load artifact {name}: git clone {repo}: "
                "dial tcp: lookup: Temporary failure in name resolution"
            )
        elif "s3" in art:
            s3 = art.get("s3") or {}
            # A key-only artifact is read from the workflow's artifact repository.
            own = not s3.get("endpoint") and not s3.get("bucket")
            repo = self.repo if own and self.repo is not None else None
            repo = repo or self.member.repository_for(s3, self.namespace)
            repo.load(str(s3.get("key", "")), dest)
        else:
            raise ArtifactError(f"required artifact '{name}' not supplied")

    def _fetch_from_repository(self, url: str, dest: tuple[int, str]) -> bool:
        """An `http` input whose host is a repository's endpoint name (a pre-signed GET):
        fetched from that repository's listener where this site may reach it, else Go's
        resolver error; False when the host is no repository's (fetched as any URL). The
        answer is judged as Argo's http driver judges it (workflow/artifacts/http/http.go):
            if res.StatusCode == http.StatusNotFound {
                return http.Response{}, errors.New(errors.CodeNotFound, res.Status)
            }
            if res.StatusCode < 200 || res.StatusCode >= 300 {
                return http.Response{}, errors.InternalErrorf("loading content from %s
                    failed with reason: %s", url, res.Status)
        with S3's own error (message and code, from the answer's XML) after the status."""
        split = urllib.parse.urlsplit(url)
        owner = self.sb.repositories.site_of_endpoint(split.hostname or "")
        if owner is None or split.scheme not in ("http", "https"):
            return False
        if not self.member.reachable(owner):
            raise ArtifactError(f'Get "{url}": dial tcp: lookup {split.hostname}: no such host')
        ep = self.sb.repositories.of(owner)
        target = (split.path or "/") + (f"?{split.query}" if split.query else "")
        fd = confined.create_file(dest[0], dest[1])
        with os.fdopen(fd, "wb") as out:
            try:
                res = send(ep.address, host_of(split), "GET", target, {}, into=out)
            except Unreachable as exc:
                raise ArtifactError(f'Get "{url}": {exc}') from None
        if 200 <= res.status < 300:
            return True
        status = f"{res.status} {res.reason}"
        error = parse_error(res.body, res.status)
        if res.status == 404:
            raise ArtifactError(f"{status}: {error}")
        raise ArtifactError(f"loading content from {url} failed with reason: {status}: {error}")

    def _real_outputs(
        self,
        outs: dict[str, Any],
        node: dict[str, Any],
        layout: PodLayout,
        result: PodResult,
        failed: bool,
    ) -> str:
        outputs: dict[str, Any] = {}
        problem = ""
        params = []
        for p in outs.get("parameters") or []:
            vf = p.get("valueFrom") or {}
            value: str | None = None
            if "value" in p:
                value = as_param(p["value"])
            elif vf.get("path"):
                try:
                    value = self._read_param(layout, str(vf["path"]))
                except ParameterTooLarge as exc:
                    problem = problem or f"failed to get output parameter {p.get('name')}: {exc}"
                    continue
                if value is None and "default" in vf:
                    value = as_param(vf["default"])
                if value is None:
                    problem = problem or (
                        f"failed to get output parameter {p.get('name')}: "
                        f"open {vf['path']}: no such file or directory"
                    )
                    continue
                # Trims off a single newline (workflow/executor/executor.go).
                value = value.removesuffix("\n")
            elif "default" in vf:
                value = as_param(vf["default"])
            else:
                continue
            entry = {"name": p["name"], "value": value}
            if p.get("globalName"):
                entry["globalName"] = p["globalName"]
                self.global_scope[f"workflow.outputs.parameters.{p['globalName']}"] = value
            params.append(entry)
        if params:
            outputs["parameters"] = params
        arts, art_problem = self._save_outputs(outs, node, layout, failed)
        problem = problem or art_problem
        if arts:
            outputs["artifacts"] = arts
        outputs["result"] = result.stdout.decode("utf-8", "replace").removesuffix("\n")
        outputs["exitCode"] = str(result.exit_code)
        node["outputs"] = outputs
        return problem

    def _read_param(self, layout: PodLayout, path: str) -> str | None:
        """The file's text, refused past `execution.maxParameterBytes`: Argo's executor keeps
        a step's outputs in a WorkflowTaskResult, which etcd refuses past its request limit
        ("etcdserver: request is too large", util/kube/errors/errors.go), and keeps only the
        last 256 kB of a `result` (workflow/executor/executor.go). A parameter cut short would
        pass a wrong value on, so it fails the step instead, naming the limit. The file is
        read without following a link out of the pod's folders."""
        limit = self.member.execution.max_parameter_bytes
        try:
            with layout.at(path) as found:
                if found is None:
                    return None
                data = confined.read_file(*found, limit=limit + 1)
                if len(data) > limit:
                    st = confined.lstat_at(*found)
                    size = st.st_size if st is not None else len(data)
                    raise ParameterTooLarge(parameter_too_large(size, limit))
                return data.decode(errors="replace")
        except OSError:
            return None

    def _save_outputs(
        self, outs: dict[str, Any], node: dict[str, Any], layout: PodLayout, failed: bool
    ) -> tuple[list[dict[str, Any]], str]:
        arts: list[dict[str, Any]] = []
        problem = ""
        for a in outs.get("artifacts") or []:
            if a.get("from") or not a.get("path"):
                continue
            none = is_archive_none(a)
            key = (a.get("s3") or {}).get("key") or (
                f"{self.name}/{node['id']}/{a['name']}{'' if none else '.tgz'}"
            )
            path = container_path(str(a["path"]))
            # An output with its own location (bucket and endpoint) is saved there and
            # recorded in full; any other goes to the workflow's repository and is recorded
            # by its key only (workflow/executor/executor.go, saveArtifact: an artifact
            # without a location gets the repository's, and Argo >= 3 keeps key-only
            # outputs key-only; the repository is in status.artifactRepositoryRef).
            own_s3 = a.get("s3") or {}
            located = bool(own_s3.get("bucket") and own_s3.get("endpoint"))
            url = str((a.get("http") or {}).get("url") or "")
            try:
                with layout.at(path) as found:
                    if confined.lstat_at(*found) is None:
                        raise FileNotFoundError
                    arcname = posixpath.basename(path) or "artifact"
                    if url:
                        self._put_http(found, url, none, arcname)
                    else:
                        if located:
                            repo = self.member.repository_for(own_s3, self.namespace, saving=True)
                        else:
                            repo = self.repo or self.member.repository
                        try:
                            repo.save(found, str(key), not none, arcname)
                        except OSError as exc:
                            # Not the step's file: kept apart from a missing output.
                            raise ArtifactError(exc.strerror or str(exc)) from exc
            except (FileNotFoundError, confined.Escape):
                # Missing, or a link the step left there leads out of its folder.
                if not a.get("optional") and not failed:
                    problem = problem or (
                        f"failed to save outputs: open {a['path']}: no such file or directory"
                    )
                continue
            except (ArtifactError, OSError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) else str(exc)
                problem = problem or f"failed to save outputs: {a['path']}: {reason}"
                continue
            entry = {k: clone(v) for k, v in a.items() if k in ("name", "path", "archive")}
            if url:
                entry["http"] = clone(a["http"])
            else:
                entry["s3"] = {**clone(own_s3), "key": key} if located else {"key": key}
            arts.append(entry)
        return arts, problem

    def _put_http(self, found: tuple[int, str], url: str, none: bool, arcname: str) -> None:
        """An `http` output (a pre-signed PUT) saved as Argo's executor saves it: tarred and
        gzipped unless `archive: none`, then PUT to the URL by the http driver
        (workflow/artifacts/http/http.go):
            if res.StatusCode < 200 || res.StatusCode >= 300 {
                return errors.InternalErrorf("saving file %s to %s failed with reason: %s",
                    path, url, res.Status)
        followed here by S3's own message and code. Only a repository's endpoint (where this
        site may reach it) answers: nothing else is on the network here."""
        split = urllib.parse.urlsplit(url)
        owner = self.sb.repositories.site_of_endpoint(split.hostname or "")
        if owner is None or not self.member.reachable(owner):
            raise ArtifactError(f'Put "{url}": dial tcp: lookup {split.hostname}: no such host')
        ep = self.sb.repositories.of(owner)
        target = (split.path or "/") + (f"?{split.query}" if split.query else "")
        with tempfile.TemporaryDirectory(prefix="sandbox-put-") as tmp:
            top = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
            try:
                if none:
                    confined.copy(found[0], found[1], top, "artifact")
                else:
                    fd = confined.create_file(top, "artifact")
                    with os.fdopen(fd, "wb") as out:
                        confined.tar_gz(found[0], found[1], arcname, out)
            finally:
                os.close(top)
            body = Path(tmp) / "artifact"
            if body.is_dir() or not body.exists():
                raise ArtifactError(f"read {arcname}: is a directory")
            with body.open("rb") as f:
                try:
                    res = send(
                        ep.address, host_of(split), "PUT", target, {}, f, body.stat().st_size
                    )
                except Unreachable as exc:
                    raise ArtifactError(f'Put "{url}": {exc}') from None
        if not 200 <= res.status < 300:
            error = parse_error(res.body, res.status)
            raise ArtifactError(
                f"saving file {arcname} to {url} failed with reason: "
                f"{res.status} {res.reason}: {error}"
            )


def host_of(split: urllib.parse.SplitResult) -> str:
    """The Host header Go's client sends for a URL (and botocore signs): the host, with its
    port only when it is not the scheme's default."""
    default = 443 if split.scheme == "https" else 80
    host = split.hostname or ""
    return host if split.port in (None, default) else f"{host}:{split.port}"


def decode_secret(data: dict[str, Any]) -> dict[str, str]:
    out = {}
    for k, v in data.items():
        try:
            out[k] = base64.b64decode(str(v)).decode()
        except ValueError:
            out[k] = str(v)
    return out


# -- Argo's validation of variables (workflow/validate/validate.go) --------------------------
_TAG = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
_PREFIXES = ("item", "steps.", "inputs.", "outputs.", "pod.", "workflow.", "tasks.")


def unresolved(wf: dict[str, Any]) -> str | None:
    """`templates.<t>: failed to resolve {{tag}}` for the first variable no scope could give
    a value: undeclared inputs, workflow parameters that are not arguments, steps and tasks
    that do not exist. Tags of other prefixes are left alone, as Argo does."""
    spec = wf.get("spec") or {}
    wf_params = {p.get("name") for p in (spec.get("arguments") or {}).get("parameters") or []}
    for tmpl in spec.get("templates") or []:
        inputs = tmpl.get("inputs") or {}
        params = {p.get("name") for p in inputs.get("parameters") or []}
        arts = {a.get("name") for a in inputs.get("artifacts") or []}
        groups = [g if isinstance(g, list) else [g] for g in tmpl.get("steps") or []]
        names = {s.get("name") for g in groups for s in g}
        names |= {t.get("name") for t in (tmpl.get("dag") or {}).get("tasks") or []}
        text = json.dumps({k: v for k, v in tmpl.items() if k != "outputs"})
        for tag in _TAG.findall(text):
            if tag.startswith("=") or not tag.startswith(_PREFIXES):
                continue
            parts = tag.split(".")
            bad = False
            if parts[0] == "inputs" and len(parts) >= 3:
                bad = (parts[1] == "parameters" and parts[2] not in params) or (
                    parts[1] == "artifacts" and parts[2] not in arts
                )
            elif parts[:2] == ["workflow", "parameters"] and len(parts) >= 3:
                bad = ".".join(parts[2:]) not in wf_params | {"json"}
            elif parts[0] in ("steps", "tasks") and len(parts) >= 2:
                bad = parts[1] not in names and parts[1] != "name"
            if bad:
                return f"templates.{tmpl.get('name')}: failed to resolve {{{{{tag}}}}}"
    return None


# pkg/apis/core/validation/validation.go ValidatePersistentVolumeClaimSpec
ACCESS_MODES = ("ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod")


def invalid_claim(wf: dict[str, Any]) -> str | None:
    """The API server's refusal of the first volumeClaimTemplate it would refuse for its access
    modes (the claim is named `<workflow>-<claim>`, createPVCs in operator.go)."""
    for c in (wf.get("spec") or {}).get("volumeClaimTemplates") or []:
        name = f"{wf['metadata'].get('name', '')}-{(c.get('metadata') or {}).get('name', '')}"
        modes = (c.get("spec") or {}).get("accessModes") or []
        if not modes:
            return (
                f'PersistentVolumeClaim "{name}" is invalid: spec.accessModes: Required value: '
                "at least 1 access mode is required"
            )
        for mode in modes:
            if mode not in ACCESS_MODES:
                supported = ", ".join(f'"{m}"' for m in ACCESS_MODES)
                return (
                    f'PersistentVolumeClaim "{name}" is invalid: spec.accessModes: Unsupported '
                    f'value: "{mode}": supported values: {supported}'
                )
    return None


def containers_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    if isinstance(body.get("container"), dict):
        return [body["container"]]
    if isinstance(body.get("script"), dict):
        return [body["script"]]
    if isinstance(body.get("containerSet"), dict):
        return [c for c in body["containerSet"].get("containers") or [] if isinstance(c, dict)]
    return []
