"""What admitted units hold against their projects' quotas: a unit admitted holds its request
from then until it ends (also while its step workflow is being created), counted from the
``Workload`` rows joined to their unit's phase and attempt: nothing has to be released by hand,
and a unit placed again elsewhere (a new attempt) holds nothing at its old site."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import F, Sum

from portal.choices import FINAL_UNIT, UnitTiming
from portal.models import UnitRun
from portal.quotas.admission import Amount
from portal.quotas.models import Workload


def request_of(unit: UnitRun) -> Amount:
    """What one pod of the unit asks for (its spec, as the parser read the templates)."""
    r = (unit.spec or {}).get("resources") or {}
    return Amount(
        int(r.get("cpu_millicores") or 0), int(r.get("memory_bytes") or 0), int(r.get("gpus") or 0)
    )


def holding() -> Any:
    """Admitted workloads whose unit has not ended, at the attempt they were admitted for."""
    return Workload.objects.filter(
        admitted_at__isnull=False, unit__attempt=F("attempt"), unit__site=F("site")
    ).exclude(unit__phase__in=list(FINAL_UNIT))


def unplaced() -> Any:
    """Admitted workloads of units placed at run time that the webhook has not placed yet:
    each holds its request at every site it was admitted for (``sites``) until placed."""
    return Workload.objects.filter(
        admitted_at__isnull=False,
        site="",
        unit__site="",
        unit__attempt=F("attempt"),
        unit__timing=UnitTiming.RUNTIME,
    ).exclude(unit__phase__in=list(FINAL_UNIT))


def used_over(sites: Iterable[str]) -> dict[str, Amount]:
    """What each project's admitted, unfinished units hold over ``sites`` (one site, or the
    sites of a group): units placed at submission, units placed at run time, and units
    admitted for run time and not placed yet (counted once, however many of the sites they
    were admitted for are among ``sites``)."""
    names = sorted(set(sites))
    rows = (
        holding()
        .filter(site__in=names)
        .values("project__name")
        .annotate(cpu=Sum("cpu_millicores"), mem=Sum("memory_bytes"), gpu=Sum("gpus"))
        .order_by()
    )
    used = {
        r["project__name"]: Amount(int(r["cpu"] or 0), int(r["mem"] or 0), int(r["gpu"] or 0))
        for r in rows
    }
    wanted = set(names)
    for (site, project), amount in runtime_held().items():
        if site in wanted:
            used[project] = used.get(project, Amount()) + amount
    for project, where, cpu, mem, gpu in unplaced().values_list(
        "project__name", "sites", "cpu_millicores", "memory_bytes", "gpus"
    ):
        if wanted.intersection(where or ()):
            used[project] = used.get(project, Amount()) + Amount(cpu, mem, gpu)
    return used


def used_at(site: str) -> dict[str, Amount]:
    """What each project's admitted, unfinished units hold at ``site``."""
    return used_over([site])


def runtime_held(site: str | None = None) -> dict[tuple[str, str], Amount]:
    """What units placed at run time hold once placed, by (site, project): the webhook chose
    their site among those their quotas admitted them for, and from then they hold their
    requests there only."""
    units = (
        UnitRun.objects.filter(timing=UnitTiming.RUNTIME, run__project__isnull=False)
        .exclude(site="")
        .exclude(workflow_name="")
        .exclude(phase__in=list(FINAL_UNIT))
    )
    if site is not None:
        units = units.filter(site=site)
    out: dict[tuple[str, str], Amount] = {}
    for unit_site, project, resources in units.values_list(
        "site", "run__project__name", "spec__resources"
    ).order_by():
        r = resources or {}
        held = Amount(
            int(r.get("cpu_millicores") or 0),
            int(r.get("memory_bytes") or 0),
            int(r.get("gpus") or 0),
        )
        key = (str(unit_site), str(project))
        out[key] = out.get(key, Amount()) + held
    return out
