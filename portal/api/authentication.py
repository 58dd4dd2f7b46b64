"""API authentication: DRF's token, remembered for a few seconds by each process."""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models.signals import post_delete, post_save
from rest_framework.authentication import TokenAuthentication, get_authorization_header
from rest_framework.authtoken.models import Token
from rest_framework.exceptions import AuthenticationFailed, Throttled
from rest_framework.request import Request

from portal import throttling

MAX_ENTRIES = 1024

_known: dict[str, tuple[float, Any]] = {}
_lock = threading.Lock()


class CachedTokenAuthentication(TokenAuthentication):
    """DRF's ``TokenAuthentication``, with each valid key's token remembered by the process for
    ``PORTAL_TOKEN_CACHE_SECONDS`` (10 s by default, 0 turns it off).

    Every API request read its token and user with one query: about 1 ms of the web
    process's CPU, and a PostgreSQL round trip, per request of a component that sends many
    with one token. What that costs: a token deleted or a user deactivated by another process
    keeps working in this one for at most that long (the process that makes the change
    forgets at once), as Kubernetes caches its token reviews. Unknown keys are never
    remembered, so a wrong key is always checked against the database."""

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        """DRF's, with failed tokens counted per client address (portal/throttling.py): past
        ``PORTAL_AUTH_FAILURES_PER_ADDRESS`` failures in the window every request that carries
        a token gets 429 with ``Retry-After`` before the token is looked up. (A wrong token
        names no user, so the per-user count applies to the login form only.)"""
        header = get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        address = throttling.client_address(request._request)
        wait = throttling.retry_after(address)
        if wait is not None:
            raise Throttled(wait=wait, detail=throttling.message(wait))
        try:
            return super().authenticate(request)
        except AuthenticationFailed:
            throttling.record_failure(address)
            raise

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        ttl = float(getattr(settings, "PORTAL_TOKEN_CACHE_SECONDS", 0))
        if ttl <= 0:
            return super().authenticate_credentials(key)
        now = time.monotonic()
        hit = _known.get(key)
        if hit is not None and hit[0] > now:
            token = hit[1]
            # A copy per request: code that sets attributes on request.user (permission
            # caches) must not share them with other requests.
            return copy.copy(token.user), token
        user, token = super().authenticate_credentials(key)
        with _lock:
            if len(_known) >= MAX_ENTRIES:
                _known.clear()
            _known[key] = (now + ttl, token)
        return copy.copy(user), token


def forget_tokens(**_: Any) -> None:
    """A token or a user changed in this process: nothing remembered is trusted any more."""
    with _lock:
        _known.clear()


post_delete.connect(forget_tokens, sender=Token, dispatch_uid="portal-forget-tokens-delete")
post_save.connect(forget_tokens, sender=Token, dispatch_uid="portal-forget-tokens-save")
post_save.connect(forget_tokens, sender=get_user_model(), dispatch_uid="portal-forget-tokens-user")
