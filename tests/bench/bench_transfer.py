"""Benchmark of a transfer: a 256 MiB artifact written at site-a and read by a GPU
step at site-c, which cannot read site-a's repository, so the portal relays it through a copy
at site-b (A -> B -> C). Printed beside the floor of copying the same bytes through the
repositories' endpoints directly with botocore (a pre-signed GET from site-a's, a pre-signed
PUT into site-b's), measured in the same run.

The transfer's time is from its step workflow's creation (the portal's clock, sub-second) to
the moment the portal has it Succeeded (seen by polling the database every 50 ms, on the same
host's clock): what relaying costs a reader, start-up and status included. Beside it, the
portal's record (created -> Argo's finishedAt), which is whole seconds, truncated, so up to a
second short; and the step's own start -> finish by Argo's clock, also whole seconds.

Run: ``.venv/bin/python tests/bench/bench_transfer.py`` (bubblewrap, PostgreSQL and Redis on
their standard ports; it creates and drops its own database ``portal_bench_transfer`` and
uses Redis database 12).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import requests  # noqa: E402 - after the path is set

from placement.demo import ARTIFACT_STORES, create_credentials  # noqa: E402
from portal import presign  # noqa: E402
from tests.bench.benchstack import BenchStack  # noqa: E402

# 256 MiB, the size asked for; 1 GiB too, since at 256 MiB the copy takes about a second and
# Argo's whole-second finish time is a large part of it.
SIZES = [int(m) for m in os.environ.get("BENCH_TRANSFER_MIB", "256,1024").split(",")]
# Its own database and Redis database; another of each when another run shares the machine.
DB = os.environ.get("BENCH_TRANSFER_DB", "portal_bench_transfer")
REDIS = os.environ.get("BENCH_TRANSFER_REDIS", "redis://127.0.0.1:6379/12")
TARGET = 1.5

WORKFLOW = """
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {generateName: relay-}
spec:
  entrypoint: main
  templates:
  - name: main
    dag:
      tasks:
      - {name: write, template: write}
      - name: read
        template: read
        depends: write
        arguments:
          artifacts: [{name: data, from: "{{tasks.write.outputs.artifacts.data}}"}]
  - name: write
    metadata:
      annotations: {portal.multisite.io/datasets: sentinel2-l1c}
    outputs:
      artifacts: [{name: data, path: /tmp/out.bin, archive: {none: {}}}]
    script:
      image: python:3
      command: [python3]
      source: |
        import os
        with open('/tmp/out.bin', 'wb') as f:
            for _ in range(MIB):
                f.write(os.urandom(1 << 20))
  - name: read
    inputs:
      artifacts: [{name: data, path: /tmp/in.bin}]
    container:
      image: alpine:3.23
      command: [wc, -c, /tmp/in.bin]
      resources: {limits: {nvidia.com/gpu: "1"}}
"""


def listener_of(stack: BenchStack, endpoint: str) -> str:
    repos = stack.sandbox_get("/_sandbox/repositories")
    items = repos["items"] if isinstance(repos, dict) else repos
    return str(next(r["url"] for r in items if r["endpoint"] == endpoint)).rstrip("/")


def send(stack: BenchStack, method: str, url: str, data: Any = None) -> requests.Response:
    """A pre-signed request to the repository whose endpoint name is the URL's host."""
    split = urllib.parse.urlsplit(url)
    target = f"{listener_of(stack, split.hostname or '')}{split.path}?{split.query}"
    res = requests.request(
        method, target, data=data, headers={"Host": split.netloc}, timeout=600, stream=True
    )
    return res


