"""Run the whole portal on one machine: ``make demo``.

Migrates, loads the demo fleet, then starts the sandbox fleet, a Celery worker and beat, the
watcher and the web server, prints the login and an API token, and stops everything on Ctrl-C.
With ``KARMADA_KUBECONFIG`` set it uses that Karmada instead of starting the sandbox.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command, get_commands
from django.core.management.base import BaseCommand

from placement.demo import create_credentials

SANDBOX_PORT = 18443


class _Children:
    """The demo's processes: each logs to ``<PORTAL_VAR_DIR>/logs/<name>.log``; they stop
    together."""

    def __init__(self, command: BaseCommand, env: dict[str, str], var: Path) -> None:
        self.command = command
        self.env = env
        self.var = var
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def log_path(self, name: str) -> Path:
        """Where ``name`` logs, as a path the reader can open from where they are."""
        return (self.var / "logs" / f"{name}.log").resolve()

    def start(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.log_path(name), "ab")  # noqa: SIM115 - lives with the child
        proc = subprocess.Popen(
            argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.procs.append((name, proc))
        self.command.stdout.write(f"  started {name} (pid {proc.pid}, log {self.log_path(name)})")
        return proc

    def stop_all(self, *_: Any) -> None:
        self.stop()
        sys.exit(0)

    def stop(self) -> None:
        """Stop every child started so far (each in its own session, so its children too)."""
        if not self.procs:
            return
        self.command.stdout.write("\nStopping the demo ...")
        for _name, proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for _name, proc in self.procs:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        self.procs.clear()

    def watch(self) -> None:
        """Until one of them exits: then stop them all."""
        while True:
            for name, proc in self.procs:
                if proc.poll() is not None:
                    self.command.stderr.write(
                        f"{name} exited with {proc.returncode}; see {self.log_path(name)}"
                    )
                    self.stop_all()
            time.sleep(1)


class Command(BaseCommand):
    help = "Start the demo: sandbox fleet, worker, beat, watcher and web server."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--time-scale", type=float, default=20.0)

    def handle(self, *args: Any, **options: Any) -> None:
        port: int = options["port"]
        env = os.environ.copy()
        var = Path(settings.VAR_DIR)
        var.mkdir(parents=True, exist_ok=True)
        (var / "logs").mkdir(exist_ok=True)
        children = _Children(self, env, var)
        signal.signal(signal.SIGINT, children.stop_all)
        signal.signal(signal.SIGTERM, children.stop_all)

        # The sandbox calls this portal's admission webhook, with a token only they share.
        env.setdefault("PORTAL_WEBHOOK_URL", f"http://127.0.0.1:{port}/webhooks/placement/")
        env.setdefault("PORTAL_WEBHOOK_TOKEN", secrets.token_urlsafe(24))
        os.environ["PORTAL_WEBHOOK_URL"] = env["PORTAL_WEBHOOK_URL"]
        os.environ["PORTAL_WEBHOOK_TOKEN"] = env["PORTAL_WEBHOOK_TOKEN"]
        if not _port_free(port):
            raise SystemExit(f"port {port} is in use: stop what runs there or pass --port")
        try:
            self._start(children, env, var, port, options["time_scale"])
        except BaseException:
            # A failed start-up (a bad DATABASE_URL, a port taken meanwhile, Ctrl-C) must not
            # leave the children already started running, adopted by init.
            children.stop()
            raise
        self.stdout.write(
            self.style.SUCCESS(
                f"\nThe portal is at http://127.0.0.1:{port}/ (API docs: /api/docs/). "
                "Press Ctrl-C to stop everything."
            )
        )
        children.watch()

    def _start(
        self, children: _Children, env: dict[str, str], var: Path, port: int, time_scale: float
    ) -> None:
        sandbox = ""
        if not settings.KARMADA_KUBECONFIG and _has_module("sandbox.__main__"):
            sandbox = _start_sandbox(children, time_scale)

        call_command("migrate", interactive=False, verbosity=0)
        call_command("load_demo", sandbox=sandbox)

        py = sys.executable
        worker = ["worker", "-l", "info", "--concurrency", "2", "-n", "demo-worker@%h"]
        children.start("worker", [py, "-m", "celery", "-A", "portal", *worker])
        beat = ["beat", "-l", "info", "-s", str(var / "celerybeat-schedule")]
        children.start("beat", [py, "-m", "celery", "-A", "portal", *beat])
        if "watch_karmada" in get_commands() and env.get("KARMADA_KUBECONFIG"):
            children.start("watcher", [py, "manage.py", "watch_karmada"])
        web = children.start(
            "web", [py, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"]
        )
        _wait_for(f"http://127.0.0.1:{port}/healthz", web)


def _start_sandbox(children: _Children, time_scale: float) -> str:
    """The sandbox fleet on a free port (its URL); the portal's processes use its
    kubeconfig."""
    kubeconfig = children.var / "kubeconfig"  # an operator's (system:admin)
    portal_kubeconfig = children.var / "portal.kubeconfig"
    port = next(p for p in range(SANDBOX_PORT, SANDBOX_PORT + 100) if _port_free(p))
    argv = ["--port", str(port), "--kubeconfig", str(kubeconfig), "--time-scale", str(time_scale)]
    # The portal runs as its own ServiceAccount, with the RBAC deploy/ ships applied on
    # Karmada and at every site, as in production.
    deploy = Path(settings.BASE_DIR) / "deploy"
    argv += ["--portal-kubeconfig", str(portal_kubeconfig)]
    argv += ["--rbac", str(deploy / "karmada" / "rbac.yaml")]
    argv += ["--member-rbac", str(deploy / "member" / "portal-rbac.yaml")]
    # Steps really run (isolated by bubblewrap) so a scientist sees real results; without
    # bubblewrap on the machine they are simulated, and the run page's node messages say so.
    if shutil.which("bwrap"):
        argv.append("--execute")
    else:
        children.command.stderr.write(
            "bubblewrap (bwrap) not found: the sandbox simulates the steps instead of running them"
        )
    proc = children.start("sandbox", [sys.executable, "-m", "sandbox", *argv])
    _wait_for(f"http://127.0.0.1:{port}/version", proc)
    # What the demo sites' operators would do once: their repositories' credential Secrets on
    # karmada-apiserver, which Karmada propagates to every site.
    create_credentials(
        f"http://127.0.0.1:{port}", settings.KARMADA_NAMESPACE, settings.PORTAL_LABEL_DOMAIN
    )
    children.env["KARMADA_KUBECONFIG"] = str(portal_kubeconfig)
    os.environ["KARMADA_KUBECONFIG"] = str(portal_kubeconfig)
    return f"http://127.0.0.1:{port}"


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As servers do: connections in TIME_WAIT from an earlier run do not make it busy.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _has_module(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _wait_for(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url}: the process exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise SystemExit(f"{url} did not answer within {timeout:.0f}s")
