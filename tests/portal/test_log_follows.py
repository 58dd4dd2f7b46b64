"""Following a step log on gunicorn as production runs it (``portal/gunicorn_conf.py``, its
default worker count): follows hold a thread each, not a worker, are capped per user (429)
and per process, and probes and other API calls keep answering while they stream.

The step really runs at its site on a sandbox fleet (simulated, for an hour of its clock), so
the log is followed through Karmada's cluster proxy as for any run."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import secrets
import signal
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as settings_module
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import connection
from kubernetes import client as k8s

from portal import log_follows
from portal.choices import RunStatus, UnitPhase
from portal.karmada import client, logs
from portal.models import UnitRun, WorkflowRun
from tests.factories import UserFactory
from tests.fixtures_sandbox import SandboxServer, start_sandbox
from tests.fixtures_stack import wait_for
from tests.portal.helpers import make_run
from tests.sandbox.conftest import SITE_LABEL, leaf, site_policy, workflow
from tests.stack import Process, answers, free_port, launch

pytestmark = pytest.mark.integration

WF = ("argoproj.io", "v1alpha1")
PP = ("policy.karmada.io", "v1alpha1")


@pytest.fixture(scope="module")
def follow_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxServer]:
    server = start_sandbox(tmp_path_factory.mktemp("follow-sandbox"), time_scale=1.0)
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Web:
    port: int
    process: Process

    def request(self, path: str, key: str | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request("GET", path, headers={"Authorization": f"Token {key}"} if key else {})
            answer = conn.getresponse()
            return answer.status, answer.read()
        finally:
            conn.close()

    def open_follow(self, path: str, key: str) -> Follow:
        """Start a follow; an accepted one stays open (its headers read, its body not)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        conn.request("GET", path, headers={"Authorization": f"Token {key}"})
        answer = conn.getresponse()
        if answer.status == 200:
            return Follow(200, conn, answer, b"")
        body = answer.read()
        conn.close()
        return Follow(answer.status, conn, answer, body)


@dataclass
class Follow:
    status: int
    conn: http.client.HTTPConnection
    answer: http.client.HTTPResponse
    body: bytes


@pytest.fixture
def web(follow_sandbox: SandboxServer, transactional_db: Any, tmp_path: Path) -> Iterator[Web]:
    db = connection.settings_dict
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:"
        f"{db['PORT'] or 5432}/{db['NAME']}",
        "KARMADA_KUBECONFIG": str(follow_sandbox.kubeconfig),
        "PORTAL_VAR_DIR": str(tmp_path / "var"),
        # Longer than the test: an accepted follow stays open until the test closes it.
        "PORTAL_LOG_FOLLOW_SECONDS": "600",
    }
    env.pop("GUNICORN_WORKERS", None)
    env.pop("GUNICORN_THREADS", None)
    env.pop("GUNICORN_WORKER_CLASS", None)
    process = launch(
        "gunicorn",
        # The production command (docker-compose.yml): its default workers and threads.
        [
            sys.executable,
            "-m",
            "gunicorn",
            "-c",
            "python:portal.gunicorn_conf",
            "portal.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--graceful-timeout",
            "1",
        ],
        log_path=tmp_path / "gunicorn.log",
        env=env,
        ready=answers(f"http://127.0.0.1:{port}/healthz"),
    )
    try:
        yield Web(port, process)
        process.check()
    finally:
        with contextlib.suppress(Exception):
            process.stop(signal.SIGTERM)


@pytest.fixture
def running_step(
    follow_sandbox: SandboxServer, settings: Any, scientist: User, project: Any
) -> Iterator[WorkflowRun]:
    """A run whose one step runs at site-a for an hour (simulated), as Karmada shows it."""
    settings.KARMADA_KUBECONFIG = str(follow_sandbox.kubeconfig)
    client.reset()
    run = make_run(
        scientist,
        project=project,
        status=RunStatus.RUNNING,
        units=[("inference", "site-a", UnitPhase.RUNNING, [])],
    )
    name = f"{run.name}-inference-1"
    UnitRun.objects.filter(run=run).update(site="site-a", workflow_name=name)
    api = follow_sandbox.api_client()
    custom = k8s.CustomObjectsApi(api)
    ns = settings.KARMADA_NAMESPACE
    with contextlib.suppress(k8s.ApiException):
        k8s.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
    with contextlib.suppress(k8s.ApiException):
        custom.create_namespaced_custom_object(
            *PP, ns, "propagationpolicies", site_policy("site-a")
        )
    body = workflow(name, [leaf("main", duration="3600s")], labels={SITE_LABEL: "site-a"})
    custom.create_namespaced_custom_object(*WF, ns, "workflows", body)

    unit = UnitRun.objects.get(run=run)

    def pod_running() -> bool:
        try:
            pods = logs.attempt_pods(unit, 1, "site-a").pods
        except logs.LogsNotAvailable:
            return False
        return any(p.phase == "Running" for p in pods)

    follow_sandbox.wait_for(pod_running, what=f"{name}'s pod Running at site-a")
    try:
        yield run
    finally:
        with contextlib.suppress(k8s.ApiException):
            custom.delete_namespaced_custom_object(*WF, ns, "workflows", name)
        client.reset()


