"""Settings, health endpoints, the demo loader and the embedded defaults."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client

from placement.models import PlacementRule
from portal.env import env, envbool, envint, envlist
from sites.models import Dataset, DatasetReplica, Project, Site, SiteLink

ROOT = Path(__file__).resolve().parents[1]


def test_env_helpers_read_values_and_files(monkeypatch, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("from-a-file\n")
    monkeypatch.setenv("X_SECRET_FILE", str(secret))
    monkeypatch.setenv("X_FLAG", "yes")
    monkeypatch.setenv("X_NUM", "42")
    monkeypatch.setenv("X_LIST", "a, b,,c")
    assert env("X_SECRET") == "from-a-file"
    assert envbool("X_FLAG") is True
    assert envbool("X_MISSING", True) is True
    assert envint("X_NUM", 1) == 42
    assert envint("X_MISSING", 7) == 7
    assert envlist("X_LIST") == ["a", "b", "c"]


def _run_django(code: str, extra_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    keep = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG"}}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**keep, "DJANGO_SETTINGS_MODULE": "portal.settings", **extra_env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_embedded_defaults_need_no_servers(tmp_path):
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.DATABASES['default']['ENGINE']); print(s.CELERY_BROKER_URL)"
    )
    # The embedded defaults are the demo's, which runs with DEBUG (without it the portal
    # needs a SECRET_KEY: tests/test_settings_checks.py).
    result = _run_django(code, {"PORTAL_VAR_DIR": str(tmp_path), "DEBUG": "1"})
    assert result.returncode == 0, result.stderr
    engine, broker = result.stdout.split()
    assert engine == "django.db.backends.sqlite3"
    assert broker == "filesystem://"
    assert (tmp_path / "celery-queue").is_dir()


def test_check_deploy_is_clean_with_debug_off(tmp_path):
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env={
            "PATH": os.environ["PATH"],
            "DEBUG": "0",
            "SECRET_KEY": "a9f8e7d6c5b4a3928170f6e5d4c3b2a1-production-secret-key-0123456789",
            "PORTAL_VAR_DIR": str(tmp_path),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_healthz_answers_without_login(client: Client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_reports_database_and_broker(client: Client):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json()["checks"]["database"] == "ok"
    assert response.json()["checks"]["broker"] == "ok"


@pytest.mark.django_db
def test_readyz_is_503_when_the_broker_is_down(client: Client, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["broker"] != "ok"


@pytest.mark.django_db
def test_metrics_are_prometheus_text(client: Client):
    call_command("load_demo", verbosity=0)
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert b'portal_sites_ready{site="site-a"} 1.0' in response.content


def _snapshot() -> dict[str, object]:
    return {
        "sites": list(Site.objects.values_list("name", "region", "cpu_allocatable", "labels")),
        "links": list(
            SiteLink.objects.values_list("source__name", "target__name", "bandwidth_mbps")
        ),
        "datasets": list(Dataset.objects.values_list("name", "uri_prefix", "bytes")),
        "replicas": list(DatasetReplica.objects.values_list("dataset__name", "site__name")),
        "rules": list(PlacementRule.objects.values_list("name", "order", "timing", "effect")),
        "projects": list(Project.objects.values_list("name", flat=True)),
    }


@pytest.mark.django_db
def test_load_demo_twice_gives_the_same_data():
    call_command("load_demo", verbosity=0)
    first = _snapshot()
    call_command("load_demo", verbosity=0)
    assert _snapshot() == first
    assert [s[0] for s in first["sites"]] == ["site-a", "site-b", "site-c"]  # type: ignore[index]
    assert ("sentinel2-l1c", "site-a") in first["replicas"]  # type: ignore[operator]


@pytest.mark.django_db
def test_swagger_ui_is_served_without_a_cdn(client_for, outsider):
    c = client_for(outsider)
    page = c.get("/api/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "drf_spectacular_sidecar" in html
    assert "cdn.jsdelivr" not in html and "unpkg.com" not in html
    schema = c.get("/api/schema/")
    assert schema.status_code == 200
    assert b"openapi" in schema.content


def test_every_script_make_bench_runs_is_a_benchmark() -> None:
    # `make bench` runs each tests/bench/bench_*.py as a script; a helper module named so
    # (settings, URLs) failed it.
    scripts = sorted((ROOT / "tests" / "bench").glob("bench_*.py"))
    assert scripts
    for script in scripts:
        assert 'if __name__ == "__main__":' in script.read_text(), script.name
