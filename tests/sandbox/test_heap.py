"""The sandbox runs the collector seldom and freezes what it holds (``sandbox.heap``; the
helpers' own tests: ``tests/placement/test_gcpause.py``)."""

from __future__ import annotations

from placement import gcpause
from tests.fixtures_sandbox import SandboxServer


def test_the_server_freezes_what_it_started_with_and_collects_young_objects_seldom(
    sandbox: SandboxServer,
) -> None:
    stats = sandbox.request("GET", "/_sandbox/stats")["heap"]
    assert stats["frozen"] > 0
    assert stats["threshold"][0] == gcpause.YOUNG_THRESHOLD
