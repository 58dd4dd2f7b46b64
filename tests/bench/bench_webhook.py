"""Benchmark of the runtime placement webhook (issue 6).

Prints the webhook's p50/p99 latency under 100 concurrent clients beside a no-op view
(``/healthz``) served by the same gunicorn in the same run, and the database queries one
admission makes. Run: ``.venv/bin/python tests/bench/bench_webhook.py`` (PostgreSQL on its
standard port; it creates and drops its own database ``portal_bench_webhook``).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

DB = "portal_bench_webhook"
PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
CLIENTS = 100
REQUESTS = int(os.environ.get("BENCH_WEBHOOK_REQUESTS", "3000"))
TOKEN = "bench-webhook-token"

os.environ.update(
    {
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DATABASE_URL": f"{PG}/{DB}",
        "SECURE_SSL_REDIRECT": "0",
        "STATIC_MANIFEST": "0",
        "PORTAL_WEBHOOK_TOKEN": TOKEN,
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "LOG_LEVEL": "ERROR",
    }
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prepare() -> dict[str, Any]:
    """The demo fleet, one demo run whose ingest succeeded at site-a, and the AdmissionReview
    karmada-apiserver sends when preprocess's step workflow is created."""
    subprocess.run(["dropdb", "--if-exists", "-h", "127.0.0.1", "-U", "postgres", DB], check=False)
    subprocess.run(["createdb", "-h", "127.0.0.1", "-U", "postgres", DB], check=True)
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.utils import timezone

    from portal import execution, services
    from portal.models import UnitRun

    call_command("migrate", verbosity=0)
    call_command("load_demo", verbosity=0)
    user = User.objects.get(username="scientist")
    run = services.run_submit(
        user=user, body=(ROOT / "examples" / "eo-pipeline.yaml").read_text(), project="eo-demo"
    )
    UnitRun.objects.filter(run=run, name="ingest").update(
        phase="Succeeded",
        workflow_name="ingest",
        finished_at=timezone.now(),
        outputs={
            "artifacts": [{"name": "tiles", "s3": {"key": "k"}, "size": 3 * 10**9}],
            "parameters": [{"name": "tile-count", "value": "12"}],
        },
    )
    units = list(run.units.all())
    pre = next(u for u in units if u.name == "preprocess")
    wf = execution.step_workflow_for(run, pre, units)
    return {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "bench",
            "kind": {"group": "argoproj.io", "version": "v1alpha1", "kind": "Workflow"},
            "resource": {"group": "argoproj.io", "version": "v1alpha1", "resource": "workflows"},
            "operation": "CREATE",
            "namespace": "portal",
            "name": wf["metadata"]["name"],
            "object": wf,
            "dryRun": False,
        },
    }


def queries_per_admission(body: bytes) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from portal import placement_runtime

    placement_runtime.admission_review(body=body)  # warm the per-process snapshot
    with CaptureQueriesContext(connection) as ctx:
        answer = placement_runtime.admission_review(body=body)
    assert answer["response"].get("patch"), "the bench admission must place the step"
    return len(ctx.captured_queries)


async def hammer(url: str, body: bytes | None, n: int) -> list[float]:
    import aiohttp

    latencies: list[float] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CLIENTS)) as session:

        async def client() -> None:
            while not queue.empty():
                queue.get_nowait()
                start = time.perf_counter()
                if body is None:
                    async with session.get(url) as resp:
                        await resp.read()
                        assert resp.status == 200, resp.status
                else:
                    async with session.post(url, data=body, headers=headers) as resp:
                        answer = await resp.json()
                        assert resp.status == 200 and answer["response"]["allowed"], answer
                latencies.append(time.perf_counter() - start)

        await asyncio.gather(*(client() for _ in range(CLIENTS)))
    return latencies


def report(name: str, lat: list[float], wall: float) -> tuple[float, float]:
    q = statistics.quantiles(lat, n=100)
    p50, p99 = q[49] * 1000, q[98] * 1000
    print(f"{name:<28} p50 {p50:7.1f} ms   p99 {p99:7.1f} ms   {len(lat) / wall:7.0f} req/s")
    return p50, p99


def main() -> None:
    review = prepare()
    body = json.dumps(review).encode()
    print(f"queries per admission (warm snapshot): {queries_per_admission(body)}")
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp, "gunicorn.log").open("wb")  # noqa: SIM115 - the server writes to it
        web = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "portal.wsgi:application",
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                "2",
                "--threads",
                "8",
                "--worker-class",
                "gthread",
                "--backlog",
                "512",
            ],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    urllib.request.urlopen(base + "/healthz", timeout=2).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise SystemExit("gunicorn did not start") from None
                    time.sleep(0.2)
            url = f"{base}/webhooks/placement/{TOKEN}/"
            asyncio.run(hammer(url, body, 200))  # warm both workers
            asyncio.run(hammer(base + "/healthz", None, 200))
            print(f"{CLIENTS} concurrent clients, {REQUESTS} requests each, gunicorn 2x8 threads")
            start = time.perf_counter()
            floor = asyncio.run(hammer(base + "/healthz", None, REQUESTS))
            _, floor_p99 = report(
                "floor: no-op view (/healthz)", floor, time.perf_counter() - start
            )
            start = time.perf_counter()
            hook = asyncio.run(hammer(url, body, REQUESTS))
            _, hook_p99 = report("webhook (runtime step)", hook, time.perf_counter() - start)
            print(
                f"p99 webhook / no-op: {hook_p99 / floor_p99:.2f}x (target ≤ 1.5x); "
                f"Karmada's timeout is 3000 ms"
            )
        finally:
            os.killpg(web.pid, signal.SIGTERM)
            web.wait(timeout=20)
            from django.db import connections

            connections.close_all()
            subprocess.run(
                ["dropdb", "--if-exists", "-h", "127.0.0.1", "-U", "postgres", DB], check=False
            )


if __name__ == "__main__":
    main()
