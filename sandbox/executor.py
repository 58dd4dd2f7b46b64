"""Runs one pod's main container for real, isolated with bubblewrap (`bwrap`).

What a step gets: its own root file system (the pod's folder, as a container's writable layer)
with the host's system folders (`/usr`, `/bin`, `/lib*`, `/etc`) mounted read-only over it, and
its volume mounts; nothing else of the host is visible or writable; no network (`--unshare-net`,
only a loopback of its own); its own pid, ipc and uts namespaces; a user id of its own (so the
process limit counts only its processes, and it cannot read other pods' folders); a process
limit (`RLIMIT_NPROC`), a memory limit from `resources.limits.memory` as `RLIMIT_DATA` (what
an unprivileged process can enforce: a container's cgroup limit counts resident memory,
this counts private writable mappings, and a step over it sees allocation failures instead of
an OOM kill), and a wall-clock limit.

Images do not exist here: the fleet maps image name patterns to a runner (`shell`, `python`,
`argosay`, `whalesay`) that provides the commands such an image has, from the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

from sandbox import confined, limits
from sandbox.pod import PodResult, PodSpec, Tail

BWRAP = "/usr/bin/bwrap"
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
# Argo keeps the last 256 kB of stdout as `result` (workflow/executor/executor.go).
RESULT_BYTES = 256 * 1024
LOG_BYTES = 1024 * 1024
PIDS = 128
# Every namespace of its own except the network, which a Workflow's pods share (Network).
JOIN_NET = ["--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-uts"]
JOIN_NET += ["--unshare-cgroup-try"]
PATH = "/.sandbox/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HERE = Path(__file__).resolve().parent
# Folders an image's root file system has besides the system ones.
IMAGE_DIRS = ("tmp", "mnt", "opt", "srv", "home", "root", "run", "media", "var/tmp")

# image pattern -> runner; fleet files may replace the list (`execution.images`).
DEFAULT_IMAGES: list[dict[str, str]] = [
    {"match": "alpine*", "runner": "shell"},
    {"match": "busybox*", "runner": "shell"},
    {"match": "debian*", "runner": "shell"},
    {"match": "ubuntu*", "runner": "shell"},
    {"match": "bash*", "runner": "shell"},
    {"match": "python*", "runner": "python"},
    {"match": "argoproj/argosay:*", "runner": "argosay"},
    {"match": "docker/whalesay*", "runner": "whalesay"},
]
# What an image runs without `command`: (ENTRYPOINT, CMD) as the images define them.
RUNNER_DEFAULTS: dict[str, tuple[list[str], list[str]]] = {
    "shell": ([], ["sh"]),
    "python": ([], ["python3"]),
    "argosay": (["/argosay"], []),
    "whalesay": ([], ["cowsay"]),
}


def host_python() -> str:
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(cand, os.X_OK):
            return cand
    return shutil.which("python3") or sys.executable


def image_name(image: str) -> str:
    """An image reference without Docker Hub's implicit registry prefixes."""
    name = image.strip()
    for prefix in ("docker.io/library/", "docker.io/", "index.docker.io/library/"):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def runner_for(image: str, images: list[dict[str, str]] | None = None) -> str | None:
    name = image_name(image)
    for rule in images if images is not None else DEFAULT_IMAGES:
        if fnmatch.fnmatchcase(name, rule["match"]):
            return rule["runner"]
    return None


def container_argv(runner: str, container: dict[str, Any]) -> list[str]:
    """Docker's rule: `command` replaces ENTRYPOINT, `args` replace CMD."""
    entrypoint, cmd = RUNNER_DEFAULTS[runner]
    command = [str(c) for c in container.get("command") or []]
    args = [str(a) for a in container.get("args") or []]
    if command:
        return command + args
    return entrypoint + (args or cmd)


