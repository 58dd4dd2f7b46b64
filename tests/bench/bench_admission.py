"""Quota admission benchmark: a workload mix like Kueue's scheduler benchmark: 10
projects with quotas (some may borrow, some may not) at 50 sites, 15,000 units of mixed sizes
(CPU, memory, some GPUs) arriving in runs over an hour, each running for a while. A discrete
event simulation admits them with the portal's own decision (``portal.quotas.admission``):
at every arrival and every end, one admission pass over the site's queues (higher priority
first, then arrival; a smaller unit of the same priority passes one that does not fit, within
the nominal quota; borrowing by fair share).

Figures: admission decisions per second and per unit (CPU time of this process), simulated
time until every unit was admitted, utilization of the quota while work waits (time-weighted,
dominant resource, at sites with units waiting), and units left waiting by a pass although
they fitted (must be 0: every unit is admitted within one pass of quota freeing). The floor:
planning the same units without quotas (the planner's decision per unit over the 50 sites),
measured in the same run.

Run: ``.venv/bin/python tests/bench/bench_admission.py`` (about half a minute). Targets:
admission <= 2 ms per unit; utilization >= 90 % while work waits; 0 units left behind.
"""

from __future__ import annotations

import heapq
import os
import random
import statistics
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from placement.parser import parse_workflow
from placement.planner import Fleet, SiteState, decide
from portal.quotas.admission import (
    LOOKAHEAD,
    RESOURCES,
    Amount,
    Limit,
    SiteQuotas,
    admit_with,
    borrows,
    fair_turn,
    fits,
)

PROJECTS = 10
SITES = 50
UNITS = 15_000
RUN_SIZE = 50
ARRIVAL_SPAN = 3600.0
GI = 2**30
CPU = 1000

clock = time.process_time


@dataclass(order=True)
class Job:
    key: tuple[int, float, int]
    project: str = field(compare=False)
    site: str = field(compare=False)
    request: Amount = field(compare=False)
    duration: float = field(compare=False)
    arrival: float = field(compare=False)
    admitted: float | None = field(default=None, compare=False)


