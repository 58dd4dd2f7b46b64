"""Runs made through the ORM for the dashboard tests (until tests/factories.py has run
factories), and the demo workflow."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from django.utils import timezone

from portal.choices import DecisionSource, RunStatus, UnitPhase, UnitTiming
from portal.models import PlacementDecision, UnitRun, WorkflowRun
from sites.models import Project

REPO = Path(__file__).resolve().parents[2]
EO_PIPELINE = REPO / "examples" / "eo-pipeline.yaml"

_counter = iter(range(1, 10**9))


def make_run(
    owner: Any,
    *,
    project: Project | None = None,
    status: str = RunStatus.RUNNING,
    units: list[tuple[str, str, str, list[str]]] | None = None,
    decisions: bool = True,
    name: str | None = None,
) -> WorkflowRun:
    """A run with ``units`` as ``(name, site, phase, upstream)``; by default the demo's three
    units, ingest done at site-a, preprocess running at site-b, inference pending at site-c."""
    now = timezone.now()
    finished = status in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.STOPPED)
    run = WorkflowRun.objects.create(
        name=name or f"eo-pipeline-{next(_counter):05d}",
        project=project,
        owner=owner,
        manifest={"kind": "Workflow"},
        status=status,
        started_at=now - timedelta(minutes=3),
        finished_at=now if finished else None,
    )
    if units is None:
        units = [
            ("ingest", "site-a", UnitPhase.SUCCEEDED, []),
            ("preprocess", "site-b", UnitPhase.RUNNING, ["ingest"]),
            ("inference", "site-c", UnitPhase.PENDING, ["preprocess"]),
        ]
    rows = []
    for i, (unit, site, phase, upstream) in enumerate(units):
        started = phase != UnitPhase.PENDING
        done = phase not in (UnitPhase.PENDING, UnitPhase.RUNNING)
        rows.append(
            UnitRun(
                run=run,
                name=unit,
                slug=unit[:40],
                template=unit.split("-")[0],
                position=i,
                depends=" && ".join(upstream),
                upstream=upstream,
                timing=UnitTiming.SUBMIT,
                site=site if started else "",
                planned_site=site,
                phase=phase,
                reason=f"{unit} goes to {site}",
                started_at=now - timedelta(seconds=170 - (i % 50)) if started else None,
                finished_at=now - timedelta(seconds=60 - (i % 50)) if done else None,
            )
        )
    UnitRun.objects.bulk_create(rows)
    if decisions:
        by_name = {u.name: u for u in run.units.all()}
        PlacementDecision.objects.bulk_create(
            [
                PlacementDecision(
                    run=run,
                    unit=by_name[unit],
                    source=DecisionSource.RULE,
                    site=site,
                    reason=f"{unit}: best score at {site}",
                    candidates=[
                        {
                            "site": site,
                            "eligible": True,
                            "why": "holds the data",
                            "score": 0.9,
                            "bytes_to_move": 0,
                            "est_transfer_s": 0.0,
                        },
                        {
                            "site": "site-z",
                            "eligible": False,
                            "why": "cordoned",
                            "score": None,
                            "bytes_to_move": 5 * 2**30,
                            "est_transfer_s": 42.0,
                        },
                    ],
                )
                for unit, site, _, _ in units
            ]
        )
    return run


def chain_units(n: int, width: int = 40) -> list[tuple[str, str, str, list[str]]]:
    """``n`` units in layers of ``width``, each depending on one unit of the previous layer."""
    sites = ["site-a", "site-b", "site-c"]
    out = []
    for i in range(n):
        up = [f"u{i - width:05d}"] if i >= width else []
        phase = UnitPhase.SUCCEEDED if i < n // 2 else UnitPhase.RUNNING
        out.append((f"u{i:05d}", sites[i % 3], phase, up))
    return out
