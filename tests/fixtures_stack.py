"""The whole portal for real: a sandbox fleet over HTTP, a Celery worker (with beat, unless the
resync is switched off) on Redis, the watcher, and the test's PostgreSQL database shared with
both through committed data. Every process is checked when it starts, after each test and when
the stack stops: one that exited on its own fails the test with its log tail.

Each kind of stack (with or without the resync, executing steps or not) is started once per
session: starting one (a sandbox, a worker with beat, the watcher) cost every test module 5
to 10 s. A module starts on its stack's sandbox reset to the fleet, with the demo loaded
again and fresh policies; a stack's worker and watcher run only while a test uses it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
from django.core.management import call_command
from django.db import connection

from placement.demo import create_credentials
from portal.admission import reservations
from portal.karmada import client, lists, resources
from tests.fixtures_sandbox import SandboxServer, start_sandbox
from tests.stack import (
    WATCHER_READY,
    WORKER_READY,
    Process,
    Processes,
    logged,
    watcher_argv,
    worker_argv,
)

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
    processes: Processes
    # Off: the worker runs without beat, so no periodic resync folds in what the watcher misses.
    resync: bool = True
    # The test module that used the stack last: a module starts on a sandbox reset to the
    # fleet, as it did when each module had a stack of its own.
    module: str = ""

    @property
    def env(self) -> dict[str, str]:
        return self.processes.env

    @property
    def procs(self) -> dict[str, Process]:
        return self.processes.running

    def _spec(self, name: str) -> tuple[str, list[str], Callable[[Process], bool]]:
        workdir = self.processes.workdir
        if name == "worker":
            argv = worker_argv(
                concurrency=2,
                loglevel="info",
                node=f"test-{time.monotonic_ns()}@%h",
                beat_schedule=workdir / "beat-schedule" if self.resync else None,
            )
            return name, argv, logged(WORKER_READY)
        if name == "watcher":
            return name, watcher_argv(watch_timeout=30), logged(WATCHER_READY)
        raise ValueError(f"no such process in the stack: {name}")

    def start(self, name: str) -> Process:
        (process,) = self.start_together([name])
        return process

    def start_together(self, names: list[str]) -> list[Process]:
        """Start several of the stack's processes side by side (their start-ups overlap)."""
        return self.processes.start_together([self._spec(name) for name in names])

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Stop one process on purpose (a test restarts it with ``start``)."""
        self.processes.stop(name, sig)

    def check(self) -> None:
        """Fail with the log tail of every process (the sandbox too) that exited on its own."""
        self.sandbox.process.check("while the stack runs")
        self.processes.check()

    def log(self, name: str, lines: int = 60) -> str:
        return self.processes.log(name, lines)

    def workflows(self, run_id: int) -> list[dict[str, Any]]:
        items, _ = lists.list_objects(
            resources.WORKFLOW, label_selector=f"portal.multisite.io/run={run_id}"
        )
        return items


STACK_APP_NAME = "portal-test-stack"


def _flush_retried_on_deadlock() -> None:
    """A transactional test ends by emptying every table (TRUNCATE) while the stack's worker
    and watcher still work on what the test left, holding row locks in their own order:
    PostgreSQL then ends one side of the deadlock, and sometimes it is the TRUNCATE, which
    failed the next test's set-up. The worker's side is retried by the portal; the flush is
    retried here, as often as it takes within a bound."""
    from django.core.management.base import CommandError
    from django.db import OperationalError
    from django.test import TransactionTestCase

    # Private in django-stubs: the method TransactionTestCase flushes in.
    teardown = getattr(TransactionTestCase, "_fixture_teardown")  # noqa: B009

    def retried(self: TransactionTestCase) -> None:
        for attempt in range(5):
            try:
                teardown(self)
                return
            except (CommandError, OperationalError) as exc:
                cause = exc.__cause__ or exc
                if "deadlock" not in str(cause) or attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))

    setattr(TransactionTestCase, "_fixture_teardown", retried)  # noqa: B010


_flush_retried_on_deadlock()


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


# Every stack of the session that is up (see stack_for_test).
RUNNING_STACKS: list[Stack] = []


def stack_env(
    workdir: Path, db: dict[str, Any], redis_url: str, kubeconfig: Path, live_server_url: str
) -> dict[str, str]:
    """The environment of the stack's worker and watcher: the test database and Redis, the
    sandbox as Karmada, short timers, and the live server as the placement webhook."""
    return {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:"
        f"{db['PORT'] or 5432}/{db['NAME']}",
        "REDIS_URL": redis_url,
        # libpq names the stack's sessions, so that only they are ended when it stops.
        "PGAPPNAME": STACK_APP_NAME,
        "KARMADA_KUBECONFIG": str(kubeconfig),
        "PORTAL_RESYNC_SECONDS": "1",
        "PORTAL_FAILOVER_GRACE_SECONDS": "2",
        "PORTAL_STALE_SECONDS": "3",
        "KARMADA_REQUEST_TIMEOUT": "3",
        # The leader election of the watcher and beat, shorter than production's (10, 7, 2 s):
        # a standby takes over a killed leader sooner. The renew deadline stays above the
        # request timeout, so a slow answer alone never ends a term, and the lease leaves
        # 2 s past it for a leader's last fold to end before anyone may take over.
        "PORTAL_LEADER_LEASE_SECONDS": "6",
        "PORTAL_LEADER_RENEW_DEADLINE_SECONDS": "4",
        "PORTAL_LEADER_RETRY_SECONDS": "1",
        "PORTAL_VAR_DIR": str(workdir / "var"),
        # karmada-apiserver (the sandbox) calls the test's live server for runtime placement.
        "PORTAL_WEBHOOK_URL": f"{live_server_url}/webhooks/placement/",
        "PORTAL_WEBHOOK_TOKEN": WEBHOOK_TOKEN,
        # The webhook (the live server, in this process) queues decisions the watcher writes.
        "PORTAL_DECISION_QUEUE_KEY": STACK_QUEUE_KEY,
    }


@contextlib.contextmanager
def running_stack(
    tmp_path_factory: pytest.TempPathFactory,
    django_db_blocker: Any,
    live_server: Any,
    *,
    resync: bool,
    execute: bool = False,
    fleet: Path | None = None,
) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("stack")
    extra: list[str] = []
    data: Path | None = None
    if execute:
        # Steps run under their own user ids: their folders must be reachable by others, which
        # pytest's temp folders (0700) are not.
        data = Path(tempfile.mkdtemp(prefix="sandbox-stack-data-"))
        data.chmod(0o755)
        extra = ["--execute", "--data-dir", str(data)]
    if fleet is not None:
        extra += ["--fleet", str(fleet)]
    sandbox = start_sandbox(workdir, time_scale=TIME_SCALE, extra_args=extra)
    with django_db_blocker.unblock():
        db = connection.settings_dict
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
    redis.Redis.from_url(redis_url).flushdb()
    env = stack_env(workdir, db, redis_url, sandbox.kubeconfig, live_server.url)
    s = Stack(sandbox=sandbox, processes=Processes(workdir, env), resync=resync)
    RUNNING_STACKS.append(s)
    try:
        s.start_together(["worker", "watcher"])
        yield s
    finally:
        RUNNING_STACKS.remove(s)
        try:
            s.processes.stop_all()
        finally:
            sandbox.stop()
            if data is not None:
                shutil.rmtree(data, ignore_errors=True)
            # Anything of theirs still connected would keep the test database from being
            # dropped.
            with django_db_blocker.unblock():
                end_other_sessions(STACK_APP_NAME)


@pytest.fixture(scope="session")
def stack(
    tmp_path_factory: pytest.TempPathFactory,
    django_db_setup: Any,
    django_db_blocker: Any,
    live_server: Any,
) -> Iterator[Stack]:
    with running_stack(tmp_path_factory, django_db_blocker, live_server, resync=True) as s:
        yield s


@pytest.fixture(scope="session")
def stack_without_resync(
    tmp_path_factory: pytest.TempPathFactory,
    django_db_setup: Any,
    django_db_blocker: Any,
    live_server: Any,
) -> Iterator[Stack]:
    """The stack with no Celery beat: only the watcher brings Karmada's changes in."""
    with running_stack(tmp_path_factory, django_db_blocker, live_server, resync=False) as s:
        yield s


