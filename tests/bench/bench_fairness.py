"""Fairness of execution: a one-step run behind a 5,000-unit run, and a
project's fan-out beside another project's several fan-outs.

Prints, with every real part (sandbox, worker with two processes, watcher, gunicorn):
* a one-step run of project ``other`` submitted while a ``--big``-unit (5,000) fan-out of
  project ``eo-demo`` is being created (100 of its step workflows exist): time to Succeeded,
  split into waiting for its step workflow, the step until the watcher recorded its end, and
  settling the run; beside the same run on the idle stack (the floor);
* Karmada requests per step workflow while the big run is created (a raw create is 1.0), and
  peak resident memory of the worker and web processes;
* ``--runs`` (3) fan-outs of ``--items`` (300) tiles in project ``eo-demo`` and one of
  ``other`` submitted after them: when each project's tiles all exist, beside one such fan-out
  alone on the same stack (the floor). Fair between projects, ``other`` finishes long before
  ``eo-demo``; fair between runs only, it finishes last;
* ``--small-runs`` (200) runs of ``--small-units`` (20) short steps in project ``eo-demo``, all
  submitted at once, then a one-step run of ``other`` once they run: its time to Succeeded
  beside the floor. Every unit that ends asks for its run's advance; those advances go through
  their project's prompt lane, so ``other``'s waits behind a few of ``eo-demo``'s, not
  thousands.

Run: ``.venv/bin/python tests/bench/bench_fairness.py [--big N] [--items N] [--runs N]
[--small-runs N] [--small-units N] [--only small]``. It
creates and drops its own database (``BENCH_DB``, default ``portal_bench_fairness``) and
flushes its Redis database (``BENCH_REDIS``, default ``redis://127.0.0.1:6379/13``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench.bench_fanout import created, one_step_body, run_status, wait  # noqa: E402
from tests.bench.benchstack import BenchStack, fleet_yaml, rss_mb  # noqa: E402

DB = os.environ.get("BENCH_DB", "portal_bench_fairness")
REDIS = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/13")
DOMAIN = "portal.multisite.io"

OTHER_PROJECT = """
from django.contrib.auth.models import User
from sites.models import Project
other, _ = Project.objects.get_or_create(name="other")
other.members.add(*User.objects.all())
"""


def fan_out(items: int) -> bytes:
    """``items`` tiles, each running for the whole benchmark: what is measured is creation."""
    import yaml

    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "tiles-"},
            "spec": {
                "entrypoint": "main",
                "templates": [
                    {
                        "name": "main",
                        "dag": {
                            "tasks": [
                                {
                                    "name": "tile",
                                    "template": "work",
                                    "arguments": {
                                        "parameters": [{"name": "n", "value": "{{item}}"}]
                                    },
                                    "withItems": list(range(items)),
                                }
                            ]
                        },
                    },
                    {
                        "name": "work",
                        "metadata": {"annotations": {f"{DOMAIN}/sandbox-duration": "36000s"}},
                        "inputs": {"parameters": [{"name": "n"}]},
                        "container": {"image": "alpine:3.19", "command": ["true"]},
                    },
                ],
            },
        }
    ).encode()


def one_step(stack: BenchStack, project: str) -> dict[str, float]:
    """A one-step run to Succeeded: the total, and where it went (from the database's
    timestamps: queued until its step workflow was created, the step until the watcher recorded
    its end, the run settled after that)."""
    t0 = time.perf_counter()
    run_id = stack.submit(one_step_body(), project=project)
    wait(lambda: run_status(stack, run_id) == "Succeeded", 900, "the one-step run")
    total = time.perf_counter() - t0
    # The step's end as the watcher recorded it (the member's own finishedAt has whole
    # seconds only).
    ((queued, step, settle),) = stack.sql(
        "SELECT extract(epoch FROM u.submitted_at - r.created_at),"
        " extract(epoch FROM e.created_at - u.submitted_at),"
        " extract(epoch FROM r.finished_at - e.created_at)"
        " FROM portal_workflowrun r JOIN portal_unitrun u ON u.run_id = r.id"
        " JOIN portal_runevent e ON e.unit_id = u.id AND e.kind = 'unit-phase'"
        " AND e.message LIKE '%%Succeeded%%' WHERE r.id = %s",
        run_id,
    )
    return {"total": total, "queued": float(queued), "step": float(step), "settle": float(settle)}


def split(t: dict[str, float]) -> str:
    return f"(waiting {t['queued']:.2f} s, step {t['step']:.2f} s, settling {t['settle']:.2f} s)"


class PeakRss:
    """Samples the stack's resident memory every half second while it is entered."""

    def __init__(self, stack: BenchStack) -> None:
        self.stack = stack
        self.peak: dict[str, float] = rss_mb(stack)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            for k, v in rss_mb(self.stack).items():
                self.peak[k] = max(self.peak.get(k, 0.0), v)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def all_created(stack: BenchStack, runs: list[int], items: int, t0: float) -> float:
    wait(lambda: all(created(stack, r) >= items for r in runs), 3600, "every tile", every=0.2)
    return time.perf_counter() - t0


