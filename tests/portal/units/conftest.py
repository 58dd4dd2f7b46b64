"""The step panel's and the unit endpoints' shared set-up: a finished demo run and a
push-mode site answering through Karmada."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from portal.choices import RunStatus, UnitPhase
from portal.karmada import logs, proxy
from portal.models import RunEvent, UnitRun, WorkflowRun
from sites.choices import SyncMode
from tests.factories import SiteFactory
from tests.portal.helpers import make_run

HX = {"HTTP_HX_REQUEST": "true"}
LOG = b"loading tiles\ninference on 4 GPUs\nwrote s3://results/eo/out.zarr\n"


@pytest.fixture
def sites(db: Any) -> None:
    SiteFactory(name="site-a")
    SiteFactory(name="site-b")
    SiteFactory(name="site-c", gpu_allocatable=8)
    SiteFactory(name="site-p", sync_mode=SyncMode.PULL)


@pytest.fixture
def run(sites: None, scientist: User, project: Any) -> WorkflowRun:
    run = make_run(
        scientist,
        project=project,
        status=RunStatus.SUCCEEDED,
        units=[
            ("ingest", "site-a", UnitPhase.SUCCEEDED, []),
            ("preprocess", "site-b", UnitPhase.SUCCEEDED, ["ingest"]),
            ("inference", "site-c", UnitPhase.SUCCEEDED, ["preprocess"]),
        ],
    )
    UnitRun.objects.filter(run=run, name="inference").update(
        workflow_name=f"{run.name}-inference-1",
        outputs={
            "parameters": [{"name": "score", "value": "0.93", "globalName": "best-score"}],
            "artifacts": [{"name": "tiles", "s3": {"bucket": "results", "key": "eo/out.zarr"}}],
            "exitCode": "0",
            "result": "done",
        },
        spec={"arguments": {"parameters": [{"name": "model", "value": "unet"}], "artifacts": []}},
    )
    return run


@pytest.fixture
def fake_site(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """Karmada answering for a push-mode site: the binding's member status and a pod log."""
    calls: list[dict[str, Any]] = []

    def member_status(workflow: str) -> dict[str, Any]:
        return {
            "phase": "Succeeded",
            "nodes": {
                workflow: {"id": workflow, "name": workflow, "type": "Steps", "phase": "Succeeded"},
                f"{workflow}-1": {
                    "id": f"{workflow}-1",
                    "name": f"{workflow}[0].run",
                    "displayName": "run",
                    "type": "Pod",
                    "templateName": "infer",
                    "phase": "Succeeded",
                },
            },
        }

    def pod_log(site: str, namespace: str, pod: str, **kwargs: Any) -> Iterator[bytes]:
        calls.append({"site": site, "namespace": namespace, "pod": pod, **kwargs})
        return iter([LOG[:20], LOG[20:]])

    monkeypatch.setattr(logs, "_member_status", member_status)
    monkeypatch.setattr(proxy, "pod_log", pod_log)
    yield calls


def panel_url(run: WorkflowRun, key: str) -> str:
    return reverse("ui-unit-detail", args=[run.pk, key])


def failed_over(run: WorkflowRun) -> UnitRun:
    unit = run.units.get(name="preprocess")
    record = unit.attempt_record(ended="failed over", why="site site-b not ready")
    UnitRun.objects.filter(pk=unit.pk).update(attempt=2, site="site-a")
    RunEvent.objects.create(
        run=run,
        unit=unit,
        kind="failover",
        message="preprocess: site site-b not ready; attempt 2 at site-a",
        data={"ended_attempt": record},
    )
    return UnitRun.objects.get(pk=unit.pk)
