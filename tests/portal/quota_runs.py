"""Runs made for the quota admission tests: a fan-out of tiles planned at one site, each
asking for CPU only, and what the worker does with the units admitted."""

from __future__ import annotations

from portal.choices import UnitPhase, UnitTiming
from portal.models import UnitRun, WorkflowRun
from sites.models import Project
from tests.factories import UnitRunFactory, WorkflowRunFactory

CPU = 1000  # millicores per CPU


def tiles(project: Project, site: str, n: int, *, cpu: int = CPU, priority: int = 0) -> WorkflowRun:
    """A run of ``project`` with ``n`` submit-time units ``tile-i`` planned at ``site``, each
    asking for ``cpu`` millicores; ``priority`` non-zero gives it a priority class of that
    value."""
    compiled = {"priority_class": {"name": f"p{priority}", "value": priority}} if priority else {}
    run: WorkflowRun = WorkflowRunFactory(project=project, compiled=compiled)
    UnitRun.objects.bulk_create(
        [
            UnitRunFactory.build(
                run=run,
                name=f"tile-{i}",
                position=i,
                planned_site=site,
                site=site,
                timing=UnitTiming.SUBMIT,
                spec={"resources": {"cpu_millicores": cpu, "memory_bytes": 0, "gpus": 0}},
            )
            for i in range(n)
        ]
    )
    return run


def pending(run: WorkflowRun) -> list[UnitRun]:
    return list(run.units.filter(phase=UnitPhase.PENDING).order_by("position"))


def start(units: list[UnitRun]) -> None:
    """What the worker does with admitted units: their step workflows exist."""
    for u in units:
        UnitRun.objects.filter(pk=u.pk).update(phase=UnitPhase.RUNNING, workflow_name=u.name)
