"""docker-compose.yml, the sandbox's --server-url it passes, and the web probes' Host."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml

from tests.deploy.helpers import (
    COMPOSE,
    COMPOSE_KARMADA,
    DOCUMENTS,
    REPO,
    need_tool,
)

# docker-compose.yml


# docker-compose.yml has no secret defaults: it refuses to start without these.
COMPOSE_SECRETS = {
    "SECRET_KEY": "compose-test-secret-key-3f9a1c7e5b2d4a6c8e0f1a3b5c7d9e1f",
    "PORTAL_WEBHOOK_TOKEN": "compose-test-webhook-token-8b6d4f2a0c9e7a5b",
    "POSTGRES_PASSWORD": "compose-test-db-password-1d3f5b7a9c",
}


def compose(
    *files: Path, env: Mapping[str, str] | None = None, secrets: bool = True
) -> subprocess.CompletedProcess[str]:
    tool = need_tool("docker-compose", "apt-get install docker-compose")
    args = [tool, "--project-directory", str(REPO)]
    for f in files:
        args += ["-f", str(f)]
    # Only PATH: a developer's SECRET_KEY or KARMADA_KUBECONFIG must not change the result.
    clean = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        **(COMPOSE_SECRETS if secrets else {}),
        **(env or {}),
    }
    return subprocess.run(
        [*args, "config"], capture_output=True, text=True, check=False, env=clean, cwd=REPO
    )


def test_docker_compose_config_accepts_the_compose_file() -> None:
    out = compose(COMPOSE)
    assert out.returncode == 0, out.stderr
    config = yaml.safe_load(out.stdout)
    services = config["services"]
    assert set(services) == {"postgres", "redis", "web", "worker", "beat", "watcher", "sandbox"}
    for name, service in services.items():
        assert service.get("healthcheck", {}).get("test"), f"{name} has no health check"
    assert "gunicorn" in " ".join(services["web"]["command"])
    assert "runserver" not in " ".join(services["web"]["command"])
    assert services["watcher"]["command"] == ["python", "manage.py", "watch_karmada"]
    # The sandbox writes a kubeconfig the others can dial, where they read it.
    sandbox = services["sandbox"]["command"]
    assert sandbox[sandbox.index("--host") + 1] == "0.0.0.0"
    assert sandbox[sandbox.index("--server-url") + 1] == "http://sandbox:18443"
    kubeconfig = sandbox[sandbox.index("--kubeconfig") + 1]
    for name in ("web", "worker", "beat", "watcher"):
        assert services[name]["environment"]["KARMADA_KUBECONFIG"] == kubeconfig
        mounts = {v.split(":")[1] for v in services[name]["volumes"]}
        assert str(Path(kubeconfig).parent) in mounts
    assert {"pgdata", "portal-var"} <= set(config["volumes"])


def test_the_karmada_override_drops_the_sandbox_and_mounts_the_kubeconfig() -> None:
    out = compose(COMPOSE, COMPOSE_KARMADA, env={"KARMADA_KUBECONFIG_FILE": "/srv/karmada.config"})
    assert out.returncode == 0, out.stderr
    services = yaml.safe_load(out.stdout)["services"]
    assert services["sandbox"]["profiles"] == ["sandbox"]
    for name in ("web", "worker", "beat", "watcher"):
        path = services[name]["environment"]["KARMADA_KUBECONFIG"]
        assert f"/srv/karmada.config:{path}:ro" in services[name]["volumes"]
    missing = compose(COMPOSE, COMPOSE_KARMADA)
    assert missing.returncode != 0 and "KARMADA_KUBECONFIG_FILE" in missing.stderr


@pytest.mark.parametrize("missing", sorted(COMPOSE_SECRETS))
def test_docker_compose_refuses_to_start_without_each_secret(missing: str) -> None:
    others = {k: v for k, v in COMPOSE_SECRETS.items() if k != missing}
    out = compose(COMPOSE, env=others, secrets=False)
    assert out.returncode != 0
    assert f"set {missing}" in out.stderr  # the message says what to set
    empty = compose(COMPOSE, env={**others, missing: ""}, secrets=False)
    assert empty.returncode != 0 and f"set {missing}" in empty.stderr


def test_docker_compose_holds_no_secret_and_publishes_the_web_port_on_loopback() -> None:
    text = COMPOSE.read_text()
    for old_default in ("change-me-in-production", "compose-webhook-token-change-me"):
        assert old_default not in text
    out = compose(COMPOSE)
    assert out.returncode == 0, out.stderr
    services = yaml.safe_load(out.stdout)["services"]
    env = services["web"]["environment"]
    assert env["SECRET_KEY"] == COMPOSE_SECRETS["SECRET_KEY"]
    assert env["PORTAL_WEBHOOK_TOKEN"] == COMPOSE_SECRETS["PORTAL_WEBHOOK_TOKEN"]
    password = COMPOSE_SECRETS["POSTGRES_PASSWORD"]
    assert f":{password}@postgres:" in env["DATABASE_URL"]
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == password
    for name, service in services.items():
        for port in service.get("ports", []):
            published = port if isinstance(port, str) else f"{port.get('host_ip', '')}:"
            assert published.startswith("127.0.0.1:"), (name, port)
    wide = compose(COMPOSE, env={"PORTAL_BIND_ADDRESS": "0.0.0.0", "PORTAL_PORT": "9000"})
    assert wide.returncode == 0, wide.stderr
    assert yaml.safe_load(wide.stdout)["services"]["web"]["ports"] == ["0.0.0.0:9000:8000/tcp"]
    # gunicorn with the configuration that keeps the webhook token out of the access log
    assert "python:portal.gunicorn_conf" in " ".join(services["web"]["command"])


def test_docker_compose_config_refuses_a_broken_file(tmp_path: Path) -> None:
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(
        COMPOSE.read_text().replace("  worker:\n", "  worker:\n    restart_policy: x\n", 1)
    )
    out = compose(broken)
    assert out.returncode != 0
    assert "restart_policy" in out.stderr


# --------------------------------------------------------------------------------------------
# The sandbox's --server-url (for the compose file)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_sandbox_writes_the_server_url_it_is_given(tmp_path: Path) -> None:
    port = free_port()
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sandbox",
            "--port",
            str(port),
            "--kubeconfig",
            str(kubeconfig),
            "--server-url",
            "http://sandbox:18443/",
            "--log-level",
            "WARNING",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        # The line comes after the kubeconfig is written; EOF (a crash) ends the wait too.
        line = proc.stdout.readline()
        assert f"serving at http://127.0.0.1:{port}" in line
        config = yaml.safe_load(kubeconfig.read_text())
        assert config["clusters"][0]["cluster"]["server"] == "http://sandbox:18443"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/version") as resp:
            assert resp.status == 200  # still listening where it was told to
    finally:
        proc.terminate()
        proc.wait()


def test_web_probes_send_a_host_django_allows() -> None:
    config = next(d for p, _, d in DOCUMENTS if p == "deploy/host/configmap.yaml")
    allowed = config["data"]["ALLOWED_HOSTS"].split(",")
    web = next(d for _, _, d in DOCUMENTS if d["metadata"]["name"] == "portal-web")
    container = web["spec"]["template"]["spec"]["containers"][0]
    for probe in ("readinessProbe", "livenessProbe"):
        # Without it the kubelet sends the pod IP, and Django answers 400 DisallowedHost.
        headers = {h["name"]: h["value"] for h in container[probe]["httpGet"]["httpHeaders"]}
        assert headers["Host"] in allowed
    assert "--certfile=/etc/portal/tls/tls.crt" in container["command"]
    assert allowed[0] != "*"
