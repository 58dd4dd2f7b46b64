"""Pytest plugin: the sandbox fleet as a real subprocess speaking HTTP.

Register with ``pytest_plugins = ["tests.fixtures_sandbox"]``. Fixtures:

* ``sandbox_server`` (session): starts ``python -m sandbox`` on a free port with a high time
  scale, the reference CRDs and the RBAC deploy/ ships (on Karmada and at every site), writes
  the portal's kubeconfig (``kubeconfig``: its ServiceAccount, what tests point the portal at)
  and the admin's (``admin_kubeconfig``, for ``api_client``; ``request`` sends no credentials,
  which the sandbox serves as a superuser), waits until it answers, and stops it at the end of
  the session. Its log goes to a file (``sandbox_server.log_path``). If it exits on
  its own, at start or later, the session fails with its exit code and log tail.
* ``sandbox`` (function): the same server, reset to the demo fleet before the test and with
  faults cleared after it, so tests do not leak into each other; a test during which it died
  fails with its log tail.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.stack import (
    ARGO_CRD,
    KARMADA_CRDS,
    REFERENCE,
    ROOT,
    SHIPPED_RBAC,
    Process,
    answers,
    free_port,
    launch,
    sandbox_argv,
)

REPO_ROOT = ROOT
ARGO_EXAMPLES = REFERENCE / "argo" / "examples"
TIME_SCALE = float(os.environ.get("SANDBOX_TIME_SCALE", "1000"))

T = TypeVar("T")


class SandboxHTTPError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body


@dataclass
class SandboxServer:
    url: str
    # The portal's kubeconfig (its ServiceAccount, authorised by the shipped RBAC): what tests
    # point the portal at. ``admin_kubeconfig`` is system:admin's, for the tests' own calls.
    kubeconfig: Path
    log_path: Path
    process: Process
    admin_kubeconfig: Path | None = None
    time_scale: float = TIME_SCALE
    label_domain: str = "portal.multisite.io"
    _clients: list[Any] = field(default_factory=list)

    # -- clients ---------------------------------------------------------------------------
    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` as the sandbox's admin (``system:admin``)."""
        from kubernetes import config

        client = config.new_client_from_config(
            config_file=str(self.admin_kubeconfig or self.kubeconfig)
        )
        self._clients.append(client)
        return client

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = 30,
    ) -> Any:
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": content_type}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            raw = err.read()
            try:
                parsed: Any = json.loads(raw)
            except ValueError:
                parsed = raw.decode(errors="replace")
            raise SandboxHTTPError(err.code, parsed) from err
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return raw.decode(errors="replace")

    # -- control ---------------------------------------------------------------------------
    def reset(self) -> None:
        self.request("POST", "/_sandbox/reset")

    def fault(self, type: str, **spec: Any) -> dict[str, Any]:
        """Inject a fault, e.g. ``fault("site-not-ready", site="site-b")``; returns it (with
        its ``id``)."""
        result: dict[str, Any] = self.request("POST", "/_sandbox/faults", {"type": type, **spec})
        return result

    def clear_fault(self, fault_id: str) -> None:
        self.request("DELETE", f"/_sandbox/faults/{fault_id}")

    def clear_faults(self) -> None:
        self.request("DELETE", "/_sandbox/faults")

    def faults(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.request("GET", "/_sandbox/faults")["items"]
        return items

    def state(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", "/_sandbox/state")
        return result

    def compact(self) -> None:
        """Drop the watch event log (an etcd compaction): older resourceVersions get 410."""
        self.request("POST", "/_sandbox/compact")

    def repositories(self) -> dict[str, dict[str, Any]]:
        """Each site's artifact repository by site (`/_sandbox/repositories`): endpoint name,
        bucket, region and the S3 listener's real URL (empty without --execute)."""
        items: list[dict[str, Any]] = self.request("GET", "/_sandbox/repositories")["items"]
        return {r["site"]: r for r in items}

    def member_workflows(self, cluster: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.request("GET", f"/_sandbox/members/{cluster}/workflows")[
            "items"
        ]
        return items

    def resume(self, namespace: str, name: str, node: str | None = None) -> int:
        body = {"namespace": namespace, "name": name}
        if node:
            body["node"] = node
        return int(self.request("POST", "/_sandbox/resume", body)["resumed"])

    def denials(self, since: int = 0) -> list[dict[str, Any]]:
        """The sandbox's refusals (403) after number ``since``, each with its ``seq``,
        ``user``, ``where`` (karmada-apiserver or a site) and ``message``."""
        found: list[dict[str, Any]] = self.request("GET", "/_sandbox/authz")["denials"]
        return [d for d in found if int(d["seq"]) > since]

    def portal_refusals(self, since: int = 0) -> list[str]:
        """What the portal's identity was refused (Karmada's 403 messages) since ``since``."""
        portal = self.request("GET", "/_sandbox/authz")["identities"]["portal"]
        return [d["message"] for d in self.denials(since) if d["user"] == portal]

    def last_denial(self) -> int:
        return max((int(d["seq"]) for d in self.denials()), default=0)

    def annotation(self, name: str) -> str:
        """The annotation key for a sandbox knob, e.g. ``annotation("duration")``."""
        return f"{self.label_domain}/sandbox-{name}"

    @staticmethod
    def wait_for(
        predicate: Callable[[], T | None],
        timeout: float = 30.0,
        interval: float = 0.05,
        what: str = "condition",
    ) -> T:
        """Poll until predicate returns something truthy; fail the test after timeout."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = predicate()
            if last:
                return last
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")

    # -- lifecycle -------------------------------------------------------------------------
    def log_tail(self, lines: int = 40) -> str:
        return self.process.log_tail(lines)

    def stop(self) -> None:
        """Stop the server; raises ``ProcessFailed`` (once it is cleaned up) if it had exited
        before."""
        for client in self._clients:
            with contextlib.suppress(Exception):
                client.close()
        self.process.stop()


def start_sandbox(
    workdir: Path, time_scale: float = TIME_SCALE, extra_args: list[str] | None = None
) -> SandboxServer:
    """Start the sandbox; raises ``ProcessFailed`` with its log tail if it exits or never
    answers."""
    port = free_port()
    kubeconfig = workdir / "kubeconfig"
    admin = workdir / "admin.kubeconfig"
    server_url = f"http://127.0.0.1:{port}"

    def ready(process: Process) -> bool:
        return admin.exists() and answers(f"{server_url}/_sandbox/ready")(process)

    process = launch(
        "sandbox",
        sandbox_argv(
            port,
            admin,
            time_scale,
            "--portal-kubeconfig",
            str(kubeconfig),
            # The shipped RBAC, on Karmada and at every member: a grant the portal lacks
            # fails the test that needs it.
            *SHIPPED_RBAC,
            "--host",
            "127.0.0.1",
            "--bookmark-interval",
            "0.5",
            "--crds",
            str(KARMADA_CRDS),
            "--crds",
            str(ARGO_CRD),
            # SANDBOX_EXECUTE=1: steps really run (python -m sandbox --execute).
            *(["--execute"] if os.environ.get("SANDBOX_EXECUTE") == "1" else []),
            *(extra_args or []),
        ),
        log_path=workdir / "sandbox.log",
        ready=ready,
    )
    return SandboxServer(
        url=server_url,
        kubeconfig=kubeconfig,
        admin_kubeconfig=admin,
        log_path=process.log_path,
        process=process,
        time_scale=time_scale,
    )


@pytest.fixture(scope="session")
def sandbox_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxServer]:
    server = start_sandbox(tmp_path_factory.mktemp("sandbox"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def sandbox(sandbox_server: SandboxServer) -> Iterator[SandboxServer]:
    """The session's sandbox, reset to the fleet before the test, faults cleared after."""
    sandbox_server.reset()
    try:
        yield sandbox_server
    finally:
        # A server that died during the test fails it here, with its log, rather than every
        # later test with a connection error.
        sandbox_server.process.check("during the test")
        sandbox_server.clear_faults()
