"""Starting the portal's processes (the sandbox fleet, a Celery worker, the watcher, gunicorn)
for the integration tests and the benchmarks alike.

Plain Python, no pytest and no Django: the benchmarks run as scripts with the repository root
on ``sys.path`` and import this as the test fixtures do.

A process that has exited while it should be running is an error here, never a silent gap (a
green run on a stack whose watcher never started proves nothing): each process is checked when
it starts (ready, then still alive after a short settle) and again when it is stopped, and the
error names the process, its exit code and the tail of its log.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT.parent / "shared" / "reference"
KARMADA_CRDS = REFERENCE / "karmada" / "crds"
ARGO_CRD = REFERENCE / "argo" / "argoproj.io_workflows.yaml"

# A process that fails on its configuration (a missing file, a bad setting) exits within this.
SETTLE_S = 0.5
# How often a starting process is asked whether it is ready.
POLL_S = 0.05
START_TIMEOUT_S = 60.0
# What the watcher prints once its watch loops run (the watch_karmada command), and what a
# Celery worker logs at INFO once it consumes tasks.
WATCHER_READY = "watching Clusters and ResourceBindings"
WORKER_READY = " ready."


class ProcessFailed(RuntimeError):
    """A process exited although nobody stopped it, or never became ready."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """In the child: have the kernel send SIGTERM if the parent dies (e.g. killed by CI), so no
    worker is left consuming a shared machine."""
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    # The log is appended to across restarts: this start's output begins here.
    log_offset: int = 0

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        """What this start of the process has written so far."""
        with contextlib.suppress(OSError), self.log_path.open("rb") as log:
            log.seek(self.log_offset)
            return log.read().decode(errors="replace")
        return ""

    def log_tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def exited(self, when: str) -> ProcessFailed:
        return ProcessFailed(
            f"{self.name} (pid {self.pid}) exited {when} with exit code {self.popen.returncode}"
            f"\n--- last lines of {self.log_path.name}:\n{self.log_tail()}"
        )

    def check(self, when: str = "while it should be running") -> None:
        if not self.alive():
            raise self.exited(when)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the process and its group (a Celery worker's pool processes hold database
        sessions too). Raises ``ProcessFailed``, once the group is cleaned up, if it had
        exited before."""
        error = None if self.alive() else self.exited("before it was stopped")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)
        try:
            self.popen.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)
        if error is not None:
            raise error


def _stop_quietly(process: Process) -> None:
    if process.alive():
        with contextlib.suppress(Exception):
            process.stop()


