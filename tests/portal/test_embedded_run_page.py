"""The run page on the embedded demo's database (SQLite, what ``make demo`` runs on): the live
outputs read there without PostgreSQL's JSON path operators, and a fan-out's timeline drawn from
the counts SQLite answers as text."""

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

# A fan-out drawn as a group: the timeline draws its bars from the counts' first start.
from datetime import timedelta
from django.utils import timezone
fan = WorkflowRun.objects.create(name="tiles-1", owner=user, manifest={}, compiled={})
start = timezone.now() - timedelta(minutes=5)
UnitRun.objects.bulk_create(
    UnitRun(
        run=fan, name=f"tile({i})", slug=f"tile-{i}", phase="Succeeded", site="site-b",
        spec={"task": "tile", "item_index": i}, position=i,
        started_at=start + timedelta(seconds=i), finished_at=start + timedelta(seconds=i + 2),
    )
    for i in range(40)
)
answer = client.get(f"/runs/{fan.pk}/")
print(answer.status_code)
print("40" in answer.content.decode())
"""


def test_the_run_page_shows_global_outputs_and_a_fan_out_on_the_embedded_database(
    tmp_path: Path,
) -> None:
    keep = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG"}}
    env = {**keep, "DJANGO_SETTINGS_MODULE": "portal.settings", "DEBUG": "1"}
    env["PORTAL_VAR_DIR"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-c", PAGE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["200", "True", "200", "True"], (
        result.stdout + result.stderr[-3000:]
    )