def prepare_bin(spec: PodSpec) -> Path:
    """`/.sandbox/bin`: python, the argosay and cowsay stand-ins and a `sleep` that follows
    the sandbox's time scale (a step's `sleep 60` is 60 simulated seconds)."""
    bindir = spec.root / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    py = host_python()
    for name in ("python", "python3"):
        link = bindir / name
        if not link.exists():
            link.symlink_to(py)
    (bindir / "argosay").write_bytes((HERE / "bin" / "argosay").read_bytes())
    (bindir / "cowsay").write_text(f"#!{py}\n" + (HERE / "whalesay.py").read_text())
    clock = _clock_source(spec.sim_deadline)
    (bindir / "sleep").write_text(
        # -S: without site, so the sitecustomize below does not scale it a second time.
        f"#!{py} -S\n"
        "import re, sys, time\n"
        + clock
        + "units = {'': 1, 's': 1, 'm': 60, 'h': 3600, 'd': 86400}\n"
        "total = 0.0\n"
        "for arg in sys.argv[1:]:\n"
        "    m = re.fullmatch(r'(\\d+(?:\\.\\d*)?|\\.\\d+)([smhd]?)', arg)\n"
        "    if arg in ('inf', 'infinity'):\n"
        "        total = float('inf')\n"
        "    elif not m:\n"
        "        sys.exit(f'sleep: invalid time interval {arg!r}')\n"
        "    else:\n"
        "        total += float(m.group(1)) * units[m.group(2)]\n"
        f"time.sleep(min(_take(total) / {spec.time_scale!r}, 1e6))\n"
    )
    for name in ("argosay", "cowsay", "sleep"):
        (bindir / name).chmod(0o755)
    bash = shutil.which("bash")
    if spec.ash and bash and not (bindir / "sh").exists():
        # invoked as `sh`, bash starts in POSIX mode
        (bindir / "sh").symlink_to(bash)
    # Python steps' time.sleep follows the time scale too (site-packages hook).
    (bindir / "sitecustomize.py").write_text(
        "import time as _t\n" + clock + "_sleep = _t.sleep\n"
        f"_t.sleep = lambda s: _sleep(min(_take(max(float(s), 0.0)) / {spec.time_scale!r}, 1e6))\n"
    )
    return bindir


def _clock_source(sim_deadline: float | None) -> str:
    """`_take(total)`: the seconds a step's sleep really waits, `total` unless the sleeps so
    far add up past the simulated deadline (then forever)."""
    # A step's sleeps run on the simulated clock, and so does its deadline: whatever the scale
    # (and however long the real start of the pod took), sleeps adding up to more than the
    # deadline hold the step until it is killed, as on a cluster.
    return (
        f"_DEADLINE = {sim_deadline!r}\n"
        "def _take(total):\n"
        "    if _DEADLINE is None:\n"
        "        return total\n"
        "    try:\n"
        "        with open('/.sandbox-clock') as f:\n"
        "            before = float(f.read() or 0)\n"
        "    except (OSError, ValueError):\n"
        "        before = 0.0\n"
        "    try:\n"
        "        with open('/.sandbox-clock', 'w') as f:\n"
        "            f.write(repr(before + total))\n"
        "    except OSError:\n"
        "        pass\n"
        "    return float('inf') if before + total > _DEADLINE else total\n"
    )


