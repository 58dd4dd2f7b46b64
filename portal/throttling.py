"""Failed logins and API tokens, counted per client address and per username from that address.

Each failure adds one to a counter in Django's cache (Redis when ``REDIS_URL`` is set, so every
web process shares it; a process's memory in the embedded demo) that lives for
``PORTAL_AUTH_FAILURE_WINDOW_SECONDS`` from the first failure. Once a username has
``PORTAL_AUTH_FAILURES_PER_USER`` failures from one address, or an address
``PORTAL_AUTH_FAILURES_PER_ADDRESS`` in all, further attempts from there are refused with 429
before any password is hashed or token looked up, until the window ends. A successful login
resets the username's count at that address, not the address's (an attacker with one account
would otherwise reset it at will).

A username is counted per address, not across addresses: failures a stranger makes elsewhere
never lock the real user out of the login form (a per-username count did, for the whole
window). Guessing one password from many addresses is bounded by each address's own count.

The client address is ``REMOTE_ADDR``: behind a proxy, have the proxy (or gunicorn's
``--forwarded-allow-ips``) set it to the real client.
"""

from __future__ import annotations

import hashlib
import time

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest

PREFIX = "auth-failures"


def _key(kind: str, value: str) -> str:
    # Hashed: usernames and addresses may hold characters a cache key must not.
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{PREFIX}:{kind}:{digest}"


def client_address(request: HttpRequest) -> str:
    return str(request.META.get("REMOTE_ADDR") or "unknown")


def _subjects(address: str, username: str | None) -> list[tuple[str, int]]:
    subjects = [(_key("addr", address), int(settings.PORTAL_AUTH_FAILURES_PER_ADDRESS))]
    if username:
        subjects.append((_user_key(address, username), int(settings.PORTAL_AUTH_FAILURES_PER_USER)))
    return subjects


def _user_key(address: str, username: str) -> str:
    return _key("user", f"{address}\n{username.strip().lower()}")


def retry_after(address: str, username: str | None = None) -> int | None:
    """Seconds until the next attempt is allowed, or None when it is allowed now."""
    subjects = _subjects(address, username)
    counts = cache.get_many([key for key, _ in subjects])
    blocked = [key for key, limit in subjects if int(counts.get(key, 0) or 0) >= limit > 0]
    if not blocked:
        return None
    ends = cache.get_many([f"{key}:ends" for key in blocked]).values()
    now = time.time()
    wait = max((float(end) - now for end in ends), default=0.0)
    return (
        max(1, int(wait + 0.999)) if wait > 0 else int(settings.PORTAL_AUTH_FAILURE_WINDOW_SECONDS)
    )


def record_failure(address: str, username: str | None = None) -> None:
    window = int(settings.PORTAL_AUTH_FAILURE_WINDOW_SECONDS)
    for key, _ in _subjects(address, username):
        # add() starts the window only for the first failure; incr() keeps its expiry.
        if cache.add(key, 1, timeout=window):
            cache.set(f"{key}:ends", time.time() + window, timeout=window)
            continue
        try:
            cache.incr(key)
        except ValueError:  # expired between add() and incr(): start a new window
            cache.add(key, 1, timeout=window)
            cache.set(f"{key}:ends", time.time() + window, timeout=window)


def reset_user(address: str, username: str) -> None:
    """A login succeeded: the username's failures from this address are forgotten."""
    key = _user_key(address, username)
    cache.delete_many([key, f"{key}:ends"])


def message(wait: int) -> str:
    return f"Too many failed attempts. Try again in {wait} seconds."