def make_quotas(rng: random.Random) -> tuple[dict[str, dict[str, Limit]], dict[str, list[str]]]:
    """Each project a quota at 8 sites; half may borrow without limit, half not at all."""
    limits: dict[str, dict[str, Limit]] = {f"site-{s:02d}": {} for s in range(SITES)}
    sites_of: dict[str, list[str]] = {}
    for p in range(PROJECTS):
        name = f"project-{p}"
        sites_of[name] = rng.sample(sorted(limits), 8)
        for site in sites_of[name]:
            cpu = rng.choice([16, 32, 64]) * CPU
            limits[site][name] = Limit(
                Amount(cpu, cpu // CPU * 4 * GI, rng.choice([0, 0, 2, 4])),
                (None, None, None) if p % 2 else (0, 0, 0),
            )
    return limits, sites_of


def make_jobs(
    rng: random.Random, limits: dict[str, dict[str, Limit]], sites_of: dict[str, list[str]]
) -> list[Job]:
    jobs = []
    for r in range(UNITS // RUN_SIZE):
        project = f"project-{rng.randrange(PROJECTS)}"
        arrival = rng.uniform(0, ARRIVAL_SPAN)
        priority = rng.choice([0, 0, 0, 100])
        for i in range(RUN_SIZE):
            site = rng.choice(sites_of[project])
            nominal = limits[site][project].nominal
            gpu = 1 if nominal.gpu and rng.random() < 0.1 else 0
            cpu = min(rng.choice([500, 1000, 2000, 4000, 8000]), nominal.cpu)
            memory = min(rng.choice([1, 2, 4, 8, 16]) * GI, nominal.memory)
            jobs.append(
                Job(
                    key=(-priority, arrival, r * RUN_SIZE + i),
                    project=project,
                    site=site,
                    request=Amount(cpu, memory, gpu),
                    duration=rng.uniform(30, 900),
                    arrival=arrival,
                )
            )
    return jobs


@dataclass
class Site:
    quotas: SiteQuotas
    queues: dict[str, deque[Job]] = field(default_factory=dict)

    def waiting(self) -> int:
        return sum(len(q) for q in self.queues.values())


def admission_pass(site: Site, now: float, stats: dict[str, float]) -> list[Job]:
    """One pass at a site: the heads of each project's queue in global order; behind a head
    that does not fit, a smaller unit of the same priority that fits within the nominal quota
    goes (as ``portal.quotas.submitted``); otherwise the project waits for the next pass."""
    admitted: list[Job] = []
    blocked: set[str] = set()
    while True:
        heads = [q[0] for p, q in site.queues.items() if q and p not in blocked]
        if not heads:
            return admitted
        job = min(heads)
        stats["decisions"] += 1
        why = fits(job.project, job.request, site.quotas)
        if why is None and borrows(job.project, job.request, site.quotas):
            borrowers = [
                h.project
                for h in heads
                if h.project != job.project
                and fits(h.project, h.request, site.quotas) is None
                and borrows(h.project, h.request, site.quotas)
            ]
            if not fair_turn(job.project, borrowers, site.quotas):
                why = "fair share"
        if why is not None:
            # As the portal: behind a head that does not fit, up to LOOKAHEAD units of the
            # same priority are tried, and one that fits within the nominal quota goes.
            queue = site.queues[job.project]
            passing = None
            for k, other in enumerate(list(queue)[1 : LOOKAHEAD + 1], start=1):
                if other.key[0] != job.key[0]:
                    break
                stats["decisions"] += 1
                if fits(other.project, other.request, site.quotas) is None and not borrows(
                    other.project, other.request, site.quotas
                ):
                    passing = k
                    break
            if passing is None:
                blocked.add(job.project)
                continue
            other = queue[passing]
            del queue[passing]
            site.quotas = admit_with(site.quotas, other.project, other.request)
            other.admitted = now
            admitted.append(other)
            continue
        site.queues[job.project].popleft()
        site.quotas = admit_with(site.quotas, job.project, job.request)
        job.admitted = now
        admitted.append(job)


def release(site: Site, job: Job) -> None:
    used = dict(site.quotas.used)
    held = used[job.project]
    used[job.project] = Amount(
        held.cpu - job.request.cpu, held.memory - job.request.memory, held.gpu - job.request.gpu
    )
    site.quotas = SiteQuotas(site.quotas.site, site.quotas.limits, used)


def left_behind(site: Site) -> int:
    """Queued heads that fit now without borrowing past anyone's fair share: a pass that
    left one would have failed its promise."""
    out = 0
    for p, q in site.queues.items():
        if (
            q
            and fits(p, q[0].request, site.quotas) is None
            and not borrows(p, q[0].request, site.quotas)
        ):
            out += 1
    return out


def waiting_utilization(site: Site, project: str) -> float:
    """How much of what a waiting project may hold at the site it holds: its nominal quota
    plus what it may still borrow (its limit, and what the others leave unused), on its
    dominant resource."""
    q = site.quotas
    limit = q.limits[project]
    best = 0.0
    for r in RESOURCES:
        used = q.used_by(project).get(r)
        spare = sum(
            max(0, lim.nominal.get(r) - q.used_by(p).get(r))
            for p, lim in q.limits.items()
            if p != project
        )
        cap = limit.borrow_limit(r)
        borrowed = max(0, used - limit.nominal.get(r))
        room = spare if cap is None else min(spare, max(0, cap - borrowed))
        capacity = max(limit.nominal.get(r), used) + room
        if capacity:
            best = max(best, min(used / capacity, 1.0))
    return best


def simulate(
    jobs: list[Job], limits: dict[str, dict[str, Limit]], quotas_on: bool
) -> dict[str, float]:
    sites = {
        name: Site(SiteQuotas(name, lims if quotas_on else {}, {}), {p: deque() for p in lims})
        for name, lims in limits.items()
    }
    events: list[tuple[float, int, int, Job]] = []
    for i, job in enumerate(sorted(jobs, key=lambda j: j.key)):
        heapq.heappush(events, (job.arrival, 0, i, job))
    stats = {
        "decisions": 0.0,
        "passes": 0.0,
        "behind": 0.0,
        "waiting_time": 0.0,
        "util_weighted": 0.0,
    }
    last = 0.0
    cpu = 0.0
    seq = len(jobs)
    while events:
        now, kind, _, job = heapq.heappop(events)
        # Utilization while work waits: time-weighted over the sites with units queued.
        dt = now - last
        if dt > 0:
            for s in sites.values():
                for p, q in s.queues.items():
                    if q:
                        stats["waiting_time"] += dt
                        stats["util_weighted"] += dt * waiting_utilization(s, p)
        last = now
        site = sites[job.site]
        if kind == 0:
            site.queues[job.project].append(job)
        else:
            release(site, job)
        t0 = clock()
        admitted = admission_pass(site, now, stats)
        cpu += clock() - t0
        stats["passes"] += 1
        stats["behind"] += left_behind(site)
        for a in admitted:
            seq += 1
            heapq.heappush(events, (now + a.duration, 1, seq, a))
    stats["cpu"] = cpu
    stats["all_admitted_at"] = max(j.admitted or 0.0 for j in jobs)
    stats["never"] = sum(1 for j in jobs if j.admitted is None)
    return stats


def planning_floor(rng: random.Random, jobs: list[Job]) -> float:
    """CPU seconds per unit to plan the same units without quotas: the planner's decision over
    the 50 sites, for a unit of each job's size."""
    fleet = Fleet(
        tuple(
            SiteState(
                name=f"site-{i:02d}",
                region="eu-west",
                ready=True,
                cpu_allocatable=256 * CPU,
                memory_allocatable=1024 * GI,
                gpu_allocatable=8,
                pods_allocatable=500,
            )
            for i in range(SITES)
        ),
        (),
    )
    sizes = sorted({(j.request.cpu, j.request.memory, j.request.gpu) for j in jobs})
    templates = [
        {
            "name": f"t{n}",
            "container": {
                "image": "alpine:3.19",
                "resources": {
                    "requests": {"cpu": f"{c}m", "memory": str(m)},
                    "limits": {"nvidia.com/gpu": str(g)} if g else {},
                },
            },
        }
        for n, (c, m, g) in enumerate(sizes)
    ]
    wf = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "floor-"},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {
                    "name": "main",
                    "dag": {
                        "tasks": [{"name": f"u{n}", "template": f"t{n}"} for n in range(len(sizes))]
                    },
                },
                *templates,
            ],
        },
    }
    units = parse_workflow(wf).units
    sample = 3000
    t0 = clock()
    for i in range(sample):
        decide(units[i % len(units)], fleet, [], [], "bench")
    return (clock() - t0) / sample


