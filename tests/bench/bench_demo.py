"""The embedded demo keeps up: ``manage.py run_demo`` with no servers (SQLite, the
filesystem broker of ``portal/broker.py``, the sandbox fleet), a ``--items``-item fan-out
(default 200), then a one-step run submitted the moment the fan-out ends.

Prints:
* the fan-out, from its REST 201 to Succeeded;
* the messages still in the broker's queue when the fan-out ended;
* the one-step run behind it, from the fan-out's end (its submission) to Succeeded: target
  ≤ 10 s;
* the floor: the same one-step run on the idle demo before the fan-out.

Run: ``.venv/bin/python tests/bench/bench_demo.py [--items N] [--poll SECONDS]``. ``--poll``
sets ``CELERY_FILESYSTEM_POLL_SECONDS`` (default: the settings' 0.05 s; 1.0 is kombu's default,
what the demo polled before). Everything lives in a temporary directory and stops at the end;
``DATABASE_URL``, ``REDIS_URL`` and ``CELERY_BROKER_URL`` of the shell are ignored.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.stack import free_port  # noqa: E402

TERMINAL = {"Succeeded", "Failed", "Error", "Stopped"}


def fan_out_body(items: int) -> bytes:
    values = ", ".join(f'"t{i:04d}"' for i in range(items))
    return f"""apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  generateName: demo-fan-out-
spec:
  entrypoint: main
  templates:
    - name: main
      dag:
        tasks:
          - name: tile
            template: step
            arguments: {{parameters: [{{name: tile, value: "{{{{item}}}}"}}]}}
            withItems: [{values}]
    - name: step
      inputs: {{parameters: [{{name: tile}}]}}
      container:
        image: alpine:3.20
        command: [sh, -c, "echo {{{{inputs.parameters.tile}}}}"]
        resources: {{requests: {{cpu: 100m, memory: 64Mi}}}}
""".encode()


ONE_STEP = b"""apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  generateName: one-step-
spec:
  entrypoint: hello
  templates:
    - name: hello
      container:
        image: alpine:3.20
        command: [sh, -c, "echo hello"]
"""


class Demo:
    def __init__(self, var: Path, poll: float | None) -> None:
        self.var = var
        self.port = free_port()
        env = {**os.environ, "PORTAL_VAR_DIR": str(var), "DEBUG": "1"}
        for name in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "KARMADA_KUBECONFIG"):
            env.pop(name, None)  # the embedded demo, whatever the shell points at
        if poll is not None:
            env["CELERY_FILESYSTEM_POLL_SECONDS"] = str(poll)
        self.log = var / "run_demo.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "manage.py", "run_demo", "--port", str(self.port)],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 300
        while "The portal is at" not in self.log.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"the demo did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.5)
        found = re.search(r"API token: (\w+)", self.log.read_text())
        assert found, "load_demo printed no API token"
        self.token = found.group(1)

    def api(self, path: str, body: bytes | None = None) -> Any:
        request = urllib.request.Request(
            self.base + path,
            data=body,
            headers={
                "Authorization": f"Token {self.token}",
                "Content-Type": "application/yaml",
                "Accept": "application/json",
            },
            method="POST" if body is not None else "GET",
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            return json.loads(answer.read())

    def submit(self, body: bytes) -> int:
        return int(self.api("/api/v1/runs/", body)["id"])

    def until_finished(self, run_id: int, timeout: float = 1800) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = str(self.api(f"/api/v1/runs/{run_id}/")["status"])
            if status in TERMINAL:
                return status
            time.sleep(0.1)
        raise SystemExit(f"run {run_id} not finished after {timeout:.0f} s (logs: {self.var})")

    def one_step(self) -> tuple[float, str]:
        t0 = time.perf_counter()
        status = self.until_finished(self.submit(ONE_STEP))
        return time.perf_counter() - t0, status

    def queued(self) -> int:
        """Messages waiting in the broker's queue folder."""
        return sum(n.endswith(".msg") for n in os.listdir(self.var / "celery-queue"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)  # run_demo stops everything it started
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=200)
    ap.add_argument("--poll", type=float, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the demo's directory (its logs)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-demo-")
    demo = Demo(Path(tmp), args.poll)
    try:
        demo.one_step()  # warm-up: imports, the first connections
        floor, floor_status = demo.one_step()
        t0 = time.perf_counter()
        fan_id = demo.submit(fan_out_body(args.items))
        fan_status = demo.until_finished(fan_id)
        fan_seconds = time.perf_counter() - t0
        queued = demo.queued()
        behind_started = time.time()
        behind, behind_status = demo.one_step()
    finally:
        demo.stop()
        if args.keep:
            print(f"the demo's directory (logs in logs/): {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    poll = args.poll if args.poll is not None else 0.05
    print(f"embedded demo (SQLite, filesystem broker polled every {poll:g} s), {args.items} items")
    print(f"  fan-out, 201 to {fan_status:<9}       : {fan_seconds:7.1f} s")
    print(f"  messages queued at the fan-out's end  : {queued:7d}")
    print(f"  one-step run after it, to {behind_status:<9} : {behind:7.2f} s   target ≤ 10 s")
    print(f"    floor: the same on the idle demo    : {floor:7.2f} s   ({floor_status})")
    # run_demo executes the steps (isolated by bubblewrap) when bwrap is installed.
    how = "executed (bubblewrap)" if shutil.which("bwrap") else "simulated (no bubblewrap)"
    print(f"  steps {how}")
    if args.keep:
        at = time.strftime("%H:%M:%S", time.localtime(behind_started))
        print(f"  the run behind it was submitted at {at} (see the logs)")


if __name__ == "__main__":
    main()
