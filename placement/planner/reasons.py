"""The one line that says why a unit goes where it goes."""

from __future__ import annotations

from collections.abc import Sequence

from placement.parser import Resources
from placement.planner.context import PlanContext
from placement.planner.filters import str_list
from placement.planner.inputs import TRANSFER_HALF_SCORE_S, DatasetInfo, Rule
from placement.planner.table import CandidateTable
from placement.units import human_bytes, human_seconds


def first_runtime_rule(rules: Sequence[Rule]) -> str:
    return next((r.name for r in rules if r.timing == "runtime"), "?")


def explain(
    ctx: PlanContext,
    table: CandidateTable,
    best: int,
    second: int,
    hard: Sequence[Rule],
    reads: Sequence[DatasetInfo],
    req: Resources,
    locality_w: float,
    capacity_w: float,
) -> str:
    """One human line naming what decided: a hard rule, data locality or free capacity."""
    site = ctx.sites[table.idx[best]]
    prefix = ""
    if hard:
        r = hard[0]
        what = {
            "pin": f"pinned to {', '.join(str_list(r.params.get('sites')))}",
            "exclude": f"excludes {', '.join(str_list(r.params.get('sites')))}",
            "require_labels": "requires "
            + ", ".join(
                f"{k}={v}" if v not in (None, "*") else str(k)
                for k, v in sorted((r.params.get("labels") or {}).items())
            ),
            "require_capabilities": "requires " + ", ".join(str_list(r.params.get("capabilities"))),
        }[r.effect]
        if len(what) > 160:
            what = what[:157] + "..."
        prefix = f"rule '{r.name}': {what}; "
    gpu = f"{site.name} has {site.gpu_free} free GPUs" if req.gpus else ""
    if second < 0:
        tail = gpu or f"{site.name} is the only eligible site"
        return f"{prefix}{tail}"
    runner = ctx.sites[table.idx[second]]
    half = TRANSFER_HALF_SCORE_S
    t_b, t_r = table.seconds[best], table.seconds[second]
    d_loc = locality_w * ((1.0 - t_b / (t_b + half)) - (1.0 - t_r / (t_r + half)))
    d_cap = capacity_w * (table.capacity[table.idx[best]] - table.capacity[table.idx[second]])
    if d_loc <= 0 and d_cap <= 0:
        core = f"tie with {runner.name}, broken by name"
    elif d_loc >= d_cap:
        local = [d for d in reads if any(r.site == site.name for r in d.replicas)]
        if local:
            d = local[0]
            core = f"data locality: dataset {d.name} ({human_bytes(d.bytes)}) is at {site.name}"
        elif table.bytes_at(table.idx[best]) == 0:
            core = f"data locality: inputs are at {site.name}"
        else:
            size = human_bytes(table.bytes_at(table.idx[best]))
            eta = human_seconds(t_b)
            core = f"data locality: least to move to {site.name} ({size}, {eta})"
    else:
        free = f"{site.cpu_free / 1000:g} CPU, {human_bytes(site.memory_free)} free"
        core = f"free capacity: {site.name} has {free}"
    if gpu and prefix:
        return f"{prefix}{gpu}; {core}"
    return f"{prefix}{core}"
