"""The whole portal for a benchmark (sandbox, worker, watcher, gunicorn) on a fresh database,
for the latency and fan-out benchmarks. A helper, not a benchmark: ``make bench`` runs only
``bench_*.py``.

The database and the Redis database are the benchmark's own (``BENCH_DB``, ``BENCH_REDIS``;
``BENCH_PG`` is the server), so a benchmark never touches the test suite's.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.stack import (  # noqa: E402 - importable once the repository root is on the path
    WATCHER_READY,
    Processes,
    ProcessFailed,
    answers,
    free_port,
    gunicorn_argv,
    logged,
    sandbox_argv,
    watcher_argv,
    worker_argv,
)

PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")


def fleet_yaml(sites: int) -> str:
    """A fleet of ``sites`` plain compute sites (capacity enough that nothing queues)."""
    import yaml

    return yaml.safe_dump(
        {
            "sites": [
                {
                    "name": f"site-{i:03d}",
                    "region": "eu-west",
                    "zone": f"eu-west-{i}",
                    "provider": "bench",
                    "syncMode": "Push",
                    "labels": {"tier": "compute"},
                    "nodes": 4,
                    "capacity": {"cpu": "512", "memory": "2048Gi", "pods": "20000"},
                    "bucket": f"site-{i:03d}-artifacts",
                }
                for i in range(sites)
            ]
        }
    )


def bench_env(
    workdir: Path, *, db: str, redis_db: str, kubeconfig: Path, env: dict[str, str] | None
) -> dict[str, str]:
    """The environment every process of a bench stack runs with."""
    return {
        **os.environ,
        "DATABASE_URL": f"{PG}/{db}",
        "REDIS_URL": redis_db,
        "KARMADA_KUBECONFIG": str(kubeconfig),
        "SECURE_SSL_REDIRECT": "0",
        "STATIC_MANIFEST": "0",
        "PORTAL_RESYNC_SECONDS": "10",
        "PORTAL_VAR_DIR": str(workdir / "var"),
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "LOG_LEVEL": "WARNING",
        # What is measured is the control plane, not the submission limit.
        "PORTAL_SUBMISSIONS_PER_PROJECT": "0",
        **(env or {}),
    }


class BenchStack:
    """Sandbox, web (gunicorn), worker (with beat), watcher: started fresh, stopped at the end
    with the database dropped."""

    def __init__(
        self,
        workdir: Path,
        *,
        db: str,
        redis_db: str,
        time_scale: float = 1.0,
        fleet: Path | None = None,
        env: dict[str, str] | None = None,
        worker_concurrency: int = 2,
        web_workers: int = 2,
        sandbox_args: tuple[str, ...] = (),
        webhook: bool = False,
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.db = db
        self.sandbox_port = free_port()
        self.web_port = free_port()
        self.kubeconfig = workdir / "kubeconfig"
        if webhook:
            # karmada-apiserver calls this stack's web for runtime step workflows (and
            # unmanaged Workflows); without it, the registered URL answers nothing and every
            # runtime step lands at its fallback site.
            url = f"http://127.0.0.1:{self.web_port}/webhooks/placement/"
            env = {**(env or {}), "PORTAL_WEBHOOK_URL": url}
        self.env = bench_env(workdir, db=db, redis_db=redis_db, kubeconfig=self.kubeconfig, env=env)
        self.processes = Processes(workdir, self.env)
        try:
            self._fresh_database(redis_db)
            extra = [*(["--fleet", str(fleet)] if fleet else []), *sandbox_args]
            self.processes.start(
                "sandbox",
                sandbox_argv(self.sandbox_port, self.kubeconfig, time_scale, *extra),
                ready=answers(f"http://127.0.0.1:{self.sandbox_port}/_sandbox/ready"),
            )
            out = self.manage("load_demo", "--sandbox", f"http://127.0.0.1:{self.sandbox_port}")
            self.token = out.rsplit("API token: ", 1)[1].strip()
            self._start_control_plane(workdir / "beat", worker_concurrency, web_workers)
        except BaseException:
            with contextlib.suppress(ProcessFailed):
                self.stop()
            raise

    def _fresh_database(self, redis_db: str) -> None:
        """An empty, migrated database and an empty Redis database."""
        self._dropdb()
        subprocess.run(
            ["createdb", "-h", "127.0.0.1", "-U", "postgres", self.db],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        import redis

        redis.Redis.from_url(redis_db).flushdb()
        self.manage("migrate", "-v0")

    def _start_control_plane(
        self, beat_schedule: Path, worker_concurrency: int, web_workers: int
    ) -> None:
        """The worker (with beat), the watcher and the web, each waited for."""
        self.processes.start(
            "worker",
            worker_argv(
                concurrency=worker_concurrency,
                loglevel="warning",
                beat_schedule=beat_schedule,
            ),
        )
        self.processes.start("watcher", watcher_argv(), ready=logged(WATCHER_READY))
        self.processes.start(
            "web",
            gunicorn_argv(self.web_port, "--workers", str(web_workers), "--timeout", "120"),
            ready=answers(f"http://127.0.0.1:{self.web_port}/healthz"),
        )

    def manage(self, *args: str) -> str:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    def _dropdb(self) -> None:
        subprocess.run(
            ["dropdb", "--if-exists", "--force", "-h", "127.0.0.1", "-U", "postgres", self.db],
            check=False,
            stderr=subprocess.DEVNULL,
        )

    @property
    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.processes.running.items()}

    def sandbox_requests(self, verb: str | None = None) -> int:
        """Karmada API requests the sandbox has served: all, or those of one verb (POST...)."""
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.sandbox_port}/_sandbox/stats", timeout=10
        ) as resp:
            stats = json.load(resp)
        return int(stats["total"] if verb is None else stats["requests"].get(verb, 0))

    def sandbox_get(self, path: str) -> Any:
        """A GET of the sandbox's own API (``/_sandbox/...``)."""
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.sandbox_port}{path}", timeout=10
        ) as resp:
            return json.load(resp)

    def api(self, method: str, path: str, body: bytes | None = None, ctype: str = "") -> Any:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.web_port}{path}",
            data=body,
            method=method,
            headers={"Authorization": f"Token {self.token}", "Content-Type": ctype},
        )
        with urllib.request.urlopen(req, timeout=300) as resp:
            return json.load(resp)

    def submit(self, body: bytes, project: str = "eo-demo") -> int:
        return int(
            self.api("POST", f"/api/v1/runs/?project={project}", body, "application/yaml")["id"]
        )

    def sql(self, query: str, *args: Any) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(f"{PG}/{self.db}", autocommit=True) as conn:
            return list(conn.execute(query, args).fetchall())

    def stop(self) -> None:
        try:
            self.processes.stop_all()
        finally:
            self._dropdb()