def bwrap_argv(spec: PodSpec, bindir: Path, cgroup: limits.MemoryCgroup | None = None) -> list[str]:
    # Into the pod's memory cgroup before anything of the step runs (what it forks inherits it).
    argv = cgroup.enter_argv() if cgroup is not None else []
    argv += ["nsenter", f"--net=/proc/{spec.netns}/ns/net", "--"] if spec.netns else []
    argv += [
        "setpriv",
        f"--reuid={spec.uid}",
        f"--regid={spec.uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "prlimit",
        f"--nproc={PIDS}",
        "--core=0",
    ]
    if spec.memory and cgroup is None:
        # No memory cgroup to be had: the poller in limits.py stands in for the OOM killer,
        # and RLIMIT_DATA well above the limit bounds what a step can take between two polls
        # (close to it, allocations would fail before the poller saw them).
        argv.append(f"--data={limits.fallback_data_limit(spec.memory)}")
    argv += [
        "--",
        BWRAP,
        *(JOIN_NET if spec.netns else ["--unshare-all"]),
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "pod",
    ]
    # The pod's own folder is its root file system (a container's writable layer); the
    # host's system folders are mounted read-only over it.
    argv += ["--bind", str(spec.root / "fs"), "/", "--dev", "/dev", "--proc", "/proc"]
    for d in SYSTEM_DIRS:
        argv += ["--ro-bind-try", d, d]
    argv += ["--ro-bind", str(bindir), "/.sandbox/bin"]
    argv += ["--ro-bind", str(bindir / "argosay"), "/argosay"]
    for m in sorted(spec.mounts, key=lambda m: m.dest.count("/")):
        if m.fd is not None:
            argv += ["--ro-bind-fd" if m.readonly else "--bind-fd", str(m.fd), m.dest]
        else:
            argv += ["--ro-bind" if m.readonly else "--bind", str(m.host), m.dest]
    argv += ["--chdir", spec.workdir or "/", "--clearenv"]
    for k, v in spec.env.items():
        argv += ["--setenv", k, v]
    return [*argv, "--", *spec.argv]


def chown_tree(path: Path | int, uid: int) -> None:
    """Give a folder (a path the sandbox made, or an open descriptor) and all in it to `uid`,
    never through a link: a step may have left links to host files in its folders."""
    fd = confined.open_base(path) if isinstance(path, Path) else os.dup(path)
    try:
        confined.chown_tree(fd, "", uid)
    finally:
        os.close(fd)


def make_dirs(root: Path, paths: list[str]) -> None:
    """Folders of the pod's root file system, made beneath it (never through a link that
    leads out: a containerSet's earlier container may have left one)."""
    fd = confined.open_base(root, create=True)
    try:
        for p in paths:
            with contextlib.suppress(OSError):
                os.close(confined.open_dir(fd, p, create=True))
    finally:
        os.close(fd)


async def _pump(stream: asyncio.StreamReader | None, *sinks: Tail) -> None:
    if stream is None:
        return
    while chunk := await stream.read(65536):
        for s in sinks:
            s.write(chunk)


async def run_pod(spec: PodSpec) -> PodResult:
    """Run the pod's main container to its end (or its deadline) and collect its output."""
    make_dirs(spec.root / "fs", [*IMAGE_DIRS, *([spec.workdir] if spec.workdir else [])])
    bindir = prepare_bin(spec)
    for m in spec.mounts:
        if m.fd is None and not m.host.exists():
            m.host.mkdir(parents=True, exist_ok=True)
    # A tree a step made too deep to walk stays as it is: the step then meets what it made.
    with contextlib.suppress(OSError):
        chown_tree(spec.root, spec.uid)
    spec.root.chmod(0o700)  # other pods (other user ids) cannot look in
    for m in spec.mounts:
        with contextlib.suppress(OSError):
            if m.fd is not None:
                chown_tree(m.fd, spec.uid)
            elif not m.host.is_relative_to(spec.root):
                chown_tree(m.host, spec.uid)
    env = {"PATH": PATH, "HOME": "/root", "HOSTNAME": "pod", **spec.env}
    if spec.time_scale != 1.0:
        env.setdefault("PYTHONPATH", "/.sandbox/bin")
    spec.env = env
    stdout, log = Tail(RESULT_BYTES), spec.log if spec.log is not None else Tail(LOG_BYTES)
    cgroup = limits.MemoryCgroup.create(spec.memory) if spec.memory else None
    try:
        return await _run(spec, bindir, cgroup, stdout, log)
    finally:
        if cgroup is not None:
            await asyncio.to_thread(cgroup.remove)


