"""With no Redis and no PostgreSQL (the embedded demo),
advance requests are still coalesced (a mark file created with O_EXCL) and one advance per run
runs at a time (an flock), so a fan-out does not leave hundreds of advances queued in front of
the next run. Real files and a real second process; no database."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from portal.controller import worker
from portal.controller.reconcile import Result
from portal.controller.workqueue import claims

HOLD = (
    "import fcntl, sys, time\n"
    "f = open(sys.argv[1], 'a')\n"
    "fcntl.flock(f.fileno(), fcntl.LOCK_EX)\n"
    "print('held', flush=True)\n"
    "time.sleep(600)\n"
)


@pytest.fixture
def embedded(settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    settings.REDIS_URL = ""
    settings.VAR_DIR = tmp_path
    monkeypatch.setattr(claims, "connection", SimpleNamespace(vendor="sqlite"))
    return tmp_path


@pytest.fixture
def holder(embedded: Path) -> Iterator[subprocess.Popen[str]]:
    """Another worker process holding run 7's advance lock."""
    path = embedded / "advance-locks" / "7"
    path.parent.mkdir(parents=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    yield proc
    proc.kill()
    proc.wait()


def test_requests_for_a_queued_advance_are_coalesced_without_redis(embedded: Path) -> None:
    assert claims.should_enqueue(7)
    assert not claims.should_enqueue(7)
    assert not claims.should_enqueue(7)
    assert claims.should_enqueue(8)  # another run has its own mark
    claims.started(7)  # a request after the task read the units needs a task of its own
    assert claims.should_enqueue(7)


def test_a_mark_whose_task_never_ran_expires(embedded: Path) -> None:
    assert claims.should_enqueue(7)
    old = time.time() - claims._MARK_TTL_S - 5
    os.utime(embedded / "advance-queued" / "7", (old, old))
    assert claims.should_enqueue(7)  # the lost task's mark no longer blocks the run
    assert not claims.should_enqueue(7)


def test_a_locked_run_is_tried_again_later_and_not_advanced_twice(
    holder: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(worker, "reconcile", lambda run_id: calls.append(run_id) or Result())
    assert worker.reconcile_once(7) == (Result(requeue_after=worker.LOCKED_RETRY_S), False)
    assert calls == []
    # The holder dies (killed, out of memory): the kernel drops its lock with it.
    holder.kill()
    holder.wait()
    assert worker.reconcile_once(7) == (Result(), False)
    assert calls == [7]


def test_the_lock_is_free_again_after_the_advance(embedded: Path) -> None:
    with claims.run_lock(7) as got:
        assert got
        with claims.run_lock(7) as again:
            assert not again  # one advance per run at a time, even in one process
    with claims.run_lock(7) as got:
        assert got
