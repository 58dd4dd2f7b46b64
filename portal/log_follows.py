"""Who may follow a step log now: a bounded number of follows per user (every web process
together) and per web process, so that followers never take the threads that probes and other
requests need.

A follow holds one of the web process's threads while it streams (gunicorn runs the portal
with threaded workers, ``portal/gunicorn_conf.py``): at most ``PORTAL_LOG_FOLLOWS_PER_PROCESS``
at once in one process, which must stay below its thread count (``GUNICORN_THREADS``), and at
most ``PORTAL_LOG_FOLLOWS_PER_USER`` at once for one user across all processes. A user's slots
are keys in Django's cache (Redis in production, shared by every process) taken with ``add``
(Redis ``SET NX``); each expires on its own after the longest a follow can last, so a process
that dies mid-stream gives its slots back.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any

from django.conf import settings
from django.core.cache import cache

PREFIX = "log-follow"
PROCESS_RETRY_SECONDS = 5

_lock = threading.Lock()
_active = 0


class FollowRefused(Exception):
    """No slot: ``status`` 429 (the user's cap) or 503 (the process's), with ``retry_after``."""

    def __init__(self, status: int, retry_after: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.message = message


def _slot_seconds() -> int:
    # A follow ends once its budget has passed after a chunk, or after a whole budget of
    # silence (the read timeout): at most about twice the budget.
    return 2 * int(settings.PORTAL_LOG_FOLLOW_SECONDS) + 30


def _take_user_slot(user_id: object) -> Callable[[], None] | None:
    mine = secrets.token_hex(8)
    for i in range(int(settings.PORTAL_LOG_FOLLOWS_PER_USER)):
        key = f"{PREFIX}:user:{user_id}:{i}"
        if cache.add(key, mine, timeout=_slot_seconds()):

            def release(key: str = key) -> None:
                # Only our own slot: an expired one may have been taken by another follow.
                if cache.get(key) == mine:
                    cache.delete(key)

            return release
    return None


def _take_process_slot() -> bool:
    global _active
    with _lock:
        if _active >= int(settings.PORTAL_LOG_FOLLOWS_PER_PROCESS):
            return False
        _active += 1
        return True


def _give_process_slot() -> None:
    global _active
    with _lock:
        _active = max(0, _active - 1)


def no_slot() -> None:
    """What a read that is not a follow gives back: nothing."""


def follow_acquire(*, user_id: object) -> Callable[[], None]:
    """Take a follow slot for ``user_id``; the returned function gives it back (call it once
    the stream ends). Raises ``FollowRefused`` (429 for the user's cap, 503 for the process's)."""
    release_user = _take_user_slot(user_id)
    if release_user is None:
        cap = int(settings.PORTAL_LOG_FOLLOWS_PER_USER)
        raise FollowRefused(
            429,
            int(settings.PORTAL_LOG_FOLLOW_SECONDS),
            f"You are following {cap} logs already, the most one user may "
            "(PORTAL_LOG_FOLLOWS_PER_USER): end one, or read the log without follow.",
        )
    if not _take_process_slot():
        release_user()
        raise FollowRefused(
            503,
            PROCESS_RETRY_SECONDS,
            "This web process is following as many logs as it may "
            "(PORTAL_LOG_FOLLOWS_PER_PROCESS): try again shortly.",
        )
    done = threading.Event()

    def release() -> None:
        if not done.is_set():
            done.set()
            _give_process_slot()
            release_user()

    return release


class HeldStream:
    """An iterator of chunks that gives its follow slot back when the response is closed, even
    if the client went away before the first chunk (Django closes a streaming response's
    content when the server closes the response)."""

    def __init__(self, chunks: Iterator[bytes], release: Callable[[], None]) -> None:
        self._chunks = chunks
        self._release = release

    def __iter__(self) -> HeldStream:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._chunks)
        except BaseException:
            self._release()
            raise

    def close(self) -> None:
        try:
            close: Any = getattr(self._chunks, "close", None)
            if close is not None:
                close()
        finally:
            self._release()
