"""Step-to-step latency, with every real part: for a chain of ``--steps`` steps
(default 20) alternating between two sites, steps that end at once, the time from a unit's
member Workflow reaching Succeeded (its ResourceBinding shows it) to its dependent's step
workflow being created on karmada-apiserver. Both moments are seen by this process's own
watches on the sandbox, so they carry the same delay.

Floor, measured in the same run: a bare watch event round trip on the same sandbox (a
Workflow created with the raw client, until this process's watch sees it ADDED).

Run: ``.venv/bin/python tests/bench/bench_latency.py [--steps N] [--runs N]``. It creates and
drops its own database (``BENCH_DB``, default ``portal_bench_latency``) and flushes its Redis
database (``BENCH_REDIS``, default ``redis://127.0.0.1:6379/11``). Targets: p50 ≤ 150 ms,
p99 ≤ 500 ms.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench.bench_fanout import DATASETS, wait  # noqa: E402
from tests.bench.benchstack import BenchStack, fleet_yaml  # noqa: E402

DB = os.environ.get("BENCH_DB", "portal_bench_latency")
REDIS = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/11")
DOMAIN = "portal.multisite.io"
NS = "portal"


def chain_body(steps: int) -> bytes:
    import yaml

    tasks = []
    for i in range(steps):
        task: dict[str, Any] = {
            "name": f"s{i:02d}",
            "template": "work",
            # Data locality puts step i at the site holding its input: the sites alternate.
            "arguments": {
                "parameters": [{"name": "uri", "value": f"s3://tiles/site-{i % 2:03d}/in-{i}"}]
            },
        }
        if i:
            task["depends"] = f"s{i - 1:02d}"
        tasks.append(task)
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "chain-"},
            "spec": {
                "entrypoint": "main",
                "templates": [
                    {"name": "main", "dag": {"tasks": tasks}},
                    {
                        "name": "work",
                        "metadata": {"annotations": {f"{DOMAIN}/sandbox-duration": "0s"}},
                        "inputs": {"parameters": [{"name": "uri"}]},
                        "container": {"image": "alpine:3.19", "command": ["true"]},
                    },
                ],
            },
        }
    ).encode()


class Seen:
    """First-seen times (monotonic) of step workflows ADDED and of bindings showing their
    member Succeeded, by ``(run id, unit)``, from two watches of this process."""

    def __init__(self, kubeconfig: Path) -> None:
        from kubernetes import client, config

        self.kubeconfig = kubeconfig
        self.added: dict[tuple[str, str], float] = {}
        self.succeeded: dict[tuple[str, str], float] = {}
        self.raw: dict[str, float] = {}
        self.names: dict[str, tuple[str, str]] = {}
        self.stop = threading.Event()
        self._api = lambda: client.CustomObjectsApi(config.new_client_from_config(str(kubeconfig)))
        self.threads = [
            threading.Thread(target=self._workflows, daemon=True),
            threading.Thread(target=self._bindings, daemon=True),
        ]
        for t in self.threads:
            t.start()

    def _stream(self, group: str, version: str, plural: str) -> Any:
        from kubernetes import watch

        api = self._api()
        while not self.stop.is_set():
            w = watch.Watch()
            for event in w.stream(
                api.list_namespaced_custom_object,
                group,
                version,
                NS,
                plural,
                timeout_seconds=30,
            ):
                yield event["type"], event["object"]
                if self.stop.is_set():
                    return

    def _workflows(self) -> None:
        for kind, obj in self._stream("argoproj.io", "v1alpha1", "workflows"):
            now = time.monotonic()
            labels = obj["metadata"].get("labels") or {}
            if kind != "ADDED":
                continue
            if labels.get("bench") == "raw":
                self.raw.setdefault(obj["metadata"]["name"], now)
            elif f"{DOMAIN}/run" in labels:
                key = (labels[f"{DOMAIN}/run"], labels[f"{DOMAIN}/unit"])
                self.added.setdefault(key, now)
                self.names[obj["metadata"]["name"]] = key

    def _bindings(self) -> None:
        for _kind, obj in self._stream("work.karmada.io", "v1alpha2", "resourcebindings"):
            now = time.monotonic()
            aggregated = (obj.get("status") or {}).get("aggregatedStatus") or []
            member = (aggregated[0] or {}).get("status") if aggregated else None
            if not isinstance(member, dict) or member.get("phase") != "Succeeded":
                continue
            # The binding names its Workflow, whose ADDED event came first.
            key = self.names.get(str(((obj.get("spec") or {}).get("resource") or {}).get("name")))
            if key is not None:
                self.succeeded.setdefault(key, now)


def floor_round_trips(stack: BenchStack, seen: Seen, n: int) -> list[float]:
    from kubernetes import client, config

    api = client.CustomObjectsApi(config.new_client_from_config(str(stack.kubeconfig)))
    out = []
    for i in range(n):
        name = f"raw-{i}"
        body = {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"name": name, "labels": {"bench": "raw"}},
            "spec": {"entrypoint": "w", "templates": [{"name": "w", "suspend": {}}]},
        }
        t0 = time.monotonic()
        api.create_namespaced_custom_object("argoproj.io", "v1alpha1", NS, "workflows", body)
        wait(lambda n=name: n in seen.raw, 30, f"the watch event of {name}", every=0.002)
        out.append(seen.raw[name] - t0)
    return out


def _wait_chain(stack: BenchStack, run_id: int) -> None:
    try:
        wait(
            lambda: stack.sql("SELECT status FROM portal_workflowrun WHERE id = %s", run_id)[0][0]
            in ("Succeeded", "Failed", "Error"),
            300,
            "the chain to end",
            every=0.2,
        )
    except SystemExit:
        for row in stack.sql(
            "SELECT name, site, phase, workflow_name, message FROM portal_unitrun "
            "WHERE run_id = %s ORDER BY position",
            run_id,
        ):
            print(*row)
        for name in ("worker", "watcher"):
            print(f"--- {name}:\n{stack.processes.log(name, 30)}")
        raise


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run_chain(stack: BenchStack, steps: int) -> tuple[int, list[tuple[str, str]]]:
    """Submit a chain and wait for its end: its id, and its units' (slug, site) in order."""
    run_id = stack.submit(chain_body(steps))
    _wait_chain(stack, run_id)
    wait(
        lambda run_id=run_id: stack.sql(
            "SELECT status FROM portal_workflowrun WHERE id = %s", run_id
        )[0][0]
        in ("Succeeded", "Failed", "Error"),
        300,
        "the chain to end",
        every=0.2,
    )
    units = stack.sql(
        "SELECT slug, site FROM portal_unitrun WHERE run_id = %s ORDER BY position",
        run_id,
    )
    return run_id, units


