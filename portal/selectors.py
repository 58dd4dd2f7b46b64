"""Reads for runs: who may see what."""

from __future__ import annotations

from typing import Any

from django.db.models import BigIntegerField, Q, QuerySet, Sum
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce

from placement import planner
from placement.parser import Resources
from portal.choices import ACTIVE_RUN, UnitPhase
from portal.models import UnitRun, WorkflowRun
from sites.models import Project


def runs_visible_to(user: Any) -> QuerySet[WorkflowRun]:
    """Staff see every run; others the runs they own and those of their projects."""
    runs = WorkflowRun.objects.select_related("project", "owner")
    if not user.is_authenticated:
        return runs.none()
    if user.is_staff:
        return runs
    return runs.filter(Q(owner=user) | Q(project__members=user)).distinct()


def projects_of(user: Any) -> QuerySet[Project]:
    if user.is_staff:
        return Project.objects.all()
    return Project.objects.filter(members=user)


def held_reservations() -> dict[str, Resources]:
    """What active runs hold per site and no member reports yet: units placed at a site and
    still Pending (placement/planner/reservations.py says when a reservation ends). One
    aggregate query."""

    def total(field: str) -> Coalesce:
        return Coalesce(Sum(Cast(KT(f"spec__resources__{field}"), BigIntegerField())), 0)

    rows = (
        UnitRun.objects.filter(phase=UnitPhase.PENDING, run__status__in=ACTIVE_RUN)
        .exclude(site="")
        .values("site")
        .annotate(cpu=total("cpu_millicores"), memory=total("memory_bytes"), gpus=total("gpus"))
    )
    return {
        r["site"]: Resources(
            cpu_millicores=int(r["cpu"]), memory_bytes=int(r["memory"]), gpus=int(r["gpus"])
        )
        for r in rows
    }


def fleet_with_holds(fleet: planner.Fleet) -> planner.Fleet:
    """The fleet with what other active runs hold counted as taken."""
    return planner.hold(fleet, held_reservations())