def behind_big_run(stack: BenchStack, big: int) -> dict[str, Any]:
    """The one-step run of another project submitted while a ``big``-unit fan-out is created."""
    body = fan_out(big)
    requests_before = stack.sandbox_requests()
    with PeakRss(stack) as rss:
        run_id = stack.submit(body)
        t0 = time.perf_counter()
        # Submitted while the big run fans out (its turns have begun), not before its first
        # turn starts, which would let it through first by luck.
        wait(lambda: created(stack, run_id) >= 100, 900, "the fan-out to start")
        small = one_step(stack, "other")
        progress = created(stack, run_id)
        done = all_created(stack, [run_id], big, t0)
    requests = stack.sandbox_requests() - requests_before
    return {
        "small": small,
        "big_created_meanwhile": progress,
        "big_done": done,
        "requests": requests / big,
        "rss": rss.peak,
    }


def small_runs_body(units: int) -> bytes:
    """``units`` independent steps of a second each: every one that ends brings an advance."""
    import yaml

    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "small-"},
            "spec": {
                "entrypoint": "main",
                "templates": [
                    {
                        "name": "main",
                        "dag": {
                            "tasks": [{"name": f"s{i}", "template": "work"} for i in range(units)]
                        },
                    },
                    {
                        "name": "work",
                        "metadata": {"annotations": {f"{DOMAIN}/sandbox-duration": "1s"}},
                        "container": {"image": "alpine:3.19", "command": ["true"]},
                    },
                ],
            },
        }
    ).encode()


