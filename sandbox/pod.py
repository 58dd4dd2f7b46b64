"""What a pod is to the executor: its spec (folder, command, mounts, limits), its result,
and the bounded buffers its output is kept in."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Tail:
    """The last `limit` bytes written."""

    limit: int
    data: bytearray = field(default_factory=bytearray)
    total: int = 0

    def write(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.data += chunk
        if len(self.data) > self.limit:
            del self.data[: len(self.data) - self.limit]


@dataclass
class Mount:
    host: Path
    dest: str
    readonly: bool = False
    # An open descriptor of the folder (a volume, resolved beneath it): bound by descriptor,
    # so a link a step swaps in afterwards (a claim is shared) changes nothing.
    fd: int | None = None


@dataclass
class PodSpec:
    root: Path  # the pod's own folder on the host
    argv: list[str]
    env: dict[str, str]
    mounts: list[Mount]
    workdir: str
    uid: int
    memory: int | None = None  # bytes: the container's memory limit
    # bytes: the pod's ephemeral storage limit, and how the kubelet would write it ("2Gi")
    ephemeral_storage: int | None = None
    ephemeral_storage_text: str = ""
    eviction_interval: float = 1.0
    deadline: float | None = None  # real seconds; killing counts as exceeding the deadline
    wallclock: float = 600.0  # real seconds; the sandbox's own limit
    time_scale: float = 1.0
    # simulated seconds (`activeDeadlineSeconds`, `timeout`): what the pod's scaled sleeps
    # may add up to before the step is held until `deadline` kills it
    sim_deadline: float | None = None
    # an image whose `sh` is busybox's ash (alpine, busybox): bash in its POSIX mode stands in
    # for it, which has ash's $RANDOM, `echo -n` and `[[` where the host's dash has not
    ash: bool = False
    netns: int | None = None  # pid holding the network namespace the pod joins
    log: Tail | None = None  # where stdout and stderr go as they come (besides the result)


@dataclass
class PodResult:
    exit_code: int
    stdout: bytes
    log: bytes
    killed: str | None = None  # "deadline" | "wallclock" | "oom" | "evicted"
    message: str = ""  # the kubelet's, for "evicted"


__all__ = ["Mount", "PodResult", "PodSpec", "Tail"]
