"""Around the run page: the admin's "Add site", the preview's candidate tables, enum
parameters, the default project, ``run_demo`` stopping what it started when start-up fails, and
the pod names the log reader asks a site for."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from portal.karmada import logs
from sites.choices import SyncMode
from tests.factories import SiteFactory

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}
EO = Path(__file__).resolve().parents[2] / "examples" / "eo-pipeline.yaml"


@pytest.fixture
def sites(db: Any) -> None:
    SiteFactory(name="site-a")
    SiteFactory(name="site-b")
    SiteFactory(name="site-c", gpu_allocatable=8)
    SiteFactory(name="site-p", sync_mode=SyncMode.PULL)


def test_the_admin_offers_no_add_site(client_for: Any, superuser: User) -> None:
    client: Client = client_for(superuser)
    assert client.get("/admin/sites/site/add/").status_code == 403
    body = client.get("/admin/sites/site/").content.decode()
    assert "/admin/sites/site/add/" not in body
    assert "joins Karmada" in body


# --- preview and submission -----------------------------------------------------------------


def test_the_preview_lists_losing_sites_and_why(
    sites: None, scientist: User, client_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = {
        "units": [
            {
                "name": "inference",
                "template": "inference",
                "depends": "",
                "timing": "submit",
                "site": "site-c",
                "reason": "GPUs",
                "candidates": [
                    {
                        "site": "site-a",
                        "eligible": False,
                        "why": "no GPU",
                        "score": None,
                        "bytes_to_move": 0,
                        "est_transfer_s": 0,
                    },
                    {
                        "site": "site-c",
                        "eligible": True,
                        "why": "",
                        "score": 0.9,
                        "bytes_to_move": 2**30,
                        "est_transfer_s": 3,
                    },
                ],
            }
        ]
    }
    monkeypatch.setattr("portal.services.workflow_preview", lambda **kw: plan)
    body = (
        client_for(scientist)
        .post(reverse("ui-submit-preview"), {"manifest": EO.read_text()}, **HX)
        .content.decode()
    )
    details = re.search(r'<details class="decision candidates-of">.*?</details>', body, re.S)
    assert details is not None
    assert "Why not elsewhere" in details.group(0) and "1 other site" in details.group(0)
    assert "no GPU" in details.group(0) and "(chosen)" in details.group(0)
    assert "1.0 GiB" in details.group(0)  # binary units, as everywhere


def test_an_enum_parameter_refuses_other_values_over_rest(
    sites: None, scientist: User, api_client_for: Any
) -> None:
    client = api_client_for(scientist)
    body = {"manifest": EO.read_text(), "arguments": {"model": "not-a-model"}}
    answer = client.post("/api/v1/runs/preview/", body, format="json")
    assert answer.status_code == 400
    assert answer.json()["errors"][0]["path"] == "arguments.model"
    written = EO.read_text().replace("value: cloud-segmentation-v3", "value: other-model")
    answer = client.post("/api/v1/runs/", written, content_type="application/yaml")
    assert answer.status_code == 400
    assert answer.json()["errors"][0]["path"] == "spec.arguments.parameters[1].value"


def test_an_enum_parameter_refuses_other_values_in_the_form(
    sites: None, scientist: User, client_for: Any
) -> None:
    data = {"manifest": EO.read_text(), "param-model": "not-a-model"}
    body = client_for(scientist).post(reverse("ui-submit-preview"), data, **HX).content.decode()
    assert "not-a-model" in body and "Placement preview" not in body


def test_the_project_defaults_to_the_users_only_project(
    sites: None, scientist: User, project: Any, client_for: Any, api_client_for: Any
) -> None:
    page = client_for(scientist).get(reverse("ui-submit")).content.decode()
    assert re.search(rf'<option value="{project.name}" selected>', page)
    assert "(no project)" not in page
    answer = api_client_for(scientist).post(
        "/api/v1/runs/", EO.read_text(), content_type="application/yaml"
    )
    assert answer.status_code == 201, answer.content
    assert answer.json()["project"] == project.name


def test_run_demo_stops_what_it_started_when_start_up_fails(
    tmp_path: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import sys

    from portal.management.commands import run_demo

    settings.VAR_DIR = tmp_path
    started: list[Any] = []

    def failing_start(self: Any, children: Any, *args: Any) -> None:
        started.append(
            children.start("sandbox", [sys.executable, "-c", "import time; time.sleep(60)"])
        )
        raise SystemExit("bad DATABASE_URL")

    monkeypatch.setattr(run_demo.Command, "_start", failing_start)
    monkeypatch.setattr(run_demo.signal, "signal", lambda *a: None)
    command = run_demo.Command(stdout=io.StringIO(), stderr=io.StringIO())
    with pytest.raises(SystemExit, match="bad DATABASE_URL"):
        command.handle(port=run_demo.SANDBOX_PORT + 200, time_scale=1.0)
    assert started and started[0].poll() is not None  # the child is gone, not adopted by init


def test_run_demo_prints_the_log_paths_under_portal_var_dir(
    tmp_path: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import sys

    from portal.management.commands import run_demo

    settings.VAR_DIR = tmp_path / "elsewhere"
    out = io.StringIO()

    def start_one(self: Any, children: Any, *args: Any) -> None:
        children.start("worker", [sys.executable, "-c", "print('worker up')"]).wait()
        raise SystemExit("stop here")

    monkeypatch.setattr(run_demo.Command, "_start", start_one)
    monkeypatch.setattr(run_demo.signal, "signal", lambda *a: None)
    command = run_demo.Command(stdout=out, stderr=io.StringIO())
    with pytest.raises(SystemExit):
        command.handle(port=run_demo.SANDBOX_PORT + 201, time_scale=1.0)
    log = tmp_path / "elsewhere" / "logs" / "worker.log"
    assert f"log {log})" in out.getvalue()
    assert "log var/logs/" not in out.getvalue()
    assert log.read_text().strip() == "worker up"  # the path printed is the one written


def test_pod_names_follow_argo_v2_and_v1() -> None:
    # Argo's GeneratePodName: fnv32a of the node name, after "<workflow>-<template>".
    assert logs.fnv32a("") == 0x811C9DC5
    assert logs.fnv32a("a") == 0xE40C292C
    assert logs.argo_pod_name("wf", "wf", "main", "wf") == "wf"
    assert logs.argo_pod_name("wf", "wf[0].a", "tmpl", "wf-123") == (
        f"wf-tmpl-{logs.fnv32a('wf[0].a')}"
    )
    assert logs.argo_pod_name("wf", "wf[0].a", "tmpl", "wf-123", version="v1") == "wf-123"
    long = logs.argo_pod_name("w" * 300, "n", "t", "id")
    assert len(long) <= 253
