"""Fixtures for the tests of real execution: a sandbox started with `--execute`, and Workflows
created directly on a member (no portal, no Karmada)."""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sandbox.argo.expr import fnv32a
from tests.fixtures_sandbox import SandboxServer, start_sandbox

NS = "default"
DONE = ("Succeeded", "Failed", "Error")

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed"
)


@dataclass
class Member:
    """One member cluster of an executing sandbox."""

    server: SandboxServer
    site: str
    data_dir: Path

    def create(self, wf: dict[str, Any]) -> str:
        meta = wf.setdefault("metadata", {})
        prefix = meta.pop("generateName", None) or f"{meta.get('name', 'wf')}-"
        meta["name"] = f"{prefix}{uuid.uuid4().hex[:6]}"
        meta.setdefault("namespace", NS)
        self.server.request("POST", f"/_sandbox/members/{self.site}/workflows", wf)
        return str(meta["name"])

    def put(self, obj: dict[str, Any]) -> None:
        obj.setdefault("metadata", {}).setdefault("namespace", NS)
        self.server.request("POST", f"/_sandbox/members/{self.site}/objects", obj)

    def status(self, name: str) -> dict[str, Any]:
        for wf in self.server.member_workflows(self.site):
            if wf["metadata"]["name"] == name:
                return dict(wf.get("status") or {})
        raise AssertionError(f"{name} is not on {self.site}")

    def wait(self, name: str, timeout: float = 60) -> dict[str, Any]:
        return self.server.wait_for(
            lambda: (s := self.status(name)) and s.get("phase") in DONE and s,
            timeout=timeout,
            interval=0.2,
            what=f"{name} to finish",
        )

    @staticmethod
    def pod_name(workflow: str, node: dict[str, Any]) -> str:
        """The pod's name as Argo's default (v2) names it (workflow/util/pod_name.go)."""
        if node["name"] == workflow:
            return workflow
        return f"{workflow}-{node['templateName']}-{fnv32a(node['name'])}"

    def log(self, pod: str, **query: Any) -> str:
        qs = "&".join(f"{k}={v}" for k, v in query.items())
        path = f"/_sandbox/members/{self.site}/pods/{NS}/{pod}/log" + (f"?{qs}" if qs else "")
        return str(self.server.request("GET", path) or "")

    def repository(self) -> dict[str, Any]:
        """This site's entry of `/_sandbox/repositories`."""
        return self.server.repositories()[self.site]

    def s3(self, access_key: str, secret_key: str) -> Any:
        """A botocore S3 client of this site's repository: requests go to its listener, with
        the repository's endpoint name as Host (the listener as the client's proxy)."""
        return s3_client(self.repository(), access_key, secret_key)

    def create_bucket(self, bucket: str) -> None:
        """A bucket made at this site's repository with the site's own keys (its credential
        Secret, put on this member)."""
        name = f"{self.site}-artifacts-credentials"
        self.put(secret(name, accessKey=f"ak-{self.site}", secretKey=f"sk-{self.site}"))
        client = self.s3(f"ak-{self.site}", f"sk-{self.site}")
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
            client.create_bucket(Bucket=bucket)

    @staticmethod
    def pods(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {n["displayName"]: n for n in status["nodes"].values() if n["type"] == "Pod"}


def s3_client(repository: dict[str, Any], access_key: str, secret_key: str, **config: Any) -> Any:
    import botocore.session
    from botocore.config import Config

    session = botocore.session.get_session()
    return session.create_client(
        "s3",
        region_name=repository["region"],
        endpoint_url=f"http://{repository['endpoint']}",
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        config=Config(
            proxies={"http": repository["url"]},
            s3={"addressing_style": "path"},
            retries={"max_attempts": 1},
            signature_version="s3v4",
            **config,
        ),
    )


def secret(name: str, **data: str) -> dict[str, Any]:
    import base64

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=1)[:4000]


@pytest.fixture(scope="session")
def executing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxServer]:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    work = tmp_path_factory.mktemp("executing")
    # Steps run under their own user ids: their folders must be reachable by others, which
    # pytest's temp folders (0700) are not.
    data = Path(tempfile.mkdtemp(prefix="sandbox-test-data-"))
    data.chmod(0o755)
    server = start_sandbox(work, extra_args=["--execute", "--data-dir", str(data)])
    server.data_dir = data  # type: ignore[attr-defined]
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


@pytest.fixture
def site_b(executing: SandboxServer) -> Member:
    return Member(executing, "site-b", executing.data_dir)  # type: ignore[attr-defined]


@pytest.fixture
def site_a(executing: SandboxServer) -> Member:
    return Member(executing, "site-a", executing.data_dir)  # type: ignore[attr-defined]


@pytest.fixture
def site_c(executing: SandboxServer) -> Member:
    return Member(executing, "site-c", executing.data_dir)  # type: ignore[attr-defined]
