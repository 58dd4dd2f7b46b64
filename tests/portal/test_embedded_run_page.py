"""The run page on the embedded demo's database (SQLite, what ``make demo`` runs on): the live
outputs read there without PostgreSQL's JSON path operators."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PAGE = """
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.contrib.auth import get_user_model
from django.test import Client
from portal.models import UnitRun, WorkflowRun

user = get_user_model().objects.create_user("ada", password="x")
run = WorkflowRun.objects.create(name="outputs-1", owner=user, manifest={}, compiled={})
named = {"parameters": [{"name": "scene", "value": "S2A", "globalName": "scene-id"}]}
UnitRun.objects.create(run=run, name="ingest", phase="Succeeded", outputs=named)
UnitRun.objects.create(run=run, name="tile", phase="Succeeded", outputs={"result": "7"})
client = Client()
client.force_login(user)
answer = client.get(f"/runs/{run.pk}/")
print(answer.status_code)
print("scene-id" in answer.content.decode())
"""


def test_the_run_page_shows_global_outputs_on_the_embedded_database(tmp_path: Path) -> None:
    keep = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG"}}
    env = {**keep, "DJANGO_SETTINGS_MODULE": "portal.settings", "DEBUG": "1"}
    env["PORTAL_VAR_DIR"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-c", PAGE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["200", "True"], result.stdout + result.stderr[-3000:]
