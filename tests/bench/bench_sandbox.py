"""Benchmark of the sandbox fleet: requests per second and memory over 100,000 requests.

Run: .venv/bin/python tests/bench/bench_sandbox.py

Rates are measured with the official kubernetes client (GET, LIST, CREATE) beside its floor,
GET /version through the same client against the same server in the same run. The server's
RSS is read after 1,000 requests and after 100,000; the bulk of the 100,000 is driven with a
concurrent raw HTTP client so that the run stays well under three minutes.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kubernetes import client

from tests.fixtures_sandbox import SandboxServer, start_sandbox

NS = "default"
PP = ("policy.karmada.io", "v1alpha1")
TOTAL = 100_000
CONCURRENCY = 8
# Stops the bulk phase early on a machine too busy to reach TOTAL in time; the output
# then says how many requests were served.
BUDGET_S = 130.0


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def policy(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": name, "labels": {"bench": "yes"}},
        "spec": {
            "resourceSelectors": [
                {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": name}
            ],
            "placement": {"clusterAffinity": {"clusterNames": ["site-b"]}},
        },
    }


def rate(n: int, fn: Callable[[int], Any]) -> float:
    started = time.perf_counter()
    for i in range(n):
        fn(i)
    return n / (time.perf_counter() - started)


class Counter:
    def __init__(self) -> None:
        self.requests = 0


def client_phase(sandbox: SandboxServer, counter: Counter, n: int) -> dict[str, float]:
    api = sandbox.api_client()
    custom = client.CustomObjectsApi(api)
    version = client.VersionApi(api)
    for i in range(20):
        custom.create_namespaced_custom_object(*PP, NS, "propagationpolicies", policy(f"fixed-{i}"))
    counter.requests += 20

    def create(i: int) -> None:
        custom.create_namespaced_custom_object(*PP, NS, "propagationpolicies", policy(f"c-{i}"))

    # Warm-up (connection pool, first-call paths on both sides) before anything is timed.
    rate(100, lambda i: version.get_code())
    counter.requests += 100
    rates = {
        "floor GET /version": rate(n, lambda i: version.get_code()),
        "GET propagationpolicy": rate(
            n,
            lambda i: custom.get_namespaced_custom_object(
                *PP, NS, "propagationpolicies", f"fixed-{i % 20}"
            ),
        ),
        "LIST propagationpolicies (20)": rate(
            n,
            lambda i: custom.list_namespaced_custom_object(
                *PP, NS, "propagationpolicies", label_selector="bench=yes"
            ),
        ),
        "CREATE propagationpolicy": rate(n, create),
    }
    counter.requests += 4 * n
    for i in range(n):
        custom.delete_namespaced_custom_object(*PP, NS, "propagationpolicies", f"c-{i}")
    counter.requests += n
    api.close()
    return rates


async def bulk_phase(sandbox: SandboxServer, counter: Counter, total: int, budget: float) -> float:
    """Keep-alive connections with a minimal HTTP/1.1 client: aiohttp's client costs more CPU
    than the server on a two-core machine, which would measure the client, not the server."""
    host, port = sandbox.url.removeprefix("http://").split(":")
    path = f"/apis/policy.karmada.io/v1alpha1/namespaces/{NS}/propagationpolicies"
    started = time.perf_counter()
    done_at_start = counter.requests
    queue = iter(range(total - counter.requests))

    def request(method: str, url: str, body: bytes = b"") -> bytes:
        head = (
            f"{method} {url} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body

    async def worker(wid: int) -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        reads = [
            request("GET", "/version"),
            request("GET", f"{path}/fixed-{wid % 20}"),
            request("GET", f"{path}?labelSelector=bench%3Dyes"),
        ]
        step = 0
        try:
            # Each connection keeps its own cycle, so its DELETE follows its own CREATE. A
            # new name each cycle: Karmada's webhook gives every policy a finalizer, so a
            # deleted one lingers until its controller lets go, and creating the same name
            # again meanwhile is a 409, as upstream.
            for _ in queue:
                if time.perf_counter() - started > budget:
                    break
                name = f"b-{wid}-{step // 5}"
                if step % 5 < 3:
                    writer.write(reads[step % 5])
                elif step % 5 == 3:
                    writer.write(request("POST", path, json.dumps(policy(name)).encode()))
                else:
                    writer.write(request("DELETE", f"{path}/{name}"))
                step += 1
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                if not head.startswith((b"HTTP/1.1 200", b"HTTP/1.1 201")):
                    raise RuntimeError(head.decode(errors="replace"))
                counter.requests += 1
        finally:
            writer.close()

    await asyncio.gather(*(worker(w) for w in range(CONCURRENCY)))
    return (counter.requests - done_at_start) / (time.perf_counter() - started)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        sandbox = start_sandbox(Path(tmp))
        try:
            pid = sandbox.process.pid
            counter = Counter()
            rss_start = rss_mib(pid)
            rates = client_phase(sandbox, counter, 200)
            rss_1k = rss_mib(pid)
            requests_1k = counter.requests
            bulk = asyncio.run(bulk_phase(sandbox, counter, TOTAL, BUDGET_S))
            rss_100k = rss_mib(pid)
        finally:
            sandbox.stop()
    print("sandbox fleet benchmark; rates with the kubernetes client, one connection:")
    for label, value in rates.items():
        print(f"  {label:32s} {value:8.0f} req/s")
    print(
        f"  bulk mix, {CONCURRENCY} keep-alive connections"
        f" (version/get/list/create/delete) {bulk:8.0f} req/s"
    )
    if counter.requests < TOTAL:
        print(
            f"  (time budget of {BUDGET_S:.0f}s reached at {counter.requests:,} requests:"
            " the machine is busier than the benchmark assumes)"
        )
    print(f"server RSS at start             {rss_start:8.1f} MiB")
    print(f"server RSS after {requests_1k:>7,} requests {rss_1k:8.1f} MiB")
    print(
        f"server RSS after {counter.requests:>7,} requests {rss_100k:8.1f} MiB "
        f"(growth {rss_100k - rss_1k:+.1f} MiB)"
    )


if __name__ == "__main__":
    main()
