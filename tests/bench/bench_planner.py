"""Planner benchmark: one decision at 200 sites x 50 rules, and whole plans of
1,000- and 2,000-unit DAGs over 200 sites, each beside a floor measured in the same run.

Also the preview of 1,000 and 2,000 units over 200 sites as the API answers it.

Run: ``.venv/bin/python tests/bench/bench_planner.py`` (about ten seconds). Targets: decision
p99 <= 5 ms; 1,000 units <= 200 ms; 2,000 units <= 2.2 x the 1,000-unit time; the preview of
1,000 units <= 300 ms.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from placement.parser import Limits, Unit, parse_workflow
from placement.planner import (
    DatasetInfo,
    Fleet,
    Link,
    Replica,
    Rule,
    Selector,
    SiteState,
    Upstream,
    decide,
    plan,
)

SITES = 200
RULES = 50
DATASETS = 60
TEMPLATES = 24
REGIONS = ["eu-west", "eu-central", "us-east", "us-west", "ap-south"]
GB = 10**9
PREVIEW_TOP = 10  # the API's default (PORTAL_PREVIEW_CANDIDATES)


def make_fleet(rng: random.Random) -> Fleet:
    sites = []
    for i in range(SITES):
        gpus = rng.choice([0, 0, 0, 4, 8])
        cpu = rng.choice([16_000, 32_000, 64_000, 128_000])
        sites.append(
            SiteState(
                name=f"site-{i:03d}",
                region=REGIONS[i % len(REGIONS)],
                zone=f"z{i % 3}",
                provider=rng.choice(["onprem", "cloud"]),
                labels={"tier": rng.choice(["archive", "compute", "edge"]), "rack": str(i % 7)},
                capabilities=frozenset({"gpu"} if gpus else set()) | {rng.choice(["ssd", "hdd"])},
                ready=rng.random() > 0.03,
                cordoned=rng.random() < 0.03,
                cpu_allocatable=cpu,
                cpu_allocated=rng.randrange(0, cpu),
                memory_allocatable=cpu * 2**22,
                memory_allocated=rng.randrange(0, cpu * 2**22),
                gpu_allocatable=gpus,
                gpu_allocated=rng.randrange(0, gpus + 1) if gpus else 0,
                pods_allocatable=110,
                pods_allocated=rng.randrange(0, 110),
            )
        )
    links = []
    for s in sites:  # each site reaches 30 others directly; the rest use the slow default
        for t in rng.sample(sites, 30):
            if t.name != s.name:
                links.append(Link(s.name, t.name, rng.choice([1_000, 10_000, 40_000])))
    return Fleet(tuple(sites), tuple(links))


def make_datasets(rng: random.Random, fleet: Fleet) -> list[DatasetInfo]:
    names = [s.name for s in fleet.sites]
    return [
        DatasetInfo(
            name=f"ds-{i:02d}",
            uri_prefix=f"s3://archive/ds-{i:02d}/",
            bytes=rng.randrange(1, 500) * GB,
            residency=frozenset(rng.sample(REGIONS, 3)) if i % 5 == 0 else frozenset(),
            replicas=tuple(Replica(s) for s in rng.sample(names, rng.randint(1, 3))),
        )
        for i in range(DATASETS)
    ]


def make_rules(rng: random.Random, fleet: Fleet) -> list[Rule]:
    """50 rules as an operator would write them: hard rules aimed at one template each (so a
    unit meets a couple of them), preferences with globs, a few decided at runtime."""
    names = [s.name for s in fleet.sites]
    effects = (
        ["pin"] * 8
        + ["exclude"] * 8
        + ["require_labels"] * 10
        + ["require_capabilities"] * 10
        + ["prefer_data_locality"] * 7
        + ["prefer_free_capacity"] * 7
    )
    rules = []
    for i, effect in enumerate(effects):
        params: dict[str, Any] = {}
        if effect == "pin":
            params = {"sites": rng.sample(names, 60)}
        elif effect == "exclude":
            params = {"sites": rng.sample(names, 10)}
        elif effect == "require_labels":
            params = {"labels": {"tier": rng.choice(["compute", "archive"])}}
        elif effect == "require_capabilities":
            params = {"capabilities": [rng.choice(["ssd", "hdd"])]}
        hard = not effect.startswith("prefer")
        selector = Selector(
            template=f"tmpl-{rng.randrange(TEMPLATES):02d}"
            if hard
            else rng.choice(["tmpl-1*", None]),
            task=None if hard else rng.choice([None, f"task-{rng.randrange(10)}*"]),
            labels=rng.choice([{}, {"team": "eo"}]),
            image=rng.choice([None, "ghcr.io/bench/*"]),
            project=rng.choice([None, "bench"]),
        )
        timing = "runtime" if effect == "prefer_free_capacity" and i % 3 == 0 else "submit"
        rules.append(
            Rule(i, f"rule-{i:02d}", effect, selector, timing, params, rng.uniform(0.5, 3), i)  # type: ignore[arg-type]
        )
    return rules


def make_workflow(rng: random.Random, n: int) -> dict[str, Any]:
    """A DAG of ``n`` tasks over TEMPLATES templates; each task depends on 1-3 recent tasks
    and some read a dataset through a parameter value (a URI under its prefix)."""
    tasks = []
    for i in range(n):
        task: dict[str, Any] = {
            "name": f"task-{i}",
            "template": f"tmpl-{rng.randrange(TEMPLATES):02d}",
        }
        if i:
            ups = sorted(
                {f"task-{rng.randrange(max(0, i - 20), i)}" for _ in range(rng.randint(1, 3))}
            )
            task["depends"] = " && ".join(ups)
        if rng.random() < 0.3:
            ds = rng.randrange(DATASETS)
            task["arguments"] = {
                "parameters": [{"name": "in", "value": f"s3://archive/ds-{ds:02d}/x"}]
            }
        tasks.append(task)
    templates: list[dict[str, Any]] = [{"name": "main", "dag": {"tasks": tasks}}]
    for t in range(TEMPLATES):
        res: dict[str, Any] = {"requests": {"cpu": f"{(t % 4) + 1}", "memory": f"{(t % 8) + 1}Gi"}}
        if t % 6 == 0:
            res["limits"] = {"nvidia.com/gpu": "1"}
        templates.append(
            {
                "name": f"tmpl-{t:02d}",
                "metadata": {"labels": {"team": "eo"} if t % 2 else {}},
                "inputs": {"parameters": [{"name": "in", "default": ""}]},
                "container": {"image": f"ghcr.io/bench/step-{t}:1", "resources": res},
            }
        )
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "bench-"},
        "spec": {"entrypoint": "main", "templates": templates},
    }


# CPU time of this process: the benchmark machine is shared, and wall time would measure the
# neighbours. (Single-threaded code: CPU time is what a dedicated core would take.)
clock = time.process_time


def timed(fn: Callable[[], Any], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = clock()
        fn()
        out.append(clock() - t0)
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.3f} ms"


def main() -> None:
    rng = random.Random(4)
    fleet = make_fleet(rng)
    datasets = make_datasets(rng, fleet)
    rules = make_rules(rng, fleet)
    limits = Limits(max_units=10_000)

    bench_decision(rng, fleet, rules, datasets, limits)
    parsed_by_size = bench_plans(fleet, rules, datasets, limits)
    bench_preview(parsed_by_size, fleet, rules, datasets)


def bench_decision(
    rng: random.Random, fleet: Fleet, rules: Any, datasets: Any, limits: Limits
) -> None:
    """One decision, as the webhook makes it: warm (one snapshot for a while) and cold."""
    # -- one decision (what the webhook does: a fresh context every call) ------------------
    sample = parse_workflow(make_workflow(rng, 400), limits=limits).units
    upstream = {
        f"task-{i}": Upstream(f"site-{rng.randrange(SITES):03d}", rng.randrange(0, 50) * GB)
        for i in range(400)
    }
    units: list[Unit] = list(sample)
    # Steady state: the webhook decides against one snapshot for a while, so what depends only
    # on the fleet, a template's rules and requests, and the datasets is already derived. (The
    # "cold" line below measures the first decisions after a new snapshot.)
    for u in units:
        decide(u, fleet, rules, datasets, "bench", upstream)
    times = []
    for i in range(1500):
        u = units[i % len(units)]
        # As the webhook sees it: the same fleet snapshot, but upstream outputs of a size never
        # seen before (so their transfer costs are computed afresh every time).
        ran = {
            name: Upstream(f"site-{rng.randrange(SITES):03d}", rng.randrange(1, 10**12))
            for name in u.upstream
        }
        t0 = clock()
        # The webhook records the candidate table: decide() builds its rows too.
        decide(u, fleet, rules, datasets, "bench", ran).candidates  # noqa: B018
        times.append(clock() - t0)

    def decision_floor() -> None:
        # Touch every site and every rule once, as any decision must.
        total = 0
        for s in fleet.sites:
            total += s.cpu_allocatable - s.cpu_allocated
        for r in rules:
            total += len(r.name)

    floor_times = timed(decision_floor, 1500)

    # Cold: a new Fleet object per decision, so nothing derived from it is reused.
    cold = []
    for i in range(150):
        u = units[i % len(units)]
        fresh = Fleet(fleet.sites, fleet.links)
        t0 = clock()
        decide(u, fresh, rules, datasets, "bench", upstream).candidates  # noqa: B018
        cold.append(clock() - t0)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"(CPU time of this process; machine load average {load:.1f})")
    print(f"decision, {SITES} sites x {RULES} rules ({len(times)} decisions)")
    print(
        f"  p50 {ms(statistics.median(times))}   p90 {ms(pct(times, 0.9))}"
        f"   p99 {ms(pct(times, 0.99))}   (target p99 <= 5 ms)"
    )
    print(
        f"  cold, a new Fleet object each time: p50 {ms(statistics.median(cold))}"
        f"   p99 {ms(pct(cold, 0.99))}"
    )
    print(f"  floor (touch each site and rule once): p50 {ms(statistics.median(floor_times))}")


def bench_plans(fleet: Fleet, rules: Any, datasets: Any, limits: Limits) -> dict[int, Any]:
    """Whole plans of 1,000 and 2,000 units; the parsed workflows, for the preview's figures."""
    # -- whole plans --------------------------------------------------------------------------
    sizes = (1000, 2000)
    parsed_by_size = {
        n: parse_workflow(make_workflow(random.Random(n), n), limits=limits) for n in sizes
    }
    for n, parsed in parsed_by_size.items():
        assert len(parsed.units) == n
        plan(parsed, fleet, rules, datasets, "bench")  # warm-up
    # The two sizes alternate, so a change in the machine's load hits both alike.
    runs: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(5):
        for n in sizes:
            runs[n] += timed(
                lambda p=parsed_by_size[n]: plan(p, fleet, rules, datasets, "bench"), 1
            )
    results = {n: min(times) for n, times in runs.items()}
    for n in sizes:
        parsed = parsed_by_size[n]
        result = plan(parsed, fleet, rules, datasets, "bench")
        placed = sum(1 for d in result.decisions if d.site)
        runtime = sum(1 for d in result.decisions if d.timing == "runtime")

        def plan_floor(p: Any = parsed) -> None:
            # Copy the input once: every (unit, site) pair read, as a candidate table must be.
            rows = []
            for u in p.units:
                for s in fleet.sites:
                    rows.append((u.name, s.name, s.cpu_allocatable - s.cpu_allocated))

        floor = min(timed(plan_floor, 5))
        parse_time = min(
            timed(lambda n=n: parse_workflow(make_workflow(random.Random(n), n), limits=limits), 1)
        )
        full = min(
            timed(
                lambda p=parsed: [
                    d.candidates for d in plan(p, fleet, rules, datasets, "bench").decisions
                ],
                1,
            )
        )
        print(f"plan, {n} units over {SITES} sites x {RULES} rules (best of 5)")
        print(
            f"  plan {ms(results[n])}   ({placed} placed at submit, {runtime} runtime, "
            f"{n - placed - runtime} unplaceable)"
        )
        print(f"  plan + every candidate row built (the full preview body): {ms(full)}")
        print(f"  floor (visit each unit x site pair once): {ms(floor)}")
        print(f"  parse of the same workflow (not in the plan time): {ms(parse_time)}")
    ratio = results[2000] / results[1000]
    print(f"ratio 2000/1000 units: {ratio:.2f}   (targets: 1000 units <= 200 ms, ratio <= 2.2)")
    return parsed_by_size


