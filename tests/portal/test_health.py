"""Every Karmada call carries a (connect, read) timeout, /readyz
answers within its budget from a cached probe, and says what failed only to those allowed.

The silent listener is on the loopback interface: it accepts connections and never answers."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
from django.test import Client

from portal import health
from portal.karmada import client, errors, lists, resources

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: k, cluster: {server: "http://127.0.0.1:%d"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: k, user: u, namespace: portal}}]
current-context: c
"""


class SilentListener:
    """Accepts every connection on 127.0.0.1 and never sends a byte."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()


@pytest.fixture
def silent(tmp_path: Path, settings: Any) -> Iterator[SilentListener]:
    listener = SilentListener()
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG % listener.port)
    settings.KARMADA_KUBECONFIG = str(path)
    settings.KARMADA_IN_CLUSTER = False
    client.reset()
    forget = getattr(getattr(health, "KARMADA_PROBE", None), "forget", lambda: None)
    forget()
    yield listener
    listener.close()
    client.reset()
    forget()


def test_every_gateway_call_hands_urllib3_a_connect_and_read_timeout(
    silent: SilentListener, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.KARMADA_REQUEST_TIMEOUT = 7
    settings.KARMADA_CONNECT_TIMEOUT = 2
    seen: list[Any] = []

    def spy(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("timeout"))
        raise urllib3.exceptions.ReadTimeoutError(None, url, "spy: not sent")  # type: ignore[arg-type]

    monkeypatch.setattr(urllib3.PoolManager, "request", spy)
    monkeypatch.setattr(client.time, "sleep", lambda _s: None)  # no backoff between attempts
    calls = {
        "ping": lambda: client.ping(),
        "get": lambda: client.get(resources.WORKFLOW, "w"),
        "list": lambda: lists.list_objects(resources.CLUSTER),
        "create": lambda: client.create(resources.WORKFLOW, {"metadata": {"name": "w"}}),
        "patch": lambda: client.patch(resources.WORKFLOW, "w", {"metadata": {}}),
        "delete": lambda: client.delete(resources.WORKFLOW, "w"),
        "namespace": lambda: client.ensure_namespace("portal"),
        "webhook": lambda: client.apply_mutating_webhook({"metadata": {"name": "x"}}),
        "watch": lambda: next(lists.watch(resources.CLUSTER, "1", timeout_seconds=60)),
    }
    for name, call in calls.items():
        seen.clear()
        with pytest.raises(errors.TransientError):
            call()
        assert seen, name
        for timeout in seen:
            assert isinstance(timeout, urllib3.Timeout), (name, timeout)
            assert timeout.connect_timeout == 2, (name, timeout)
            read = timeout.read_timeout
            assert isinstance(read, float | int), (name, timeout)
            assert read > 0, (name, timeout)
            assert read <= (90 if name == "watch" else 7), (name, timeout)


def test_readyz_answers_within_its_budget_with_karmada_silent(
    silent: SilentListener, settings: Any, db: Any
) -> None:
    settings.KARMADA_REQUEST_TIMEOUT = 2
    settings.PORTAL_READYZ_BUDGET_SECONDS = 1
    settings.PORTAL_READYZ_CACHE_SECONDS = 60
    answers: list[tuple[int, dict[str, Any], float]] = []

    def hit() -> None:
        started = time.monotonic()
        response = Client().get("/readyz")
        answers.append((response.status_code, response.json(), time.monotonic() - started))

    # Six at once (six could block every web worker), then six more one by one.
    threads = [threading.Thread(target=hit, daemon=True) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)  # generous: the budget is 1 s
    assert len(answers) == 6, "a /readyz request hung on the silent Karmada"
    for _ in range(6):
        t = threading.Thread(target=hit, daemon=True)
        t.start()
        t.join(30)
    assert len(answers) == 12, "a /readyz request hung on the silent Karmada"
    for status, body, _elapsed in answers:
        assert status == 503
        assert body["checks"]["karmada"] == "unreachable"
    # One probe for twelve hits: at most its attempts (with retries) reached the listener.
    assert 1 <= len(silent.accepted) <= 3


def test_readyz_shows_error_text_only_to_staff_or_when_allowed(
    client: Client, settings: Any, staff: Any
) -> None:
    settings.CELERY_BROKER_URL = "redis://portal-user:s3cret@127.0.0.1:1/0"
    for _ in range(100):  # until the background probe has its answer (it is not timed here)
        anonymous = client.get("/readyz")
        if anonymous.json()["checks"]["broker"] != "unreachable":
            break
        time.sleep(0.1)
    assert anonymous.status_code == 503
    assert anonymous.json()["checks"]["broker"] == "failed"
    assert b"127.0.0.1" not in anonymous.content
    assert b"portal-user" not in anonymous.content

    client.force_login(staff)
    detailed = client.get("/readyz")
    assert detailed.status_code == 503
    assert "127.0.0.1" in detailed.json()["checks"]["broker"]

    client.logout()
    settings.PORTAL_READYZ_DETAIL = True
    assert "127.0.0.1" in client.get("/readyz").json()["checks"]["broker"]


@pytest.mark.django_db
def test_metrics_can_require_a_token_or_a_network(client: Client, settings: Any) -> None:
    assert client.get("/metrics").status_code == 200  # open unless a setting restricts it

    settings.PORTAL_METRICS_TOKEN = "metrics-token"
    assert client.get("/metrics").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    ok = client.get("/metrics", HTTP_AUTHORIZATION="Bearer metrics-token")
    assert ok.status_code == 200
    assert b"portal_runs" in ok.content or b"portal_readyz" in ok.content

    settings.PORTAL_METRICS_TOKEN = ""
    settings.PORTAL_METRICS_ALLOWED_NETWORKS = ["10.0.0.0/8", "fd00::/8"]
    assert client.get("/metrics").status_code == 403  # the test client is 127.0.0.1
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="fd00::1").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="192.168.0.1").status_code == 403
