"""The embedded demo's Celery broker: kombu's filesystem transport, made safe to poll fast.

kombu's own ``kombu.transport.filesystem.Channel._put`` creates the message file under its
final name and only then writes the body, and ``_get`` takes any file whose name matches. A
consumer polling often enough meets a file that exists but is still empty and dies decoding it
(JSONDecodeError), so the demo had to poll once a second, which delivered about one task a
second and left a one-step run minutes behind a fan-out. Here:

* a message is written under a temporary name in ``.incoming/`` (same directory, so the same
  file system) and appears under its queue name only by ``os.replace``, which is atomic: a
  listing shows a complete message or none;
* a consumer claims a message by renaming it into ``.claimed/`` (atomic too): of two consumers
  racing for one file exactly one wins, and the loser moves on to the next file (kombu's
  ``shutil.move`` to the temporary directory becomes a copy across file systems);
* a message that still does not decode (a file torn by a machine crash) is set aside in
  ``.rejected/`` and logged, instead of killing the worker on every restart;
* the exchange table of fanout exchanges (Celery's broadcast and remote control) is rewritten
  the same way, under a lock, so a reader never sees it truncated.

With that, ``polling_interval`` can be short (``CELERY_FILESYSTEM_POLL_SECONDS``). No server,
no new dependency: only the standard library and kombu. Selected by ``CELERY_BROKER_TRANSPORT``
in the settings when no broker URL is set.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from queue import Empty
from typing import Any, cast

import kombu.transport.filesystem as filesystem
from kombu.utils import json as kombu_json

# kombu's JSON (its encoder knows dates, UUIDs, decimals); the stubs misstate the signatures.
dumps = cast(Callable[[Any], str], kombu_json.dumps)
loads = cast(Callable[[bytes], Any], kombu_json.loads)

log = logging.getLogger(__name__)

INCOMING = ".incoming"
CLAIMED = ".claimed"
REJECTED = ".rejected"


def _suffix(queue: str) -> str:
    return f".{queue}.msg"


def _write_atomically(folder: Path, name: str, data: bytes) -> None:
    """``data`` appears at ``folder/name`` whole or not at all."""
    staging = folder / INCOMING
    staging.mkdir(exist_ok=True)
    tmp = staging / f"{uuid.uuid4().hex}.part"
    with open(tmp, "xb") as f:
        f.write(data)
    os.replace(tmp, folder / name)


class Channel(filesystem.Channel):
    """A filesystem channel whose readers only ever see complete messages."""

    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        # Zero-padded wall-clock nanoseconds: names sort in sending order across processes
        # (kombu's unpadded milliseconds sort "9999_" after "10000_").
        name = f"{time.time_ns():020d}_{uuid.uuid4().hex}{_suffix(queue)}"
        try:
            _write_atomically(Path(self.data_folder_out), name, dumps(payload).encode())
        except OSError as exc:
            raise filesystem.ChannelError(f"Cannot add {name!r} to the queue: {exc}") from exc

    def _names(self, queue: str) -> list[str]:
        """The complete messages of ``queue``, oldest first (dot-names are our own folders)."""
        suffix = _suffix(queue)
        return sorted(
            n
            for n in os.listdir(self.data_folder_in)
            if n.endswith(suffix) and not n.startswith(".")
        )

    def _get(self, queue: str) -> Any:
        folder = Path(self.data_folder_in)
        claimed = folder / CLAIMED
        claimed.mkdir(exist_ok=True)
        for name in self._names(queue):
            mine = claimed / f"{os.getpid()}-{name}"
            try:
                os.rename(folder / name, mine)
            except FileNotFoundError:
                continue  # another consumer claimed it first
            payload = mine.read_bytes()
            try:
                message = loads(payload)
            except (ValueError, UnicodeDecodeError):
                self._reject(folder, mine, name)
                continue
            if self.store_processed:
                shutil.move(str(mine), os.path.join(self.processed_folder, name))
            else:
                mine.unlink()
            return message
        raise Empty()

    def _reject(self, folder: Path, claimed: Path, name: str) -> None:
        rejected = folder / REJECTED
        rejected.mkdir(exist_ok=True)
        os.replace(claimed, rejected / name)
        log.error("broker message %s does not decode; set aside in %s", name, rejected)

    def _purge(self, queue: str) -> int:
        count = 0
        for name in self._names(queue):
            try:
                os.remove(os.path.join(self.data_folder_in, name))
            except FileNotFoundError:
                continue  # consumed meanwhile
            count += 1
        return count

    def _size(self, queue: str) -> int:
        return len(self._names(queue))

    # Fanout exchange tables: kombu opens the table with "wb" (truncating it) before it takes
    # the lock, so a reader can read an empty table. Rewritten whole under a lock file instead.
    def get_table(self, exchange: str) -> list[Any]:
        try:
            table = loads((self.control_folder / f"{exchange}.exchange").read_bytes())
        except FileNotFoundError:
            return []
        return [filesystem.exchange_queue_t(*q) for q in table]

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        folder: Path = self.control_folder
        folder.mkdir(parents=True, exist_ok=True)
        entry = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        with open(folder / f"{exchange}.exchange.lock", "a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            table = self.get_table(exchange)
            if entry in table:
                return
            table.insert(0, entry)
            _write_atomically(folder, f"{exchange}.exchange", dumps(table).encode())


class Transport(filesystem.Transport):
    Channel = Channel
