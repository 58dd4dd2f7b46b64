"""The launcher the integration stack and the benchmarks share: a process that exits when it
should be running is reported with its name, exit code and log tail."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from tests.stack import Processes, ProcessFailed, launch, logged

STAYS_UP = [sys.executable, "-c", "import time; print('up'); time.sleep(60)"]


def dies(code: int, after_s: float = 0.0) -> list[str]:
    return [
        sys.executable,
        "-c",
        f"import sys, time; time.sleep({after_s}); print('giving up'); sys.exit({code})",
    ]


def test_it_reports_a_process_that_exits_while_starting(tmp_path: Path) -> None:
    with pytest.raises(ProcessFailed) as failed:
        launch("watcher", dies(2), log_path=tmp_path / "watcher.log", ready=logged("never"))
    message = str(failed.value)
    assert "watcher" in message and "exit code 2" in message
    assert "giving up" in message


def test_it_reports_a_process_that_exits_right_after_starting(tmp_path: Path) -> None:
    with pytest.raises(ProcessFailed, match="exited right after starting with exit code 3"):
        launch("worker", dies(3), log_path=tmp_path / "worker.log")


def test_it_reports_at_stop_a_process_that_exited_on_its_own(tmp_path: Path) -> None:
    processes = Processes(tmp_path, env={})
    processes.start("sandbox", STAYS_UP, ready=logged("up"))
    processes.start("watcher", dies(4, after_s=1.0))
    processes.running["watcher"].popen.wait(timeout=30)

    with pytest.raises(ProcessFailed, match=r"watcher .* exited while it should be running"):
        processes.check()
    with pytest.raises(ProcessFailed) as failed:
        processes.stop_all()
    assert "watcher" in str(failed.value) and "exit code 4" in str(failed.value)
    assert "sandbox" not in str(failed.value)  # stopped by us, alive until then
    assert not processes.running


def test_a_process_stopped_on_purpose_is_no_failure(tmp_path: Path) -> None:
    processes = Processes(tmp_path, env={})
    processes.start("worker", STAYS_UP, ready=logged("up"))
    processes.stop("worker", signal.SIGKILL)
    processes.check()
    processes.start("worker", STAYS_UP, ready=logged("up"))  # its log is appended to
    processes.stop_all()