@pytest.fixture(scope="session")
def executing_stack(
    tmp_path_factory: pytest.TempPathFactory,
    django_db_setup: Any,
    django_db_blocker: Any,
    live_server: Any,
) -> Iterator[Stack]:
    """The stack on a sandbox that really runs the steps (`--execute`; needs bubblewrap)."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    with running_stack(
        tmp_path_factory, django_db_blocker, live_server, resync=True, execute=True
    ) as s:
        yield s


def quiet_stacks(but: Stack | None = None, sig: int = signal.SIGTERM) -> None:
    """Stop the worker and the watcher of every stack of the session (but one): nothing of
    theirs writes to the database any more. Killed (SIGKILL), they cannot hand their leases
    back: the harness does it for them, or the next watcher would stand by until the dead
    one's lease expired (PORTAL_LEADER_LEASE_SECONDS) before it watched anything."""
    for other in RUNNING_STACKS:
        if other is not but:
            killed = False
            for name in ("worker", "watcher"):
                if name in other.procs:
                    other.kill(name, sig)
                    killed = True
            if killed and sig == signal.SIGKILL:
                leases_released(other)


def leases_released(stack: Stack) -> None:
    """Delete the stack's election Leases (the watcher's and beat's), when none of the stack's
    processes runs any more: a Lease a live leader still renews is not the harness's to take.
    (Tests of the election itself kill leaders without this: there the standby must wait the
    lease out.)"""
    from django.conf import settings
    from kubernetes import client

    from portal import leader

    if stack.procs:  # a candidate still runs (an election test's second watcher or beat)
        return
    api = client.CoordinationV1Api(stack.sandbox.api_client())
    for name in (leader.WATCHER_LEASE, leader.BEAT_LEASE):
        with contextlib.suppress(client.ApiException):  # none yet: nobody ever led
            api.delete_namespaced_lease(name, settings.KARMADA_NAMESPACE)