def chain_latencies(seen: Seen, run_id: int, units: list[tuple[str, str]]) -> list[float]:
    """From each step's Succeeded to the next step's workflow added, as the watches saw them."""
    latencies: list[float] = []
    key = str(run_id)
    for (prev, _), (nxt, _) in itertools.pairwise(units):
        done = seen.succeeded.get((key, prev))
        added = seen.added.get((key, nxt))
        if done is not None and added is not None:
            latencies.append(added - done)
    return latencies


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--runs", type=int, default=3, help="chains, one after the other")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp:
        fleet = Path(tmp) / "fleet.yaml"
        fleet.write_text(fleet_yaml(2))
        stack = BenchStack(
            Path(tmp) / "stack", db=DB, redis_db=REDIS, fleet=fleet, time_scale=100.0
        )
        try:
            stack.manage("shell", "-c", DATASETS.format(sites=2))
            seen = Seen(stack.kubeconfig)
            time.sleep(1)  # the watches are open
            latencies: list[float] = []
            sites: set[str] = set()
            for r in range(args.runs + 1):  # the first chain warms every process up
                run_id, units = run_chain(stack, args.steps)
                sites |= {site for _slug, site in units}
                if r == 0:
                    continue
                latencies += chain_latencies(seen, run_id, units)
            floor = floor_round_trips(stack, seen, 50)
            seen.stop.set()
        finally:
            stack.stop()
    if not latencies:
        raise SystemExit("no step-to-step latency was observed")
    print(
        f"step-to-step latency, {args.runs} chains of {args.steps} steps over "
        f"{len(sites)} sites ({len(latencies)} transitions)"
    )
    print(
        f"  p50 {statistics.median(latencies) * 1000:7.1f} ms   p99 "
        f"{pct(latencies, 0.99) * 1000:7.1f} ms   max {max(latencies) * 1000:7.1f} ms"
        "   targets p50 ≤ 150 ms, p99 ≤ 500 ms"
    )
    print(
        f"  floor, a bare watch event round trip: p50 {statistics.median(floor) * 1000:7.1f} ms"
        f"   p99 {pct(floor, 0.99) * 1000:7.1f} ms"
    )


if __name__ == "__main__":
    main()