def _processes(stack: BenchStack) -> Iterator[tuple[str | None, Path, list[str]]]:
    """Every process of the machine with the part of the stack whose session it is in (None:
    none), its ``/proc`` entry and the fields of its ``stat`` after the command name."""
    sessions = {pid: name for name, pid in stack.pids.items()}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rpartition(")")[2].split()
            part = sessions.get(int(stat[3]))
        except (OSError, ValueError, IndexError):
            continue
        yield part, entry, stat


def rss_mb(stack: BenchStack, largest: bool = False) -> dict[str, float]:
    """Resident memory (MB) of each part of the stack: every process of its session summed
    (a Celery worker is a parent and its pool, gunicorn an arbiter and its workers), or with
    ``largest`` its largest process (whether one process grows is clearer there: the sum
    also rises as each pool process reaches the same size in turn)."""
    totals = dict.fromkeys(stack.pids, 0.0)
    for part, entry, _ in _processes(stack):
        if part is None:
            continue
        try:
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    mb = int(line.split()[1]) / 1024
                    totals[part] = max(totals[part], mb) if largest else totals[part] + mb
        except (OSError, ValueError, IndexError):
            continue
    return totals


# The parts whose CPU the fan-out report prints, in its order.
CPU_PARTS = ("sandbox", "worker", "watcher", "web", "postgres", "bench")
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(stack: BenchStack) -> dict[str, tuple[float, float]]:
    """(CPU seconds run, seconds waited for a core) of each part of the stack so far: every
    process of its session (``/proc/<pid>/stat``, ``task/<tid>/schedstat``), PostgreSQL's
    backends of the bench's database, and this process (the floor's clients). At the start
    and end of a window, the difference says where the window's two cores went and whether
    the sandbox, which serves every create, was kept waiting for one."""
    totals = dict.fromkeys(CPU_PARTS, (0.0, 0.0))
    for part, entry, stat in _processes(stack):
        try:
            if int(entry.name) == os.getpid():
                part = "bench"
            elif part is None and stack.db.encode() in (entry / "cmdline").read_bytes():
                part = "postgres"
            if part not in totals:
                continue
            # Run: the process's own count, threads that ended included. Waited: its live
            # threads' (what the kernel keeps per thread only).
            ran = (int(stat[11]) + int(stat[12])) / TICKS
            waited = sum(
                int((task / "schedstat").read_text().split()[1]) / 1e9
                for task in (entry / "task").iterdir()
            )
        except (OSError, ValueError, IndexError):
            continue
        run0, wait0 = totals[part]
        totals[part] = (run0 + ran, wait0 + waited)
    return totals


def cpu_since(
    before: dict[str, tuple[float, float]], stack: BenchStack
) -> dict[str, tuple[float, float]]:
    after = cpu_s(stack)
    return {
        part: (after[part][0] - before[part][0], after[part][1] - before[part][1])
        for part in CPU_PARTS
    }
