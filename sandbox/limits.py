"""A pod's memory and ephemeral storage limits, enforced as a node enforces them.

Memory: the container's limit (its own, else the member's LimitRange default) is a memory
cgroup of the pod's own, as the container runtime makes one; past it the kernel's OOM killer
ends the step, and the container is reported `OOMKilled` with exit code 137, as the kubelet
reports it. A cgroup counts what a container's does (resident memory and page cache), which no
rlimit counts. Where no memory cgroup can be created (an unprivileged sandbox), a poller
stands in for the OOM killer: it adds up the resident memory of the pod's processes (each pod
has a user id of its own) every 50 ms and kills them past the limit, with RLIMIT_DATA far
above the limit as a backstop.

Ephemeral storage: the kubelet's eviction manager measures a pod's writable layer and emptyDir
volumes and evicts a pod past the sum of its containers' limits
(podEphemeralStorageLimitEviction, pkg/kubelet/eviction/eviction_manager.go). Here the pod's
folder is measured every `evictionIntervalSeconds` and once more when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sandbox.pod import PodSpec

CGROUP_ROOT = Path("/sys/fs/cgroup")
_SERIAL = itertools.count(1)

# pkg/kubelet/eviction/helpers.go:
#   // podEphemeralStorageMessageFmt provides additional information for pods which have
#   // exceeded their ES limit
#   podEphemeralStorageMessageFmt = "Pod ephemeral local storage usage exceeds the total
#   limit of containers %s. "
POD_EPHEMERAL_STORAGE_MESSAGE = (
    "Pod ephemeral local storage usage exceeds the total limit of containers {}. "
)


def eviction_message(limit: str) -> str:
    return POD_EPHEMERAL_STORAGE_MESSAGE.format(limit)


@dataclass
class MemoryCgroup:
    """One pod's memory cgroup (v1 `memory.limit_in_bytes` or v2 `memory.max`)."""

    path: Path
    v2: bool

    @classmethod
    def create(cls, limit: int) -> MemoryCgroup | None:
        """A new cgroup under this process's own memory cgroup, limited to `limit` bytes;
        None where cgroups cannot be written here."""
        for base, v2 in _bases():
            path = base / f"sandbox-pod-{os.getpid()}-{next(_SERIAL)}"
            try:
                path.mkdir()
            except OSError:
                continue
            group = cls(path, v2)
            try:
                if v2:
                    (path / "memory.max").write_text(str(limit))
                    with contextlib.suppress(OSError):
                        (path / "memory.swap.max").write_text("0")
                else:
                    (path / "memory.limit_in_bytes").write_text(str(limit))
                    # No swap either: Kubernetes runs pods without it by default.
                    with contextlib.suppress(OSError):
                        (path / "memory.memsw.limit_in_bytes").write_text(str(limit))
            except OSError:
                group.remove()
                continue
            return group
        return None

    def enter_argv(self) -> list[str]:
        """A prefix that moves itself into the cgroup, then runs the rest of the command."""
        procs = shlex.quote(str(self.path / "cgroup.procs"))
        return ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh"]

    def oom_killed(self) -> bool:
        name = "memory.events" if self.v2 else "memory.oom_control"
        try:
            lines = (self.path / name).read_text().splitlines()
        except OSError:
            return False
        for line in lines:
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value) > 0
        # Kernels before 4.13 count no OOM kills in v1: a hit limit is the nearest sign.
        with contextlib.suppress(OSError, ValueError):
            return not self.v2 and int((self.path / "memory.failcnt").read_text()) > 0
        return False

    def remove(self) -> None:
        # The killed processes may take a moment to leave it.
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)


def fallback_data_limit(memory: int) -> int:
    """RLIMIT_DATA where no cgroup can be had: four times the limit, and 512 MiB more at
    least, so that the poller, not a failed allocation, ends a step past its limit."""
    return max(4 * memory, memory + 512 * 2**20)


def _bases() -> list[tuple[Path, bool]]:
    """Where this process's own memory cgroup is, v1 first (a hybrid host binds the memory
    controller to v1)."""
    out: list[tuple[Path, bool]] = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        _id, controllers, rel = line.split(":", 2)
        if "memory" in controllers.split(","):
            out.append((CGROUP_ROOT / "memory" / rel.lstrip("/"), False))
    for line in lines:
        _id, controllers, rel = line.split(":", 2)
        if controllers == "" and "memory" in _read(CGROUP_ROOT / "cgroup.controllers").split():
            out.append((CGROUP_ROOT / rel.lstrip("/"), True))
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def disk_usage(root: Path) -> int:
    """Bytes the folder takes on disk, as `du` counts them (blocks, each inode once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(dirpath, name))
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total


def over_storage(spec: PodSpec) -> str | None:
    if spec.ephemeral_storage is None:
        return None
    return "evicted" if disk_usage(spec.root) > spec.ephemeral_storage else None


def resident_bytes(uid: int) -> int:
    """The resident memory of every process running as `uid` (one pod's processes)."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = Path(entry.path, "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("Uid", "").split()[:1] != [str(uid)]:
            continue
        rss = fields.get("VmRSS", "").split()
        if rss and rss[0].isdigit():
            total += int(rss[0]) * 1024
    return total


async def watch(spec: PodSpec, poll_memory: bool) -> str:
    """Returns "evicted" or "oom" once the pod is past a limit; runs until cancelled
    otherwise."""
    step = max(spec.eviction_interval, 0.05)
    memory_step = 0.05
    waited = 0.0
    while True:
        await asyncio.sleep(memory_step if poll_memory and spec.memory else step)
        waited += memory_step if poll_memory and spec.memory else step
        if poll_memory and spec.memory:
            if await asyncio.to_thread(resident_bytes, spec.uid) > spec.memory:
                return "oom"
            if waited < step:
                continue
            waited = 0.0
        found = await asyncio.to_thread(over_storage, spec)
        if found is not None:
            return found
