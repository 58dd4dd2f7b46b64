"""A pod's volumes as the kubelet sets them up: its claims (Pending until they exist), its
hosts file, emptyDirs, Secret and ConfigMap volumes and sub-paths, each resolved beneath its
folder."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from sandbox import confined
from sandbox.argo import admission
from sandbox.argo.containers import NotRunnable
from sandbox.argo.layout import PodLayout
from sandbox.argo.run import RunState

# A Secret's or ConfigMap's key, as kube-apiserver admits it (IsConfigMapKey): a file name.
_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


class PodVolumes:
    def __init__(self, state: RunState) -> None:
        self.state = state

    def missing_claims(self, body: dict[str, Any]) -> str | None:
        """The kube-scheduler's answer for a pod whose PersistentVolumeClaim does not exist in
        this member (volumebinding's PreFilter, pkg/scheduler/framework/plugins/volumebinding
        in Kubernetes): it is not scheduled, and stays Pending, until the claim exists."""
        spec = self.state.obj.get("spec") or {}
        declared = [*(spec.get("volumes") or []), *(body.get("volumes") or [])]
        for vol in declared:
            claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
            # A name kube-apiserver would refuse for a claim (ValidatePersistentVolumeName)
            # names no claim: it is never looked up, let alone joined to a folder.
            bad = bool(claim) and bool(admission.subdomain_errors("claimName", str(claim)))
            if claim and (
                bad
                or not self.state.member.has_object(
                    "PersistentVolumeClaim", self.state.namespace, claim
                )
            ):
                return f'0/1 nodes are available: persistentvolumeclaim "{claim}" not found.'
        return None

    @staticmethod
    def hosts_file(root: Path, pod: str, layout: PodLayout) -> None:
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

    def declared(self, body: dict[str, Any]) -> set[str]:
        spec = self.state.obj.get("spec") or {}
        names = {
            str(v.get("name")) for v in [*(spec.get("volumes") or []), *(body.get("volumes") or [])]
        }
        templates = spec.get("volumeClaimTemplates") or []
        return names | {str((c.get("metadata") or {}).get("name")) for c in templates}

    def mount(self, body: dict[str, Any], container: dict[str, Any], layout: PodLayout) -> None:
        spec = self.state.obj.get("spec") or {}
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
                host = (
                    self.state.member.data_dir
                    / "volumes"
                    / self.state.namespace
                    / "_claims"
                    / str(claim)
                )
            elif vname in claims:
                # Argo's own claim for this Workflow (`<workflow>-<claim>`, createPVCs in
                # workflow/controller/operator.go), gone with it.
                host = (
                    self.state.member.data_dir
                    / "volumes"
                    / self.state.namespace
                    / self.state.name
                    / str(vname)
                )
            else:
                host = layout.root / "volumes" / str(vname)
                self._fill(vol, host)
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

    def _fill(self, vol: dict[str, Any], host: Path) -> None:
        host.mkdir(parents=True, exist_ok=True)
        for key, kind in (("secret", "Secret"), ("configMap", "ConfigMap")):
            src = vol.get(key)
            if src is None:
                continue
            name = src.get("secretName") if key == "secret" else src.get("name")
            obj = self.state.member.get_object(kind, self.state.namespace, name)
            if obj is None:
                if src.get("optional"):
                    return
                raise NotRunnable(f'MountVolume.SetUp failed: {key.lower()} "{name}" not found')
            fd = confined.open_base(host)
            try:
                for k, v in self.state.member.object_data(obj).items():
                    if _KEY.match(k) and k not in (".", ".."):
                        confined.write_file(fd, k, v.encode())
            finally:
                os.close(fd)