def bench_preview(parsed_by_size: dict[int, Any], fleet: Fleet, rules: Any, datasets: Any) -> None:
    """The preview as ``POST /api/v1/runs/preview/`` answers it, after the body is parsed:
    plan, the answer's dict (each unit's best candidates inline, ``PREVIEW_TOP``, as the API's
    default), and its JSON text. Beside it: the same with every table in full
    (``?candidates=all``) and one unit's full table
    (``?unit=<name>``, the rest a request away), and the plan alone as the floor."""
    import json

    print(f"preview as the API answers it (plan + answer + JSON; best of 5; top {PREVIEW_TOP})")
    times: dict[int, float] = {}
    for n, parsed in parsed_by_size.items():

        def answer(top: int | None, p: Any = parsed) -> None:
            body = plan(p, fleet, rules, datasets, "bench").as_dict(top)
            json.dumps(body)

        def one_unit(p: Any = parsed) -> None:
            name = p.units[len(p.units) // 2].name
            result = plan(p, fleet, rules, datasets, "bench")
            json.dumps({"units": [d.as_dict() for d in result.decisions if d.unit == name]})

        answer(PREVIEW_TOP)  # warm-up
        floor = min(timed(lambda p=parsed: plan(p, fleet, rules, datasets, "bench"), 5))
        times[n] = min(timed(lambda: answer(PREVIEW_TOP), 5))
        full = min(timed(lambda: answer(None), 2))
        single = min(timed(one_unit, 3))
        print(f"  {n} units over {SITES} sites: {ms(times[n])}   (target for 1000: <= 300 ms)")
        print(f"    every table in full (?candidates=all): {ms(full)}")
        print(f"    one unit's full table (?unit=name)   : {ms(single)}")
        print(f"    floor (the plan alone)               : {ms(floor)}")
    print(f"  ratio 2000/1000 units: {times[2000] / times[1000]:.2f}   (linear: about 2)")


if __name__ == "__main__":
    main()
