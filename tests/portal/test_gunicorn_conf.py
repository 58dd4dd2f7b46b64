"""Under gunicorn, as production runs it (docker-compose.yml,
deploy/): the webhook token never reaches a log line, and chunked bodies are read.

gunicorn listens on 127.0.0.1 only. The webhook answers these requests before it needs the
database, so the process runs with the test settings but touches no table."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "wh-tok-5f3c9a7e1b2d4c6e8a0b"


@dataclass
class Gunicorn:
    port: int
    access_log: Path
    error_log: Path

    def logs(self) -> str:
        time.sleep(0.3)  # gunicorn writes the access line after the response
        return self.access_log.read_text() + self.error_log.read_text()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def gunicorn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gunicorn]:
    tmp = tmp_path_factory.mktemp("gunicorn")
    port = free_port()
    server = Gunicorn(port, tmp / "access.log", tmp / "error.log")
    env = {
        **os.environ,
        "PORTAL_WEBHOOK_TOKEN": TOKEN,
        "PORTAL_MAX_CHUNKED_BODY_BYTES": str(64 * 1024),
        "PORTAL_VAR_DIR": str(tmp / "var"),
    }
    # The command of docker-compose.yml, on a loopback port, logging to files.
    with server.error_log.open("wb") as stderr:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "-c",
                "python:portal.gunicorn_conf",
                "portal.wsgi:application",
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                "1",
                "--access-logfile",
                str(server.access_log),
            ],
            cwd=ROOT,
            env=env,
            stdout=stderr,
            stderr=stderr,
        )
    try:
        for _ in range(300):
            if proc.poll() is not None:
                pytest.fail("gunicorn exited:\n" + server.error_log.read_text())
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except OSError:
                time.sleep(0.1)
        yield server
    finally:
        proc.terminate()
        proc.wait(30)


def post(
    server: Gunicorn, path: str, body: bytes, chunked: bool = False
) -> tuple[int, dict[str, object]]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    headers = {"Content-Type": "application/json"}
    if chunked:
        conn.request(
            "POST", path, body=iter([body[:7], body[7:]]), headers=headers, encode_chunked=True
        )
    else:
        conn.request("POST", path, body=body, headers=headers)
    response = conn.getresponse()
    data = response.read()
    conn.close()
    try:
        return response.status, json.loads(data)
    except ValueError:
        return response.status, {"raw": data.decode(errors="replace")}


def test_the_webhook_token_never_reaches_gunicorns_logs(gunicorn: Gunicorn) -> None:
    wrong = "wrong-tok-0a9b8c7d6e5f4321"
    status, _ = post(gunicorn, f"/webhooks/placement/{wrong}/", b"{}")
    assert status == 403  # django.request logs this one as a warning, with the path
    status, _ = post(gunicorn, f"/webhooks/placement/{TOKEN}/", b"{}")
    assert status == 400
    status, _ = post(gunicorn, f"/webhooks/placement/{TOKEN}/?x=1", b"not json")
    assert status == 400
    logs = gunicorn.logs()
    assert "/webhooks/placement/[redacted]/" in logs  # the lines are there...
    assert "Forbidden" in logs  # ...Django's request log included
    assert TOKEN not in logs  # ...without the token
    assert wrong not in logs


def test_a_chunked_admission_review_is_read_under_gunicorn(gunicorn: Gunicorn) -> None:
    body = json.dumps({"kind": "NotAReview", "apiVersion": "v1"}).encode()
    status, answer = post(gunicorn, f"/webhooks/placement/{TOKEN}/", body, chunked=True)
    assert status == 400
    assert "kind is not AdmissionReview" in str(answer), answer  # read: not "not JSON"


def test_a_chunked_body_over_the_limit_is_413_under_gunicorn(gunicorn: Gunicorn) -> None:
    body = json.dumps({"kind": "x", "pad": "a" * (80 * 1024)}).encode()
    status, _ = post(gunicorn, f"/webhooks/placement/{TOKEN}/", body, chunked=True)
    assert status == 413
