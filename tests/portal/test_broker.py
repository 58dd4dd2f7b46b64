"""The embedded demo's broker (portal/broker.py) never hands a consumer a half-written message,
so its worker can poll every 50 ms.

Real processes write while others read, through kombu's own Connection and queues; nothing is
mocked. The stock kombu filesystem transport fails ``test_a_fast_reader_never_meets_a_half_
written_message`` (it creates the file, then writes it).
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path
from queue import Empty
from typing import Any

import pytest
from kombu import Connection
from kombu.transport import virtual

from portal import broker

ROOT = Path(__file__).resolve().parents[2]
TRANSPORT = "portal.broker:Transport"
# Big enough that a reader that could see a file before it is whole would meet it short (the
# stock transport fails at once: its file exists, empty, before the write).
BODY = "x" * 64 * 1024


@pytest.fixture(autouse=True)
def _fresh_broker_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """kombu keeps declared exchanges and bindings per process, keyed by name, not by folder:
    without a fresh state a second test's folder would never get its binding table."""
    monkeypatch.setattr(broker.Transport, "global_state", virtual.BrokerState())


def connection(folder: Path) -> Connection:
    return Connection(
        "filesystem://",
        transport=TRANSPORT,
        transport_options={
            "data_folder_in": str(folder),
            "data_folder_out": str(folder),
            "control_folder": str(folder / "control"),
            "polling_interval": 0.0,
        },
    )


def _produce(folder: str, tag: str, count: int) -> None:
    with connection(Path(folder)) as conn:
        queue = conn.SimpleQueue("jobs")
        for i in range(count):
            queue.put({"tag": tag, "i": i, "body": BODY})
        queue.close()


def _consume(folder: str, out: Any) -> None:
    """Take messages until the queue is empty (the producer finished before this started)."""
    taken = []
    with connection(Path(folder)) as conn:
        queue = conn.SimpleQueue("jobs")
        while True:
            try:
                message = queue.get(block=False)
            except Empty:
                break
            taken.append(message.payload["i"])
            message.ack()
        queue.close()
    out.put(taken)


def test_a_fast_reader_never_meets_a_half_written_message(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    writers = [ctx.Process(target=_produce, args=(str(tmp_path), tag, 60)) for tag in ("a", "b")]
    for w in writers:
        w.start()
    seen: dict[str, list[int]] = {"a": [], "b": []}
    with connection(tmp_path) as conn:
        queue = conn.SimpleQueue("jobs")
        # No sleep between polls: the reader lists the folder while the writers write.
        while sum(map(len, seen.values())) < 120:
            try:
                message = queue.get(block=False)
            except Empty:
                continue
            assert message.payload["body"] == BODY  # whole, never short
            seen[message.payload["tag"]].append(message.payload["i"])
            message.ack()
        queue.close()
    for w in writers:
        w.join()
        assert w.exitcode == 0
    # Each writer's messages come out in the order it sent them.
    assert seen == {"a": list(range(60)), "b": list(range(60))}
    assert not (tmp_path / broker.REJECTED).exists()


def test_two_consumers_never_take_the_same_message(tmp_path: Path) -> None:
    _produce(str(tmp_path), "a", 200)
    ctx = multiprocessing.get_context("spawn")
    taken = ctx.Queue()
    readers = [ctx.Process(target=_consume, args=(str(tmp_path), taken)) for _ in range(2)]
    for r in readers:
        r.start()
    results = [taken.get(timeout=300) for _ in readers]
    for r in readers:
        r.join()
        assert r.exitcode == 0
    both = results[0] + results[1]
    assert sorted(both) == list(range(200))  # every message, none twice
    assert [n for n in os.listdir(tmp_path) if n.endswith(".msg")] == []


def test_a_message_still_being_written_is_neither_delivered_nor_counted(tmp_path: Path) -> None:
    with connection(tmp_path) as conn:
        queue = conn.SimpleQueue("jobs")
        queue.put({"i": 1})
        # A writer still writing (or one that died half-way) has only a staging file.
        staging = tmp_path / broker.INCOMING
        (staging / "deadbeef.part").write_text('{"body": "ab')
        assert conn.default_channel._size("jobs") == 1
        message = queue.get(block=False)
        assert message.payload == {"i": 1}
        message.ack()
        with pytest.raises(Empty):
            queue.get(block=False)
        queue.close()
    assert (staging / "deadbeef.part").exists()
    assert not (tmp_path / broker.REJECTED).exists()


def test_an_undecodable_message_is_set_aside_and_the_next_one_delivered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "00000000000000000001_torn.jobs.msg").write_bytes(b'{"bod')
    with connection(tmp_path) as conn:
        queue = conn.SimpleQueue("jobs")
        queue.put({"i": 2})
        message = queue.get(block=True, timeout=5)
        assert message.payload == {"i": 2}
        message.ack()
        queue.close()
    assert os.listdir(tmp_path / broker.REJECTED) == ["00000000000000000001_torn.jobs.msg"]
    assert "does not decode" in caplog.text


def test_purge_removes_only_the_queues_messages(tmp_path: Path) -> None:
    with connection(tmp_path) as conn:
        conn.SimpleQueue("jobs").put({"i": 1})
        conn.SimpleQueue("other").put({"i": 2})
        channel = conn.default_channel
        assert channel._purge("jobs") == 1
        assert channel._size("jobs") == 0 and channel._size("other") == 1


def _bind(folder: str, queue: str) -> None:
    with connection(Path(folder)) as conn:
        channel = conn.default_channel
        for _ in range(20):
            channel._queue_bind("bcast", "", "", queue)
            assert all(len(entry) == 3 for entry in channel.get_table("bcast"))


def test_fanout_bindings_from_many_processes_all_land_and_read_whole(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    binders = [ctx.Process(target=_bind, args=(str(tmp_path), f"q{i}")) for i in range(4)]
    for b in binders:
        b.start()
    for b in binders:
        b.join()
        assert b.exitcode == 0  # a reader that met a truncated table would have raised
    with connection(tmp_path) as conn:
        queues = sorted(entry.queue for entry in conn.default_channel.get_table("bcast"))
    assert queues == ["q0", "q1", "q2", "q3"]


def test_the_embedded_demo_uses_this_transport_and_polls_fast(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "PORTAL_VAR_DIR": str(tmp_path),
        "DEBUG": "1",
        "DJANGO_SETTINGS_MODULE": "portal.settings",
    }
    code = (
        "import django; django.setup()\n"
        "from portal.celery import app\n"
        "with app.connection_for_write() as c:\n"
        "    print(type(c.transport).__module__, c.transport.polling_interval)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["portal.broker", "0.05"]