# The stack whose worker last ran a test (its queued tasks are its own).
ACTIVE: list[Stack | None] = [None]


# The fixtures that are a stack: a test using none of them runs with no stack's processes.
STACK_FIXTURES = frozenset({"stack", "stack_without_resync", "executing_stack"})


@pytest.fixture(autouse=True)
def _stacks_quiet_unless_used(request: pytest.FixtureRequest) -> None:
    """Stacks live for the session, but their workers and watchers only while tests use them:
    any other test (one that drives the worker's code in process, or counts what is queued in
    the broker) runs with none of them about, as when each module stopped its own stack."""
    names = set(request.fixturenames)
    if RUNNING_STACKS and not (names & STACK_FIXTURES or any(n.endswith("_stack") for n in names)):
        quiet_stacks()
        ACTIVE[0] = None  # what this test queues is not the next stack test's


def drop_reservations() -> None:
    """The database was flushed after the last test: capacity the webhook still held for that
    test's units would be taken from this test's fleet by every decider."""
    held = reservations.client()
    if held is not None:
        held.delete(reservations.keys()[0])


@contextlib.contextmanager
def stack_for_test(stack: Stack, settings: Any) -> Iterator[Stack]:
    """The demo fleet in the database, the policies on the sandbox, no faults; every process
    running before and after the test."""
    stack.check()
    module = os.environ.get("PYTEST_CURRENT_TEST", "").split("::", 1)[0]
    if module != stack.module:
        # Objects an earlier module left (step workflows of runs its tests stopped, a site
        # it joined) would be this module's otherwise: run ids start again after a flush.
        stack.sandbox.reset()
        stack.module = module
    settings.KARMADA_KUBECONFIG = str(stack.sandbox.kubeconfig)
    settings.PORTAL_FAILOVER_GRACE_SECONDS = 2
    settings.PORTAL_WEBHOOK_TOKEN = WEBHOOK_TOKEN
    settings.PORTAL_WEBHOOK_URL = stack.env["PORTAL_WEBHOOK_URL"]
    settings.PORTAL_DECISION_QUEUE_KEY = STACK_QUEUE_KEY
    drop_reservations()
    client.reset()
    stack.sandbox.clear_faults()
    call_command("load_demo", sandbox=stack.sandbox.url, verbosity=0)
    # The demo sites' credential Secrets, as run_demo creates them: with real execution a step
    # reading another site's output waits for its Secret (tests that want it absent delete it).
    create_credentials(stack.sandbox.url, settings.KARMADA_NAMESPACE, settings.PORTAL_LABEL_DOMAIN)
    from portal import tasks

    # Twice: the portal syncs its policies at start-up and again on every inventory or Cluster
    # change, and on Karmada a sync that finds its policies already there must keep what the
    # webhooks added (the permanent-id label); a fresh control plane alone would hide that.
    tasks.sites_sync()
    tasks.sites_sync()
    # Stacks of one session share the Redis database, so the Celery queue: another stack's
    # worker would take this test's tasks and create its step workflows on that stack's
    # sandbox. Only the stack in use runs a worker and a watcher; the others start theirs
    # again when a test uses them.
    quiet_stacks(but=stack)
    if ACTIVE[0] is not stack:
        # Tasks another stack's beat or tests queued (for that stack's sandbox) wait in the
        # shared broker: this stack's worker must not take them.
        from portal.celery import app

        app.control.purge()
        ACTIVE[0] = stack
    # What an earlier test stopped on purpose and left stopped; anything that exited on its
    # own failed stack.check() above.
    stopped = [name for name in ("worker", "watcher") if name not in stack.procs]
    if stopped:
        stack.start_together(stopped)
    denied_before = stack.sandbox.last_denial()
    try:
        yield stack
    finally:
        stack.sandbox.clear_faults()
        client.reset()
    stack.check()
    # The portal runs as its ServiceAccount with the shipped RBAC: any refusal is a grant
    # deploy/ lacks, even where the portal turned the 403 into a message and went on.
    refused = stack.sandbox.portal_refusals(denied_before)
    assert not refused, "the portal's identity was refused:\n" + "\n".join(refused)