def free_slots(*users: User) -> None:
    """Slots live in Redis beyond a test session: none left by an earlier one for these ids."""
    cache.delete_many(
        [
            f"{log_follows.PREFIX}:user:{user.pk}:{i}"
            for user in users
            for i in range(settings_module.PORTAL_LOG_FOLLOWS_PER_USER)
        ]
    )


def test_follows_are_capped_per_user_and_probes_keep_answering(
    web: Web,
    running_step: WorkflowRun,
    scientist: User,
    project: Any,
    settings: Any,
    api_key_for: Any,
) -> None:
    other = UserFactory(username="colleague")
    project.members.add(other)
    free_slots(scientist, other)
    key = api_key_for(scientist)
    other_key = api_key_for(other)
    url = f"/api/v1/runs/{running_step.pk}/units/inference/logs/?follow=1"
    cap = settings.PORTAL_LOG_FOLLOWS_PER_USER
    follows: list[Follow] = []
    try:
        with ThreadPoolExecutor(8) as pool:
            follows = list(pool.map(lambda _: web.open_follow(url, key), range(8)))
        statuses = sorted(f.status for f in follows)
        assert statuses == [200] * cap + [429] * (8 - cap), statuses
        refused = next(f for f in follows if f.status == 429)
        assert "PORTAL_LOG_FOLLOWS_PER_USER" in json.loads(refused.body)["detail"]
        assert refused.answer.getheader("Retry-After")

        # Another member's follow is not the first user's to spend: more follows now stream
        # than gunicorn has workers (3), which sync workers could not serve at all.
        follows.append(web.open_follow(url, other_key))
        assert follows[-1].status == 200
        assert sum(f.status == 200 for f in follows) > 3

        # While they stream: the probe, a normal API call, and a plain (not followed) read.
        assert web.request("/healthz")[0] == 200
        status, body = web.request("/api/v1/runs/", key)
        assert status == 200 and running_step.name in body.decode()
        status, _ = web.request(f"/api/v1/runs/{running_step.pk}/units/inference/logs/", key)
        assert status == 200
    finally:
        for f in follows:
            f.conn.close()
    web.process.check()


def test_a_follow_gives_its_slot_back_when_it_ends(
    web: Web,
    running_step: WorkflowRun,
    scientist: User,
    settings: Any,
    follow_sandbox: SandboxServer,
    api_key_for: Any,
) -> None:
    free_slots(scientist)
    key = api_key_for(scientist)
    url = f"/api/v1/runs/{running_step.pk}/units/inference/logs/?follow=1"
    follows = [web.open_follow(url, key) for _ in range(settings.PORTAL_LOG_FOLLOWS_PER_USER)]
    assert [f.status for f in follows] == [200] * len(follows)
    assert web.open_follow(url, key).status == 429
    # The step workflow goes: Karmada ends the pod's log stream, so each follow ends.
    custom = k8s.CustomObjectsApi(follow_sandbox.api_client())
    name = f"{running_step.name}-inference-1"
    custom.delete_namespaced_custom_object(*WF, settings.KARMADA_NAMESPACE, "workflows", name)
    for f in follows:
        f.answer.read()
        f.conn.close()

    def not_refused() -> int:
        status = web.open_follow(url, key).status
        return 0 if status == 429 else status

    # Read again (and found gone with the workflow), not refused for the cap.
    assert wait_for(not_refused, what="the follow slots given back") == 404


def test_a_process_serves_at_most_its_share_of_follows(settings: Any, db: Any) -> None:
    settings.PORTAL_LOG_FOLLOWS_PER_PROCESS = 2
    base = secrets.randbelow(10**9) + 10**6  # users of this test alone (slots live in Redis)
    held = [log_follows.follow_acquire(user_id=base + i) for i in range(2)]
    with pytest.raises(log_follows.FollowRefused) as refused:
        log_follows.follow_acquire(user_id=base + 2)
    assert refused.value.status == 503 and refused.value.retry_after > 0
    # The refused follow did not keep its user's slot: with a process slot free, it gets one.
    held.pop()()
    log_follows.follow_acquire(user_id=base + 2)()
    for release in held:
        release()
        release()  # giving back twice gives back once
    again = [log_follows.follow_acquire(user_id=base + 3) for _ in range(2)]
    for release in again:
        release()