def floor(stack: BenchStack, key: str) -> float:
    """The same bytes through the repositories' endpoints with botocore's signer: a pre-signed
    GET of the object at site-a, streamed into a pre-signed PUT at site-b."""
    a, b = ARTIFACT_STORES["site-a"], ARTIFACT_STORES["site-b"]
    get = presign.presigned_url(
        presign.Location(a["endpoint"], a["bucket"], key, region=a["region"]),
        presign.Keys("demo-site-a", "demo-site-a-secret"),
        expires=600,
    )
    put = presign.presigned_url(
        presign.Location(b["endpoint"], b["bucket"], f"floor/{key}", region=b["region"]),
        presign.Keys("demo-site-b", "demo-site-b-secret"),
        method="PUT",
        expires=600,
    )
    t = time.perf_counter()
    with tempfile.TemporaryFile(dir="/var/tmp") as spool:
        got = send(stack, "GET", get)
        got.raise_for_status()
        for chunk in got.iter_content(1 << 20):
            spool.write(chunk)
        spool.seek(0)
        sent = send(stack, "PUT", put, spool)
        sent.raise_for_status()
    return time.perf_counter() - t


def main() -> None:
    if shutil.which("bwrap") is None:
        print("bench_transfer: skipped (bubblewrap is not installed: steps cannot run)")
        return
    workdir = Path(tempfile.mkdtemp(prefix="bench-transfer-", dir="/var/tmp"))
    stack = BenchStack(workdir, db=DB, redis_db=REDIS, sandbox_args=("--execute",))
    try:
        create_credentials(
            f"http://127.0.0.1:{stack.sandbox_port}", "portal", "portal.multisite.io"
        )
        for mib in SIZES:
            relay(stack, mib)
    finally:
        stack.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def relay(stack: BenchStack, mib: int) -> None:
    """One relay of ``mib`` MiB through the portal, then the floor over the same object."""
    run = stack.submit(WORKFLOW.replace("range(MIB)", f"range({mib})").encode())
    seen = copy_seen_done(stack, run)
    query = "SELECT status, finished_at, message FROM portal_workflowrun WHERE id = %s"
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and stack.sql(query, run)[0][1] is None:
        time.sleep(1)
    status, _, message = stack.sql(query, run)[0]
    if status != "Succeeded":
        raise SystemExit(f"bench_transfer: the run ended {status}: {message}")
    ((submitted, started, finished, outputs),) = stack.sql(
        "SELECT submitted_at, started_at, finished_at, outputs FROM portal_unitrun "
        "WHERE run_id = %s AND name = 'write-copy-site-b'",
        run,
    )
    ((write_outputs,),) = stack.sql(
        "SELECT outputs FROM portal_unitrun WHERE run_id = %s AND name = 'write'", run
    )
    key = next(a for a in write_outputs["artifacts"] if a["name"] == "data")["s3"]["key"]
    moved = next(p["value"] for p in outputs["parameters"] if p["name"] == "bytes")
    observed_s = seen - submitted.timestamp()
    portal_s = (finished - submitted).total_seconds()
    floor_s = floor(stack, key)
    step_s = (finished - started).total_seconds()
    print(f"relay A->B->C of {mib} MiB ({moved} bytes moved by the transfer unit)")
    print(f"  transfer unit (created -> Succeeded in the portal):   {observed_s:6.2f} s")
    print(f"  floor (pre-signed GET -> PUT, botocore signer):        {floor_s:6.2f} s")
    print(f"  ratio: {observed_s / floor_s:.2f}x (target <= {TARGET}x)")
    print(
        f"  (created -> Argo's finishedAt, whole seconds: {portal_s:.2f} s, "
        f"{portal_s / floor_s:.2f}x; the step by Argo's clock: {step_s:.0f} s)"
    )


def copy_seen_done(stack: BenchStack, run: int) -> float:
    """When (this host's clock) the portal first has the run's copy Succeeded."""
    query = "SELECT phase FROM portal_unitrun WHERE run_id = %s AND name = 'write-copy-site-b'"
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        found = stack.sql(query, run)
        if found and found[0][0] in ("Succeeded", "Failed", "Error", "Omitted", "Skipped"):
            return time.time()
        time.sleep(0.05)
    raise SystemExit("bench_transfer: the copy did not end within 900 s")


if __name__ == "__main__":
    main()
