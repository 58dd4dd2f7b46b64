"""Impact replay benchmark: 1,000 recorded decisions replayed under the active configuration
and a draft (the demo pipeline's runs over a 20-site fleet whose capacity differs from run to
run), beside the floor of planning the same units once. Target: <= 2 s on two cores.

Run: ``.venv/bin/python tests/bench/bench_replay.py`` (no database: the records are built here
as the portal stores them).
"""

from __future__ import annotations

import copy
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("DEBUG", "1")

import django  # noqa: E402

django.setup()

from placement import codec, planner  # noqa: E402
from placement.parser import parse_workflow  # noqa: E402
from placement.revisions import config as cfg  # noqa: E402
from placement.revisions.replay import (  # noqa: E402
    inputs_under,
    replay_records,
    rules_of,
    snapshot_body,
)

DECISIONS = 1000
SITES = 20
SNAPSHOTS = 50  # distinct fleet states among the runs (capacity moves between submissions)
GB = 10**9


def make_config(rng: random.Random) -> dict[str, Any]:
    sites = [
        {
            "name": f"site-{i:02d}",
            "cordoned": False,
            "labels": {"tier": "gpu" if i % 4 == 0 else "compute"},
            "capabilities": ["gpu"] if i % 4 == 0 else [],
            "overrides": {},
        }
        for i in range(SITES)
    ]
    links = [
        {
            "source": a["name"],
            "target": b["name"],
            "bandwidth_mbps": float(rng.choice([1000, 5000, 10000])),
            "cost_per_gb": rng.choice([0.0, 0.01, 0.02]),
            "latency_ms": 5.0,
            "artifacts_reachable": True,
        }
        for a in sites
        for b in sites
        if a is not b
    ]
    rules = [
        {
            "name": "ingest-near-data",
            "order": 10,
            "selector": {"task": "ingest*"},
            "effect": "prefer_data_locality",
            "weight": 10.0,
        },
        {
            "name": "preprocess-at-runtime",
            "order": 20,
            "selector": {"task": "preprocess*"},
            "timing": "runtime",
            "effect": "prefer_free_capacity",
            "weight": 5.0,
        },
        {
            "name": "inference-on-gpu",
            "order": 30,
            "selector": {"task": "inference*"},
            "effect": "require_capabilities",
            "parameters": {"capabilities": ["gpu"]},
        },
    ]
    return cfg.canonical(
        {"schema": 1, "rules": rules, "sites": sites, "datasets": [], "links": links}
    )


def make_snapshot(rng: random.Random, config: dict[str, Any]) -> dict[str, Any]:
    states = tuple(
        planner.SiteState(
            name=s["name"],
            region="eu-west" if i % 2 else "eu-central",
            cpu_allocatable=64_000,
            cpu_allocated=rng.randrange(0, 60_000, 1000),
            memory_allocatable=256 * 2**30,
            memory_allocated=rng.randrange(0, 200) * 2**30,
            gpu_allocatable=8 if i % 4 == 0 else 0,
            gpu_allocated=rng.randrange(0, 8) if i % 4 == 0 else 0,
        )
        for i, s in enumerate(config["sites"])
    )
    data = planner.DataCatalogue(
        [
            planner.DatasetInfo(
                name="sentinel2-l1c",
                uri_prefix="s3://sentinel2/",
                bytes=50 * GB,
                replicas=(planner.Replica(site=f"site-{rng.randrange(SITES):02d}"),),
            )
        ]
    )
    return snapshot_body(planner.Fleet(states), data)


def main() -> None:
    rng = random.Random(7)
    config = make_config(rng)
    draft = copy.deepcopy(config)
    for rule in draft["rules"]:
        if rule["name"] == "inference-on-gpu":
            rule["effect"], rule["parameters"] = "pin", {"sites": ["site-01", "site-04"]}
    draft["sites"][8]["cordoned"] = True
    units = parse_workflow((ROOT / "examples" / "eo-pipeline.yaml").read_text()).units
    unit_dicts = [codec.unit_to_dict(u) for u in units]
    snapshots = [make_snapshot(rng, config) for _ in range(SNAPSHOTS)]
    runs = DECISIONS // len(units) + 1
    records = [
        (run, None, run % SNAPSHOTS, snapshots[run % SNAPSHOTS], unit_dicts) for run in range(runs)
    ]

    # The floor: the same units planned once under one configuration, inputs built as replay
    # builds them.
    start = time.perf_counter()
    book = rules_of(config)
    built: dict[int, Any] = {}
    done = 0
    for _run, _project, snap, body, dicts in records:
        if done >= DECISIONS:
            break
        if snap not in built:
            built[snap] = inputs_under(body, config)
        fleet, data = built[snap]
        these = [codec.unit_from_dict(dict(u)) for u in dicts][: DECISIONS - done]
        planner.plan(these, fleet, book, data)
        done += len(these)
    floor = time.perf_counter() - start

    start = time.perf_counter()
    result = replay_records(records, base=config, draft=draft, limit=DECISIONS)
    took = time.perf_counter() - start
    s = result["summary"]
    print(
        f"replay of {s['decisions']} decisions ({s['runs']} runs, {SITES} sites): "
        f"{took * 1000:.0f} ms (target <= 2000 ms); floor, planning them once: "
        f"{floor * 1000:.0f} ms; moved {s['moved']} units {s['moved_by_pair']}"
    )


if __name__ == "__main__":
    main()