def behind_small_runs(stack: BenchStack, runs: int, units: int) -> dict[str, Any]:
    """``runs`` small runs of ``eo-demo`` submitted at once (four clients), then, once a
    tenth of their units ended, a one-step run of ``other``."""
    import concurrent.futures

    body = small_runs_body(units)
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        ids = list(pool.map(lambda _: stack.submit(body), range(runs)))
    submitted = time.perf_counter() - t0

    def ended_units() -> int:
        ((n,),) = stack.sql(
            "SELECT count(*) FROM portal_unitrun"
            " WHERE run_id = ANY(%s) AND finished_at IS NOT NULL",
            ids,
        )
        return int(n)

    wait(lambda: ended_units() >= runs * units // 10, 3600, "a tenth of the small runs' units")
    with QueueDepth() as depth:
        small = one_step(stack, "other")
    return {
        "small": small,
        "submitted": submitted,
        "ended": ended_units(),
        "total": runs * units,
        "depth": depth.peak,
    }


class QueueDepth:
    """The broker's queues (prompt: priority 0, bulk: 6) sampled while it is entered: the
    most messages each held."""

    def __init__(self) -> None:
        import redis

        self.client = redis.Redis.from_url(REDIS)
        self.peak = {"prompt": 0, "bulk": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            for name, key in (("prompt", "celery"), ("bulk", "celery\x06\x166")):
                self.peak[name] = max(self.peak[name], int(self.client.llen(key)))

    def __enter__(self) -> QueueDepth:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def projects_race(stack: BenchStack, runs: int, items: int) -> dict[str, float]:
    """``runs`` fan-outs of ``eo-demo`` then one of ``other``: when each project's are done."""
    body = fan_out(items)
    t0 = time.perf_counter()
    mine = [stack.submit(body) for _ in range(runs)]
    theirs = stack.submit(body, project="other")
    finished: dict[str, float] = {}
    waiter = threading.Thread(
        target=lambda: finished.update(other=all_created(stack, [theirs], items, t0))
    )
    waiter.start()
    finished["eo-demo"] = all_created(stack, mine, items, t0)
    waiter.join()
    return finished


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--big", type=int, default=5000)
    ap.add_argument("--items", type=int, default=300)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sites", type=int, default=10)
    ap.add_argument("--small-runs", type=int, default=200)
    ap.add_argument("--small-units", type=int, default=20)
    ap.add_argument("--only", choices=["small"], help="only the many-small-runs figure")
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-fairness-") as tmp:
        fleet = Path(tmp) / "fleet.yaml"
        fleet.write_text(fleet_yaml(args.sites))
        stack = BenchStack(
            Path(tmp) / "stack",
            db=DB,
            redis_db=REDIS,
            fleet=fleet,
            env={
                "PORTAL_MAX_UNITS": str(max(args.big, args.items) + 10),
                "PORTAL_MAX_BODY_BYTES": str(16 * 2**20),
            },
        )
        try:
            stack.manage("shell", "-c", OTHER_PROJECT)
            one_step(stack, "other")  # warm-up: imports, connections, planner inputs
            floor = one_step(stack, "other")
            if args.only != "small":
                t0 = time.perf_counter()
                alone_id = stack.submit(fan_out(args.items), project="other")
                alone = all_created(stack, [alone_id], args.items, t0)
                big = behind_big_run(stack, args.big)
                race = projects_race(stack, args.runs, args.items)
            many = behind_small_runs(stack, args.small_runs, args.small_units)
        finally:
            stack.stop()
    load = os.getloadavg()
    print(f"load average (1 min) at start {load_start[0]:.2f}, at end {load[0]:.2f}")
    print_small_runs(args, many, floor)
    if args.only == "small":
        return
    print_big_run(args, big, floor)
    print_race(args, race, alone)


def print_small_runs(
    args: argparse.Namespace, many: dict[str, Any], floor: dict[str, float]
) -> None:
    small = many["small"]
    print(
        f"one-step run (project other) behind {args.small_runs} runs of {args.small_units} units"
        f" (project eo-demo, submitted in {many['submitted']:.1f} s)"
    )
    print(f"  to Succeeded                 : {small['total']:6.2f} s  {split(small)}")
    print(f"    floor: idle stack          : {floor['total']:6.2f} s  {split(floor)}")
    print(f"  eo-demo's units ended by then: {many['ended']} of {many['total']}")
    depth = many["depth"]
    print(f"  broker queues meanwhile (most): prompt {depth['prompt']}, bulk {depth['bulk']}")


def print_big_run(args: argparse.Namespace, big: dict[str, Any], floor: dict[str, float]) -> None:
    small = big["small"]
    print(f"one-step run (project other) behind a {args.big}-unit run (project eo-demo)")
    print(f"  to Succeeded                 : {small['total']:6.2f} s  {split(small)}")
    print(f"    floor: idle stack          : {floor['total']:6.2f} s  {split(floor)}")
    print(
        f"  the big run meanwhile        : {big['big_created_meanwhile']} of {args.big} created;"
        f" all after {big['big_done']:.1f} s"
    )
    print(f"  Karmada requests per step wf : {big['requests']:6.2f}    (a raw create: 1.00)")
    print(f"  peak RSS MB worker / web     : {big['rss']['worker']:6.0f} / {big['rss']['web']:.0f}")


def print_race(args: argparse.Namespace, race: dict[str, float], alone: float) -> None:
    print(f"{args.runs} fan-outs of {args.items} (eo-demo), then one (other), all at once")
    print(f"  other's tiles all created    : {race['other']:6.1f} s")
    print(f"  eo-demo's tiles all created  : {race['eo-demo']:6.1f} s")
    print(f"    floor: one fan-out alone   : {alone:6.1f} s")


if __name__ == "__main__":
    main()
