"""``make examples``: Argo's example Workflows through the portal end to end.

Starts a stack of its own (a fresh PostgreSQL database, the sandbox fleet with ``--execute`` so
steps really run, a Celery worker, the watcher, gunicorn), submits each example over REST
(``POST /api/v1/runs/``), waits for its run to end and prints a table: example, expected
outcome, portal outcome, units and their sites, agree or not, and why not.

Expected outcomes come from ``tests/argo_examples.yaml``: ``expect`` is what real Argo reaches
with this fleet's means (the member-level data of the sandbox work); ``portal`` where the
portal's outcome legitimately differs (refused at preview with a field path, say), with ``why``.
Examples marked ``run: false`` are listed, not run.

A second table covers Argo's own end-to-end workflows (``e2e/functional``,
``e2e/expectedfailures``) with the outcome Argo's Go e2e tests assert, from
``tests/argo_e2e.yaml``; ``--set examples|e2e|all`` picks the sets (default: both).

Run: ``.venv/bin/python tests/examples_runner.py [--only NAME ...] [--timeout S]``
(PostgreSQL on its standard port or ``EXAMPLES_PG``; its own ``redis-server`` unless
``EXAMPLES_REDIS`` names one).
Exits 1 when an example that ran disagrees and ``--strict`` is given.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from placement.demo import create_credentials  # noqa: E402 - (the same)
from tests.stack import (  # noqa: E402 - importable once the repository root is on the path
    REFERENCE,
    SHIPPED_RBAC,
    WATCHER_READY,
    Process,
    Processes,
    ProcessFailed,
    answers,
    await_ready,
    free_port,
    gunicorn_argv,
    logged,
    sandbox_argv,
    spawn,
    watcher_argv,
    worker_argv,
)

EXAMPLES = REFERENCE / "argo" / "examples"
EXPECTATIONS = ROOT / "tests" / "argo_examples.yaml"
# Argo's end-to-end workflows, and the outcome its Go e2e tests assert for each.
E2E = REFERENCE / "argo" / "e2e"
E2E_FOLDERS = ("functional", "expectedfailures")
E2E_EXPECTATIONS = ROOT / "tests" / "argo_e2e.yaml"
PG = os.environ.get("EXAMPLES_PG", "postgres://postgres@127.0.0.1:5432")
# A Redis of its own by default: a Redis database shared with other stacks shares Celery's
# queue too, and their workers would take this stack's tasks.
REDIS = os.environ.get("EXAMPLES_REDIS", "")
FINAL = {"Succeeded", "Failed", "Error", "Stopped"}


@dataclass
class Row:
    example: str
    expected: str
    outcome: str
    units: str = ""
    why: str = ""
    random: bool = False
    any_failure: bool = False  # only "it fails" is asserted (Failed or Error agree)

    @property
    def agree(self) -> str:
        if self.expected == "not run":
            return "-"
        if self.random and self.outcome in ("Succeeded", "Failed"):
            return "yes"  # it may fail on real Argo too (every attempt of a random exit failed)
        if self.any_failure and self.outcome in ("Failed", "Error"):
            return "yes"
        return "yes" if self.outcome == self.expected else "NO"


class Stack:
    """Sandbox (executing), worker with beat, watcher, web: started fresh, stopped at the end."""

    def __init__(self, workdir: Path, time_scale: float) -> None:
        self.db = f"portal_examples_{os.getpid()}"
        self.sandbox_port = free_port()
        self.web_port = free_port()
        self.kubeconfig = workdir / "kubeconfig"
        self.processes = Processes(workdir, dict(os.environ))
        self.env = self._environment(workdir, self._redis_url())
        self.processes.env = self.env
        try:
            # The sandbox starts while the database is made (it needs none).
            sandbox = self._spawn_sandbox(workdir, time_scale)
            self.processes.running["sandbox"] = sandbox
            self._dropdb()
            subprocess.run(["createdb", *self._pg_args(), self.db], check=True)
            self._manage("migrate", "-v0")
            await_ready(
                [(sandbox, answers(f"http://127.0.0.1:{self.sandbox_port}/_sandbox/ready"))]
            )
            out = self._manage("load_demo", "--sandbox", f"http://127.0.0.1:{self.sandbox_port}")
            self.token = out.rsplit("API token: ", 1)[1].strip()
            # The demo sites' repositories are in the inventory: steps reading another site's
            # outputs need its credential Secret, which Karmada propagates (as run_demo does).
            create_credentials(
                f"http://127.0.0.1:{self.sandbox_port}",
                self.env.get("KARMADA_NAMESPACE", "portal"),
                self.env.get("PORTAL_LABEL_DOMAIN", "portal.multisite.io"),
            )
            self._start_control_plane(workdir)
        except BaseException:
            with contextlib.suppress(ProcessFailed):
                self.stop()
            raise

    def _redis_url(self) -> str:
        """REDIS, or a Redis server of its own when none is given."""
        if REDIS:
            return REDIS
        port = free_port()
        self.processes.start(
            "redis",
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""],
            ready=logged("Ready to accept connections"),
        )
        return f"redis://127.0.0.1:{port}/0"

    def _environment(self, workdir: Path, redis_url: str) -> dict[str, str]:
        return {
            **os.environ,
            "DATABASE_URL": f"{PG}/{self.db}",
            "REDIS_URL": redis_url,
            "KARMADA_KUBECONFIG": str(self.kubeconfig),
            "SECURE_SSL_REDIRECT": "0",
            "STATIC_MANIFEST": "0",
            "PORTAL_RESYNC_SECONDS": "10",
            "PORTAL_VAR_DIR": str(workdir / "var"),
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "LOG_LEVEL": "WARNING",
            # What is measured is the control plane, not the submission limit.
            "PORTAL_SUBMISSIONS_PER_PROJECT": "0",
            "SECRET_KEY": os.environ.get("SECRET_KEY", "examples-only-not-a-secret"),
            "DEBUG": os.environ.get("DEBUG", "1"),
        }

    def _spawn_sandbox(self, workdir: Path, time_scale: float) -> Process:
        return spawn(
            "sandbox",
            # The portal as its ServiceAccount under the shipped RBAC (self.kubeconfig),
            # as in the demo and the test stacks.
            sandbox_argv(
                self.sandbox_port,
                workdir / "admin.kubeconfig",
                time_scale,
                "--execute",
                "--portal-kubeconfig",
                str(self.kubeconfig),
                *SHIPPED_RBAC,
            ),
            log_path=workdir / "sandbox.log",
            env=self.env,
        )

    def _start_control_plane(self, workdir: Path) -> None:
        # Side by side: their start-ups (imports, mostly) overlap.
        self.processes.start_together(
            [
                (
                    "worker",
                    worker_argv(concurrency=2, loglevel="warning", beat_schedule=workdir / "beat"),
                    None,
                ),
                ("watcher", watcher_argv(), logged(WATCHER_READY)),
                (
                    "web",
                    gunicorn_argv(self.web_port, "--workers", "2"),
                    answers(f"http://127.0.0.1:{self.web_port}/healthz"),
                ),
            ]
        )

    def _pg_args(self) -> list[str]:
        # PG is postgres://user@host:port
        rest = PG.split("://", 1)[1]
        user, _, hostport = rest.rpartition("@")
        host, _, port = hostport.partition(":")
        return ["-h", host or "127.0.0.1", "-p", port or "5432", "-U", user or "postgres"]

    def _dropdb(self) -> None:
        subprocess.run(
            ["dropdb", "--if-exists", *self._pg_args(), self.db],
            check=False,
            stderr=subprocess.DEVNULL,
        )

    def _manage(self, *argv: str) -> str:
        return subprocess.run(
            [sys.executable, "manage.py", *argv],
            cwd=ROOT,
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    def api(self, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.web_port}{path}",
            data=body,
            method=method,
            headers={"Authorization": f"Token {self.token}", "Content-Type": "application/yaml"},
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, json.load(resp)
        except urllib.error.HTTPError as exc:
            try:
                return exc.code, json.load(exc)
            except ValueError:
                return exc.code, {}

    def stop(self) -> None:
        try:
            self.processes.stop_all()
        finally:
            self._dropdb()


def expectations() -> dict[str, dict[str, Any]]:
    data = yaml.safe_load(EXPECTATIONS.read_text()) or {}
    return dict(data.get("examples") or {})


def e2e_cases() -> list[tuple[str, Path, dict[str, Any] | None]]:
    """Argo's e2e workflows: (name, file, expectation). A file that is a link into Argo's
    examples (stored as the link's text) is that example, with its expectation."""
    data = yaml.safe_load(E2E_EXPECTATIONS.read_text()) or {}
    expect = dict(data.get("e2e") or {})
    examples = expectations()
    cases: list[tuple[str, Path, dict[str, Any] | None]] = []
    for folder in E2E_FOLDERS:
        for path in sorted((E2E / folder).glob("*.yaml")):
            name = f"{folder}/{path.name}"
            text = path.read_text().strip()
            entry = expect.get(name)
            if text.startswith("../") and "\n" not in text:
                path = EXAMPLES / Path(text).name
                entry = examples.get(path.name)
                if not path.exists():
                    entry = {"run": False, "why": f"a link to {text}, not in the reference set"}
            elif entry is not None and entry.get("source") == "folder" and folder != "functional":
                entry = dict(entry, any_failure=True)
            cases.append((name, path, entry))
    return cases


def expected_of(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "Succeeded"
    if entry.get("run") is False:
        return "not run"
    return str(entry.get("portal") or entry.get("sandbox") or entry.get("expect") or "Succeeded")


POLL_S = 0.5


def run_one(
    stack: Stack, path: Path, entry: dict[str, Any] | None, timeout: float, name: str = ""
) -> Row:
    expected = expected_of(entry)
    row = Row(
        name or path.name,
        expected,
        "not run",
        why=str((entry or {}).get("why") or ""),
        random=bool((entry or {}).get("random")),
        any_failure=bool((entry or {}).get("any_failure")),
    )
    if expected == "not run":
        return row
    code, body = stack.api("POST", "/api/v1/runs/?project=eo-demo", path.read_bytes())
    if code != 201:
        errors = body.get("errors") if isinstance(body, dict) else None
        first = errors[0] if errors else {"path": "", "message": str(body)[:200]}
        row.outcome = "Refused"
        row.why = f"{first.get('path')}: {first.get('message')}"[:300]
        return row
    run_id = body["id"]
    deadline = time.monotonic() + timeout
    status = body.get("status", "Pending")
    resumed: set[str] = set()
    while status not in FINAL and time.monotonic() < deadline:
        # One GET of the run (and of its running units' details) per poll: cheap next to what
        # an example costs, and a run's end is seen within half a second, not two.
        time.sleep(POLL_S)
        stack.processes.check()
        _, body = stack.api("GET", f"/api/v1/runs/{run_id}/")
        status = body.get("status", status)
        if status not in FINAL:
            resume_waiting(stack, run_id, body, resumed)
    units = body.get("units") or []
    row.units = " ".join(f"{u['name']}@{u.get('site') or '?'}" for u in units)[:200]
    if status not in FINAL:
        row.outcome = f"{status} (timeout)"
        stack.api("POST", f"/api/v1/runs/{run_id}/stop/")
    else:
        row.outcome = status
    if row.agree == "NO":
        bad = [u for u in units if u.get("phase") in ("Failed", "Error")]
        row.why = (
            "; ".join(f"{u['name']}: {u.get('message') or u['phase']}" for u in bad)
            or body.get("message")
            or row.why
        )[:300]
    return row


def resume_waiting(stack: Stack, run_id: int, body: dict[str, Any], resumed: set[str]) -> None:
    """What a user running the example does (``argo resume``, once per suspension): a run held
    by ``spec.suspend`` is resumed, and each step the API shows waiting for approval is
    resumed once (a suspend with a ``duration`` that is resumed early only ends sooner)."""
    if body.get("suspended") and "" not in resumed:
        resumed.add("")
        stack.api("POST", f"/api/v1/runs/{run_id}/resume/", b"{}")
    for unit in body.get("units") or []:
        name = unit.get("name")
        if unit.get("phase") != "Running" or name in resumed:
            continue
        _, detail = stack.api("GET", f"/api/v1/runs/{run_id}/units/{quote(name, safe='')}/")
        if isinstance(detail, dict) and detail.get("suspended"):
            resumed.add(name)
            stack.api("POST", f"/api/v1/runs/{run_id}/resume/", json.dumps({"node": name}).encode())


def table(rows: list[Row], what: str = "examples") -> str:
    head = ("example", "expected", "portal", "agree", "units@sites", "why")
    lines = [head] + [(r.example, r.expected, r.outcome, r.agree, r.units, r.why) for r in rows]
    widths = [min(max(len(str(x[i])) for x in lines), 48) for i in range(4)]
    out = []
    for line in lines:
        cells = [str(c)[:48].ljust(w) for c, w in zip(line[:4], widths, strict=True)]
        out.append("  ".join([*cells, str(line[4]), str(line[5])]))
    ran = [r for r in rows if r.agree != "-"]
    agree = sum(1 for r in ran if r.agree == "yes")
    pct = 100.0 * agree / len(ran) if ran else 100.0
    out.append(f"\n{agree}/{len(ran)} {what} that ran reach Argo's outcome ({pct:.1f} %)")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", help="example file names (default: all)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per example")
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--strict", action="store_true", help="exit 1 on any disagreement")
    p.add_argument(
        "--set",
        choices=("all", "examples", "e2e"),
        default="all",
        help="the reference examples, the e2e workflows (functional/, expectedfailures/) or both",
    )
    args = p.parse_args(argv)
    expect = expectations()
    sets: dict[str, list[tuple[str, Path, dict[str, Any] | None]]] = {}
    if args.set in ("all", "examples"):
        sets["examples"] = [
            (x.name, x, expect.get(x.name)) for x in sorted(EXAMPLES.glob("*.yaml"))
        ]
    if args.set in ("all", "e2e"):
        sets["e2e workflows"] = e2e_cases()
    if args.only:
        only = set(args.only)
        sets = {k: [c for c in v if c[0] in only or c[1].name in only] for k, v in sets.items()}
    tables: dict[str, list[Row]] = {k: [] for k in sets}
    with tempfile.TemporaryDirectory(prefix="portal-examples-") as tmp:
        stack = Stack(Path(tmp), args.time_scale)
        try:
            for what, cases in sets.items():
                for name, path, entry in cases:
                    row = run_one(stack, path, entry, args.timeout, name)
                    tables[what].append(row)
                    print(f"{row.example}: {row.outcome} (expected {row.expected})", flush=True)
        finally:
            stack.stop()
    for what, rows in tables.items():
        print(f"\n## {what}\n")
        print(table(rows, what))
    everything = [r for rows in tables.values() for r in rows]
    return 1 if args.strict and any(r.agree == "NO" for r in everything) else 0


if __name__ == "__main__":
    raise SystemExit(main())