def spawn(
    name: str, argv: list[str], *, log_path: Path, env: Mapping[str, str] | None = None
) -> Process:
    """Start ``argv`` from the repository root, its output into ``log_path``; do not wait."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    offset = log_path.stat().st_size if log_path.exists() else 0
    with log_path.open("ab") as log:
        popen = subprocess.Popen(
            argv,
            cwd=ROOT,
            # Unbuffered, so that the log shows what a process said before it died.
            env={**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
    process = Process(name=name, popen=popen, log_path=log_path, log_offset=offset)
    # A session that ends without running its finalizers still stops it.
    atexit.register(_stop_quietly, process)
    return process


def await_ready(
    processes: list[tuple[Process, Callable[[Process], bool] | None]],
    timeout: float = START_TIMEOUT_S,
) -> None:
    """Wait until each process is ready (its ``ready`` says so), then one settle for all of
    them, and raise ``ProcessFailed`` if one exits meanwhile. Processes started together
    become ready together: their start-ups overlap (on two cores, a worker's and a
    watcher's imports take about as long side by side as one alone)."""
    deadline = time.monotonic() + timeout
    waiting = [(p, r) for p, r in processes if r is not None]
    while waiting:
        for process, ready in list(waiting):
            if ready(process):
                waiting.remove((process, ready))
                continue
            process.check("while starting")
            if time.monotonic() > deadline:
                process.stop(signal.SIGKILL)
                raise ProcessFailed(
                    f"{process.name} was not ready after {timeout:.0f}s"
                    f"\n--- last lines of {process.log_path.name}:\n{process.log_tail()}"
                )
        if waiting:
            time.sleep(POLL_S)
    time.sleep(SETTLE_S)
    for process, _ready in processes:
        process.check("right after starting")


def launch(
    name: str,
    argv: list[str],
    *,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    ready: Callable[[Process], bool] | None = None,
    timeout: float = START_TIMEOUT_S,
) -> Process:
    """Start ``argv`` from the repository root, its output into ``log_path``; wait until
    ``ready`` says so, then a settle, and raise ``ProcessFailed`` if it exits meanwhile."""
    process = spawn(name, argv, log_path=log_path, env=env)
    await_ready([(process, ready)], timeout)
    return process


def logged(text: str) -> Callable[[Process], bool]:
    """Ready once this start of the process has written ``text``."""
    return lambda process: text in process.output()


def answers(url: str) -> Callable[[Process], bool]:
    """Ready once ``url`` answers 2xx."""

    def ready(_process: Process) -> bool:
        try:
            urllib.request.urlopen(url, timeout=2).close()
        except OSError:
            return False
        return True

    return ready


@dataclass
class Processes:
    """Named processes with one environment and one log each in ``workdir``."""

    workdir: Path
    env: dict[str, str]
    running: dict[str, Process] = field(default_factory=dict)

    def start(
        self, name: str, argv: list[str], ready: Callable[[Process], bool] | None = None
    ) -> Process:
        if name in self.running:
            self.running[name].check(f"before it was started again as {name}")
            raise RuntimeError(f"{name} is running already")
        process = launch(
            name, argv, log_path=self.workdir / f"{name}.log", env=self.env, ready=ready
        )
        self.running[name] = process
        return process

    def start_together(
        self, specs: list[tuple[str, list[str], Callable[[Process], bool] | None]]
    ) -> list[Process]:
        """Start several processes at once and wait until every one is ready."""
        for name, _argv, _ready in specs:
            if name in self.running:
                self.running[name].check(f"before it was started again as {name}")
                raise RuntimeError(f"{name} is running already")
        started = []
        for name, argv, ready in specs:
            process = spawn(name, argv, log_path=self.workdir / f"{name}.log", env=self.env)
            self.running[name] = process
            started.append((process, ready))
        await_ready(started)
        return [p for p, _r in started]

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        self.running.pop(name).stop(sig)

    def check(self) -> None:
        """Raise ``ProcessFailed`` for every process that exited while nobody stopped it."""
        when = "while it should be running"
        dead = [str(p.exited(when)) for p in self.running.values() if not p.alive()]
        if dead:
            raise ProcessFailed("\n\n".join(dead))

    def stop_all(self) -> None:
        """Stop every process, the last started first; then raise for those that had exited
        before."""
        errors = []
        for name in reversed(list(self.running)):
            try:
                self.stop(name)
            except ProcessFailed as exc:
                errors.append(str(exc))
        if errors:
            raise ProcessFailed("\n\n".join(errors))

    def log(self, name: str, lines: int = 60) -> str:
        path = self.workdir / f"{name}.log"
        return (
            "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
            if path.exists()
            else ""
        )


# -- the portal's processes ------------------------------------------------------------------


# The sandbox's arguments that apply the RBAC deploy/ ships, on Karmada and at every site.
SHIPPED_RBAC = (
    "--rbac",
    str(ROOT / "deploy" / "karmada" / "rbac.yaml"),
    "--member-rbac",
    str(ROOT / "deploy" / "member" / "portal-rbac.yaml"),
)


def sandbox_argv(port: int, kubeconfig: Path, time_scale: float, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "sandbox",
        "--port",
        str(port),
        "--kubeconfig",
        str(kubeconfig),
        "--time-scale",
        str(time_scale),
        *extra,
    ]


def worker_argv(
    *, concurrency: int, loglevel: str, beat_schedule: Path | None, node: str | None = None
) -> list[str]:
    """A Celery worker; with ``beat_schedule`` it runs beat too (the periodic resync).

    Without mingle: at start a worker asks the other workers on its broker for their revoked
    tasks and waits a second for answers. A test or benchmark stack's worker works alone on its
    broker (the harness stops any other stack's worker before a test runs), so that second,
    paid at every start, brought nothing."""
    argv = [sys.executable, "-m", "celery", "-A", "portal", "worker", "--without-mingle"]
    argv += ["-l", loglevel, "--concurrency", str(concurrency)]
    if node:
        argv += ["-n", node]
    if beat_schedule is not None:
        argv += ["-B", "-s", str(beat_schedule)]
    return argv


def watcher_argv(watch_timeout: int | None = None) -> list[str]:
    argv = [sys.executable, "manage.py", "watch_karmada"]
    return argv if watch_timeout is None else [*argv, "--watch-timeout", str(watch_timeout)]


def gunicorn_argv(port: int, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gunicorn",
        "portal.wsgi:application",
        "--bind",
        f"127.0.0.1:{port}",
        *extra,
    ]