@pytest.fixture
def live(stack: Stack, transactional_db: Any, settings: Any) -> Iterator[Stack]:
    with stack_for_test(stack, settings) as s:
        yield s


@pytest.fixture
def live_without_resync(
    stack_without_resync: Stack, transactional_db: Any, settings: Any
) -> Iterator[Stack]:
    with stack_for_test(stack_without_resync, settings) as s:
        yield s


@pytest.fixture
def live_executing(executing_stack: Stack, transactional_db: Any, settings: Any) -> Iterator[Stack]:
    with stack_for_test(executing_stack, settings) as s:
        yield s


@contextlib.contextmanager
def gateway_on(sandbox: SandboxServer, settings: Any, **more: Any) -> Iterator[SandboxServer]:
    """The portal's gateway on ``sandbox`` (its portal kubeconfig, and ``more`` settings) for
    the block; its client is made anew on entry and forgotten on exit, so neither an earlier
    test's sandbox nor this one outlives the block."""
    settings.KARMADA_KUBECONFIG = str(sandbox.kubeconfig)
    for name, value in more.items():
        setattr(settings, name, value)
    client.reset()
    try:
        yield sandbox
    finally:
        client.reset()


def load_demo_inventory(sandbox: SandboxServer, settings: Any) -> None:
    """The demo inventory, and the repositories' Secrets as the demo's operators create them
    (the portal signs cross-site reads with them)."""
    call_command("load_demo", sandbox=sandbox.url, verbosity=0)
    create_credentials(sandbox.url, settings.KARMADA_NAMESPACE, settings.PORTAL_LABEL_DOMAIN)


@contextlib.contextmanager
def demo_on(sandbox: SandboxServer, settings: Any, **more: Any) -> Iterator[SandboxServer]:
    """``gateway_on`` with the demo inventory loaded and the portal's policies written: what
    ``demo_fleet`` is on the shared sandbox, on any sandbox."""
    from portal.controller import sync

    with gateway_on(sandbox, settings, **more):
        load_demo_inventory(sandbox, settings)
        sync.policies_sync()
        yield sandbox


@pytest.fixture
def demo_over_sandbox(sandbox: SandboxServer, db: Any, settings: Any) -> Iterator[SandboxServer]:
    """The demo inventory, with the portal's gateway pointed at the shared sandbox (no
    webhook registered). Policies are not written: ``demo_fleet`` writes them."""
    with gateway_on(sandbox, settings, PORTAL_WEBHOOK_REGISTER=False):
        load_demo_inventory(sandbox, settings)
        yield sandbox


@pytest.fixture
def demo_fleet(demo_over_sandbox: SandboxServer) -> SandboxServer:
    """``demo_over_sandbox`` with the portal's policies written, as the resync leaves them."""
    from portal.controller import sync

    sync.policies_sync()
    return demo_over_sandbox