async def _run(
    spec: PodSpec, bindir: Path, cgroup: limits.MemoryCgroup | None, stdout: Tail, log: Tail
) -> PodResult:
    proc = await asyncio.create_subprocess_exec(
        *bwrap_argv(spec, bindir, cgroup),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        pass_fds=[m.fd for m in spec.mounts if m.fd is not None],
    )
    pumps = asyncio.gather(_pump(proc.stdout, stdout, log), _pump(proc.stderr, log))
    limit = spec.wallclock if spec.deadline is None else min(spec.deadline, spec.wallclock)
    killed: str | None = None
    watch = asyncio.get_running_loop().create_task(limits.watch(spec, cgroup is None))
    try:
        ended = asyncio.ensure_future(proc.wait())
        done, _ = await asyncio.wait(
            {watch, ended}, timeout=limit, return_when=asyncio.FIRST_COMPLETED
        )
        if watch in done:
            killed = watch.result()
            _kill(proc)
        elif not done:
            killed = (
                "deadline" if spec.deadline is not None and limit == spec.deadline else "wallclock"
            )
            _kill(proc)
    except asyncio.CancelledError:
        _kill(proc)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(proc.wait(), 5)
        pumps.cancel()
        raise
    finally:
        watch.cancel()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(pumps, 5)
    code = await proc.wait()
    # A signal death shows as 128+N, as a container runtime reports it.
    code = 128 - code if code < 0 else code
    if killed is None and cgroup is not None and await asyncio.to_thread(cgroup.oom_killed):
        killed = "oom"
    if killed is None and spec.ephemeral_storage is not None:
        # The eviction manager may not have looked while it ran: it sees what is left now.
        killed = await asyncio.to_thread(limits.over_storage, spec)
    message = ""
    if killed == "evicted":
        message = limits.eviction_message(spec.ephemeral_storage_text)
    if killed == "oom":
        code = 137  # killed by SIGKILL, as the runtime reports an OOM kill
    return PodResult(
        exit_code=code,
        stdout=bytes(stdout.data),
        log=bytes(log.data),
        killed=killed,
        message=message,
    )


def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


_REAPING: set[asyncio.Task[int]] = set()


class Network:
    """One network namespace (only a loopback) that a Workflow's pods share, so that a daemon
    step is reachable from the other steps at 127.0.0.1 and nothing else is."""

    def __init__(self) -> None:
        self.proc: asyncio.subprocess.Process | None = None
        self.lock = asyncio.Lock()

    async def pid(self) -> int:
        async with self.lock:
            return await self._pid()

    async def _pid(self) -> int:
        if self.proc is None or self.proc.returncode is not None:
            self.proc = await asyncio.create_subprocess_exec(
                BWRAP,
                "--unshare-net",
                "--ro-bind",
                "/",
                "/",
                "--dev",
                "/dev",
                "--die-with-parent",
                "--",
                "sleep",
                "infinity",
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                start_new_session=True,
            )
            # bwrap forks the namespace's process: wait until it exists.
            for _ in range(100):
                if _child_in_new_netns(self.proc.pid) is not None:
                    break
                await asyncio.sleep(0.02)
        child = _child_in_new_netns(self.proc.pid)
        if child is None:
            # Never fall back to a process in the host's network namespace.
            self.close()
            raise RuntimeError("could not create the pods' network namespace")
        return child

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.returncode is None:
            _kill(proc)
            # Reaped by asyncio: dropping the process object unreaped would let subprocess's
            # own clean-up reap it first (asyncio then warns of an unknown child).
            task = asyncio.get_running_loop().create_task(proc.wait())
            _REAPING.add(task)
            task.add_done_callback(_REAPING.discard)


def _child_in_new_netns(pid: int) -> int | None:
    try:
        mine = os.readlink("/proc/self/ns/net")
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        for c in children:
            if os.readlink(f"/proc/{c}/ns/net") != mine:
                return int(c)
    except OSError:
        return None
    return None


def reachable(path: Path) -> bool:
    """Whether other users can reach `path` (every existing folder above it has o+x)."""
    for p in [path.resolve(), *path.resolve().parents]:
        if p.exists() and not p.stat().st_mode & 0o001:
            return False
    return True


def available() -> bool:
    return os.access(BWRAP, os.X_OK) and shutil.which("setpriv") is not None
