"""No usable secret defaults. Without DEBUG the portal needs a SECRET_KEY,
and ``check --deploy`` flags secrets that are known placeholders."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import run_checks

ROOT = Path(__file__).resolve().parents[1]
GOOD_KEY = "a9f8e7d6c5b4a3928170f6e5d4c3b2a1-production-secret-key-0123456789"


def manage(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={"PATH": os.environ["PATH"], "PORTAL_VAR_DIR": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("key", [None, ""], ids=["unset", "empty"])
def test_without_debug_and_secret_key_the_portal_refuses_to_start(
    tmp_path: Path, key: str | None
) -> None:
    env = {"DEBUG": "0"} if key is None else {"DEBUG": "0", "SECRET_KEY": key}
    result = manage(tmp_path, "check", **env)
    assert result.returncode != 0
    assert "SECRET_KEY is not set" in result.stderr
    assert "DEBUG=1" in result.stderr  # says what to do


def test_with_debug_the_demo_starts_without_a_secret_key(tmp_path: Path) -> None:
    result = manage(tmp_path, "check", DEBUG="1")
    assert result.returncode == 0, result.stderr


def deploy_errors() -> set[str]:
    return {m.id for m in run_checks(include_deployment_checks=True) if m.id.startswith("portal.")}


@pytest.mark.parametrize(
    ("name", "value", "check_id"),
    [
        ("SECRET_KEY", "change-me-in-production-0123456789abcdefghijklmnopqrstuvwxyz", "E001"),
        ("SECRET_KEY", "changeme-" + "x" * 60, "E001"),
        ("SECRET_KEY", "django-insecure-local-development-key-do-not-use-in-production", "E001"),
        ("PORTAL_WEBHOOK_TOKEN", "compose-webhook-token-change-me", "E002"),
        ("PORTAL_WEBHOOK_TOKEN", "changeme", "E002"),
        ("PORTAL_WEBHOOK_TOKEN", "secret", "E002"),
        ("DATABASE_URL", "postgres://portal:portal@postgres:5432/portal", "E003"),
        ("DATABASE_URL", "postgres://portal:change_me@db/portal", "E003"),
        ("PORTAL_METRICS_TOKEN", "replace-me", "E004"),
    ],
)
def test_check_deploy_flags_placeholder_secrets(
    settings: Any, name: str, value: str, check_id: str
) -> None:
    settings.SECRET_KEY = GOOD_KEY
    settings.PORTAL_WEBHOOK_TOKEN = "Zq3-real-webhook-token-Xv9"
    settings.DATABASE_URL = "postgres://portal:Jd8s-real-password@db/portal"
    settings.PORTAL_METRICS_TOKEN = ""
    assert deploy_errors() == set()
    setattr(settings, name, value)
    assert deploy_errors() == {f"portal.{check_id}"}


def test_check_deploy_fails_on_a_placeholder_from_the_environment(tmp_path: Path) -> None:
    result = manage(
        tmp_path,
        "check",
        "--deploy",
        DEBUG="0",
        SECRET_KEY=GOOD_KEY,
        PORTAL_WEBHOOK_TOKEN="compose-webhook-token-change-me",
    )
    assert result.returncode != 0
    assert "portal.E002" in result.stdout + result.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["-c", "import portal.wsgi"],  # what gunicorn's workers import
        ["-m", "celery", "-A", "portal", "worker", "--pool", "solo"],
        ["-m", "celery", "-A", "portal", "beat", "-s", "{tmp}/beat-schedule"],
    ],
    ids=["wsgi", "celery-worker", "celery-beat"],
)
def test_the_web_and_worker_processes_refuse_too(tmp_path: Path, argv: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, *(a.format(tmp=tmp_path) for a in argv)],
        cwd=ROOT,
        env={
            "PATH": os.environ["PATH"],
            "PORTAL_VAR_DIR": str(tmp_path),
            "DEBUG": "0",
            "DJANGO_SETTINGS_MODULE": "portal.settings",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "SECRET_KEY is not set" in result.stderr