def main() -> None:
    rng = random.Random(32)
    limits, sites_of = make_quotas(rng)
    jobs = make_jobs(rng, limits, sites_of)
    work = sum(j.duration for j in jobs)
    stats = simulate(jobs, limits, quotas_on=True)
    free_jobs = make_jobs(random.Random(32), *make_quotas(random.Random(32)))
    free = simulate(free_jobs, limits, quotas_on=False)
    floor = planning_floor(rng, jobs)
    per_unit = stats["cpu"] / len(jobs)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"(CPU time of this process; machine load average {load:.1f})")
    print(
        f"{len(jobs)} units of {PROJECTS} projects at {SITES} sites, arriving over "
        f"{ARRIVAL_SPAN:.0f} s in runs of {RUN_SIZE}; {work / 3600:.0f} unit-hours of work"
    )
    print(
        f"admission: {stats['decisions']:.0f} decisions in {stats['passes']:.0f} passes, "
        f"{stats['decisions'] / stats['cpu']:.0f} decisions/s, "
        f"{per_unit * 1000:.3f} ms per unit (target <= 2 ms)"
    )
    print(f"  floor, planning the same units without quotas: {floor * 1000:.3f} ms per unit")
    print(f"  without quotas the same loop: {free['cpu'] / len(jobs) * 1000:.3f} ms per unit")
    print(
        f"every unit admitted after {stats['all_admitted_at']:.0f} simulated s "
        f"(without quotas {free['all_admitted_at']:.0f} s); never admitted: {stats['never']:.0f}"
    )
    util = stats["util_weighted"] / stats["waiting_time"] if stats["waiting_time"] else 1.0
    print(
        f"utilization of the quota while work waits (dominant resource, time-weighted): "
        f"{util * 100:.1f} % (target >= 90 %)"
    )
    print(f"units left waiting by a pass although they fitted: {stats['behind']:.0f} (target 0)")
    median = statistics.median(j.admitted - j.arrival for j in jobs if j.admitted is not None)
    print(f"median wait in the queue: {median:.0f} simulated s")


if __name__ == "__main__":
    main()
