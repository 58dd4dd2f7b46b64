"""Argo's own example workflows really run on the executing sandbox, each created directly on a
member, and reach the outcome tests/argo_examples.yaml expects (see the table in
sandbox/README.md)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures_sandbox import ARGO_EXAMPLES, SandboxServer
from tests.sandbox.execution.conftest import DONE, NS, Member, needs_bwrap

EXPECTED_FILE = Path(__file__).resolve().parents[2] / "argo_examples.yaml"
EXPECTED: dict[str, dict[str, Any]] = yaml.safe_load(EXPECTED_FILE.read_text())["examples"]
RUN = sorted(name for name, e in EXPECTED.items() if e.get("run", True))
# All examples run at once; a generous bound for two shared cores (never asserted on).
PATIENCE = 240.0

pytestmark = needs_bwrap


@pytest.fixture(scope="module")
def outcomes(executing: SandboxServer) -> dict[str, dict[str, Any]]:
    """Every runnable example, created at once on site-b; their final statuses by file."""
    member = Member(executing, "site-b", Path())
    names: dict[str, str] = {}
    for example in RUN:
        wf = yaml.safe_load((ARGO_EXAMPLES / example).read_text())
        names[member.create(wf)] = example
    statuses: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline and len(statuses) < len(names):
        for wf in executing.member_workflows("site-b"):
            name = wf["metadata"]["name"]
            status = wf.get("status") or {}
            if name not in names:
                continue
            if status.get("phase") in DONE:
                for n in (status.get("nodes") or {}).values():
                    if n["type"] == "Pod" and n["phase"] in ("Failed", "Error"):
                        n["log"] = member.log(member.pod_name(name, n), tailLines=5)
                statuses[names[name]] = status
            elif any(
                n["type"] == "Suspend" and n["phase"] == "Running"
                for n in (status.get("nodes") or {}).values()
            ):
                executing.resume(NS, name)  # as `argo resume`
        time.sleep(0.5)
    return statuses


def test_every_example_has_an_expected_outcome() -> None:
    files = {p.name for p in ARGO_EXAMPLES.glob("*.yaml")}
    assert files == set(EXPECTED)
    for name, e in EXPECTED.items():
        assert e.get("why"), name
        assert e.get("run", True) is False or e.get("expect") in DONE, name
    agree = sum(1 for n in RUN if "sandbox" not in EXPECTED[n])
    assert agree / len(RUN) >= 0.9


@pytest.mark.parametrize("example", RUN)
def test_example_reaches_its_outcome(example: str, outcomes: dict[str, dict[str, Any]]) -> None:
    expected = EXPECTED[example]
    want = expected.get("sandbox", expected["expect"])
    status = outcomes.get(example)
    assert status is not None, f"{example} did not finish"
    failed = {
        n["displayName"]: (n.get("message"), n.get("log"))
        for n in (status.get("nodes") or {}).values()
        if "log" in n
    }
    pods = [n for n in (status.get("nodes") or {}).values() if n["type"] == "Pod"]
    if expected.get("random") and status["phase"] == "Failed":
        # Every attempt drew a failing exit: real Argo ends Failed as well.
        assert pods and all(n["message"] == "Error (exit code 1)" for n in pods)
        return
    assert status["phase"] == want, (status.get("message"), expected["why"], failed)
    simulated = [
        n["displayName"]
        for n in (status.get("nodes") or {}).values()
        if "simulated" in (n.get("message") or "")
    ]
    assert not simulated, f"{example}: steps were simulated, not run: {simulated}"
