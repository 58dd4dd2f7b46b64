"""What a step meets at a member: an output parameter bound, memory and ephemeral storage
limits (its own, else the member's LimitRange defaults) and a bucket quota."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox.fleet import DEMO_FLEET
from sandbox.pod import PodSpec
from tests.fixtures_sandbox import start_sandbox
from tests.sandbox.execution.conftest import Member, needs_bwrap
from tests.sandbox.execution.test_execution import sh, wf

pytestmark = needs_bwrap

# Allocates and touches `mib` MiB, then says so.
HOG = (
    'python3 -c "x = bytearray({mib} * 2**20)\n'
    "for i in range(0, len(x), 4096): x[i] = 1\n"
    "print('held')\""
)


def limited(name: str, script: str, **limits: str) -> dict[str, Any]:
    t = sh(name, script)
    t["container"]["resources"] = {"limits": dict(limits)}
    return t


def test_a_parameter_over_the_limit_fails_the_step_and_stays_out_of_the_status(
    site_b: Member,
) -> None:
    t = sh("main", "head -c 300000 /dev/zero | tr '\\0' a > /tmp/p; echo -n ok > /tmp/q")
    t["outputs"] = {
        "parameters": [
            {"name": "big", "valueFrom": {"path": "/tmp/p"}},
            {"name": "small", "valueFrom": {"path": "/tmp/q"}},
        ]
    }
    status = site_b.wait(site_b.create(wf(t)))
    (node,) = site_b.pods(status).values()
    assert node["phase"] == "Error"
    assert node["message"] == (
        "failed to get output parameter big: the value is 300000 bytes, more than the 262144 "
        "bytes (256Ki) an output parameter may hold; pass large values as an output artifact"
    )
    params = {p["name"]: p["value"] for p in node["outputs"].get("parameters") or []}
    assert params == {"small": "ok"}
    assert len(json.dumps(status)) < 20_000


def test_a_step_past_its_memory_limit_is_oom_killed(site_b: Member) -> None:
    status = site_b.wait(site_b.create(wf(limited("main", HOG.format(mib=200), memory="64Mi"))))
    (node,) = site_b.pods(status).values()
    assert node["phase"] == "Failed"
    assert node["message"] == "main: OOMKilled (exit code 137)"
    assert node["outputs"]["exitCode"] == "137"
    assert "held" not in node["outputs"]["result"]


def test_a_step_within_its_memory_limit_runs(site_b: Member) -> None:
    status = site_b.wait(site_b.create(wf(limited("main", HOG.format(mib=40), memory="256Mi"))))
    assert status["phase"] == "Succeeded", status
    (node,) = site_b.pods(status).values()
    assert node["outputs"]["result"] == "held"


def test_a_pod_past_its_ephemeral_storage_limit_is_evicted(site_b: Member) -> None:
    script = "head -c 20000000 /dev/urandom > /tmp/fill; sleep 100000; echo survived"
    t = limited("main", script, **{"ephemeral-storage": "8Mi"})
    status = site_b.wait(site_b.create(wf(t)))
    (node,) = site_b.pods(status).values()
    assert node["phase"] == "Failed"
    # pkg/kubelet/eviction/helpers.go, podEphemeralStorageMessageFmt (the sleep is 100 s)
    assert node["message"] == (
        "Pod ephemeral local storage usage exceeds the total limit of containers 8Mi. "
    )
    assert "survived" not in node["outputs"]["result"]


def test_a_pod_that_fills_its_disk_and_ends_at_once_is_evicted_too(site_b: Member) -> None:
    t = limited("main", "head -c 20000000 /dev/urandom > /tmp/fill", **{"ephemeral-storage": "8Mi"})
    status = site_b.wait(site_b.create(wf(t)))
    (node,) = site_b.pods(status).values()
    assert node["message"].startswith("Pod ephemeral local storage usage exceeds")


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Member]:
    """A fleet whose site-b has small LimitRange defaults and a 1 MiB bucket."""
    fleet = yaml.safe_load(DEMO_FLEET.read_text())
    site = next(s for s in fleet["sites"] if s["name"] == "site-b")
    site["limitRange"] = {"default": {"memory": "64Mi", "ephemeral-storage": "8Mi"}}
    site["artifacts"]["quota"] = "1Mi"
    fleet["execution"]["evictionIntervalSeconds"] = 0.2
    work = tmp_path_factory.mktemp("tight")
    (work / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    data = Path(tempfile.mkdtemp(prefix="sandbox-test-data-"))
    data.chmod(0o755)
    server = start_sandbox(
        work, extra_args=["--execute", "--data-dir", str(data), "--fleet", str(work / "fleet.yaml")]
    )
    try:
        yield Member(server, "site-b", data)
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


def test_the_limit_range_default_memory_limit_applies(tight: Member) -> None:
    status = tight.wait(tight.create(wf(sh("main", HOG.format(mib=200)))))
    (node,) = tight.pods(status).values()
    assert node["message"] == "main: OOMKilled (exit code 137)"


def test_a_containers_own_limit_wins_over_the_default(tight: Member) -> None:
    status = tight.wait(tight.create(wf(limited("main", HOG.format(mib=100), memory="512Mi"))))
    assert status["phase"] == "Succeeded", status


def test_the_limit_range_default_storage_limit_applies(tight: Member) -> None:
    t = sh("main", "head -c 20000000 /dev/urandom > /tmp/fill; sleep 100000")
    status = tight.wait(tight.create(wf(t)))
    (node,) = tight.pods(status).values()
    assert node["message"] == (
        "Pod ephemeral local storage usage exceeds the total limit of containers 8Mi. "
    )


def test_a_write_past_the_bucket_quota_is_refused(tight: Member) -> None:
    def writer(size: int) -> dict[str, Any]:
        t = limited(
            "main",
            f"head -c {size} /dev/urandom > /tmp/out",
            **{"ephemeral-storage": "100Mi"},
        )
        t["outputs"] = {"artifacts": [{"name": "o", "path": "/tmp/out", "archive": {"none": {}}}]}
        return t

    small = tight.wait(tight.create(wf(writer(100_000))))
    assert small["phase"] == "Succeeded", small
    status = tight.wait(tight.create(wf(writer(2_000_000))))
    (node,) = tight.pods(status).values()
    assert node["phase"] == "Error"
    assert node["message"] == (
        "failed to save outputs: /tmp/out: Bucket quota exceeded (XMinioAdminBucketQuotaExceeded)"
    )
    bucket = tight.data_dir / "buckets" / "site-b-artifacts"
    held = sum(f.stat().st_size for f in bucket.rglob("*") if f.is_file())
    assert held <= 2**20


def test_without_a_memory_cgroup_the_poller_oom_kills_the_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where cgroups cannot be written, the pod's resident memory is polled instead."""
    import asyncio

    from sandbox import executor, limits

    monkeypatch.setattr(limits.MemoryCgroup, "create", classmethod(lambda cls, limit: None))
    root = Path(tempfile.mkdtemp(prefix="sandbox-test-pod-"))
    root.chmod(0o755)
    try:
        hog = "x = bytearray(200 * 2**20)\nfor i in range(0, len(x), 4096): x[i] = 1\nprint('held')"
        spec = PodSpec(
            root=root / "pod",
            argv=["python3", "-c", hog],
            env={},
            mounts=[],
            workdir="/",
            uid=299_999,
            memory=64 * 2**20,
        )
        result = asyncio.run(executor.run_pod(spec))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert (result.killed, result.exit_code) == ("oom", 137)
    assert b"held" not in result.stdout
