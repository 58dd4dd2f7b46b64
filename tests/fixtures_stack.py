"""The whole portal for real: a sandbox fleet over HTTP, a Celery worker (with beat) on Redis,
the watcher, and the test's PostgreSQL database shared with both through committed data."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
from django.core.management import call_command
from django.db import connection

from portal import gateway
from tests.fixtures_sandbox import SandboxServer, start_sandbox

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")
# Fast enough for a suite, slow enough that a run is still running when a test interferes.
TIME_SCALE = 20.0
WEBHOOK_TOKEN = "stack-webhook-token"
STACK_QUEUE_KEY = "stack:webhook-decisions"


def wait_for(predicate: Callable[[], T], timeout: float = 60.0, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


@dataclass
class Stack:
    sandbox: SandboxServer
    env: dict[str, str]
    workdir: Path
    procs: dict[str, subprocess.Popen[bytes]]

    def start(self, name: str) -> subprocess.Popen[bytes]:
        argv = {
            "worker": [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "portal",
                "worker",
                "-B",
                "-l",
                "info",
                "--concurrency",
                "2",
                "-n",
                f"test-{time.monotonic_ns()}@%h",
                "-s",
                str(self.workdir / "beat-schedule"),
            ],
            "watcher": [sys.executable, "manage.py", "watch_karmada", "--watch-timeout", "30"],
        }[name]
        log = (self.workdir / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.procs[name] = proc
        return proc

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs.pop(name)
        # The whole group: a Celery worker's pool processes hold database sessions too.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.kill(name, signal.SIGTERM)

    def log(self, name: str, lines: int = 60) -> str:
        path = self.workdir / f"{name}.log"
        return (
            "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
            if path.exists()
            else ""
        )

    def workflows(self, run_id: int) -> list[dict[str, Any]]:
        items, _ = gateway.list_objects(
            gateway.WORKFLOW, label_selector=f"portal.multisite.io/run={run_id}"
        )
        return items


STACK_APP_NAME = "portal-test-stack"


def end_other_sessions(application_name: str | None = None) -> None:
    """End the other sessions on the test database (PostgreSQL will not drop one in use): all
    of them, or those of one application name only. (This process may hold more than one: a
    connection is per thread and per context.)"""
    if connection.vendor != "postgresql":
        return
    sql = (
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    with connection.cursor() as cursor:
        if application_name is None:
            cursor.execute(sql)
        else:
            cursor.execute(sql + " AND application_name = %s", [application_name])


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory,
    django_db_setup: Any,
    django_db_blocker: Any,
    live_server: Any,
) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("stack")
    sandbox = start_sandbox(workdir, time_scale=TIME_SCALE)
    with django_db_blocker.unblock():
        db = connection.settings_dict
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
    redis.Redis.from_url(redis_url).flushdb()
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:"
        f"{db['PORT'] or 5432}/{db['NAME']}",
        "REDIS_URL": redis_url,
        # libpq names the stack's sessions, so that only they are ended when it stops.
        "PGAPPNAME": STACK_APP_NAME,
        "KARMADA_KUBECONFIG": str(sandbox.kubeconfig),
        "PORTAL_RESYNC_SECONDS": "1",
        "PORTAL_FAILOVER_GRACE_SECONDS": "2",
        "PORTAL_STALE_SECONDS": "3",
        "KARMADA_REQUEST_TIMEOUT": "3",
        "PORTAL_VAR_DIR": str(workdir / "var"),
        # karmada-apiserver (the sandbox) calls the test's live server for runtime placement.
        "PORTAL_WEBHOOK_URL": f"{live_server.url}/webhooks/placement/",
        "PORTAL_WEBHOOK_TOKEN": WEBHOOK_TOKEN,
        # The webhook (the live server, in this process) queues decisions the watcher writes.
        "PORTAL_DECISION_QUEUE_KEY": STACK_QUEUE_KEY,
    }
    s = Stack(sandbox=sandbox, env=env, workdir=workdir, procs={})
    s.start("worker")
    s.start("watcher")
    try:
        yield s
    finally:
        s.stop_all()
        sandbox.stop()
        # Anything of theirs still connected would keep the test database from being dropped.
        with django_db_blocker.unblock():
            end_other_sessions(STACK_APP_NAME)


@pytest.fixture
def live(stack: Stack, transactional_db: Any, settings: Any) -> Iterator[Stack]:
    """Per test: the demo fleet in the database, the policies on the sandbox, no faults."""
    settings.KARMADA_KUBECONFIG = str(stack.sandbox.kubeconfig)
    settings.PORTAL_FAILOVER_GRACE_SECONDS = 2
    settings.PORTAL_WEBHOOK_TOKEN = WEBHOOK_TOKEN
    settings.PORTAL_WEBHOOK_URL = stack.env["PORTAL_WEBHOOK_URL"]
    settings.PORTAL_DECISION_QUEUE_KEY = STACK_QUEUE_KEY
    gateway.reset()
    stack.sandbox.clear_faults()
    call_command("load_demo", verbosity=0)
    from portal import tasks

    # Twice: the portal syncs its policies at start-up and again on every inventory or Cluster
    # change, and on Karmada a sync that finds its policies already there must keep what the
    # webhooks added (the permanent-id label); a fresh control plane alone would hide that.
    tasks.sites_sync()
    tasks.sites_sync()
    for name in ("worker", "watcher"):
        if name not in stack.procs or stack.procs[name].poll() is not None:
            stack.start(name)
    try:
        yield stack
    finally:
        stack.sandbox.clear_faults()
        gateway.reset()
