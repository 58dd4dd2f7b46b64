"""API authentication: a hashed token (``portal.api_tokens``) sent as ``Authorization: Token
<key>`` or ``Authorization: Bearer <key>``, remembered for a few seconds by each process."""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models.signals import post_delete, post_save
from django.utils.translation import gettext_lazy as _
from rest_framework.authentication import TokenAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed, Throttled
from rest_framework.request import Request

from portal import throttling
from portal.api_tokens import api_token_find, key_digest
from portal.models import ApiToken

MAX_ENTRIES = 1024

_known: dict[str, tuple[float, Any]] = {}
_lock = threading.Lock()


class CachedTokenAuthentication(TokenAuthentication):
    """DRF's ``TokenAuthentication`` over hashed keys, taking the ``Bearer`` keyword as well as
    ``Token`` (clients written for OAuth-style APIs send that), with each valid key's token
    remembered by the process for ``PORTAL_TOKEN_CACHE_SECONDS`` (10 s by default, 0 turns it
    off).

    Every API request read its token and user with one query: about 1 ms of the web
    process's CPU, and a PostgreSQL round trip, per request of a component that sends many
    with one token. What that costs: a token deleted or a user deactivated by another process
    keeps working in this one for at most that long (the process that makes the change
    forgets at once), as Kubernetes caches its token reviews. Unknown keys are never
    remembered, so a wrong key is always checked against the database."""

    model = ApiToken
    keywords = (b"token", b"bearer")

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        """DRF's, with failed tokens counted per client address (portal/throttling.py): past
        ``PORTAL_AUTH_FAILURES_PER_ADDRESS`` failures in the window every request that carries
        a token gets 429 with ``Retry-After`` before the token is looked up. (A wrong token
        names no user, so the per-user count applies to the login form only.)"""
        header = get_authorization_header(request).split()
        if not header or header[0].lower() not in self.keywords:
            return None
        address = throttling.client_address(request._request)
        wait = throttling.retry_after(address)
        if wait is not None:
            raise Throttled(wait=wait, detail=throttling.message(wait))
        try:
            if len(header) != 2:
                raise AuthenticationFailed(_("Invalid token header. No credentials provided."))
            try:
                key = header[1].decode()
            except UnicodeError:
                raise AuthenticationFailed(_("Invalid token header.")) from None
            return self.authenticate_credentials(key)
        except AuthenticationFailed:
            throttling.record_failure(address)
            raise

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        ttl = float(getattr(settings, "PORTAL_TOKEN_CACHE_SECONDS", 0))
        digest = key_digest(key)
        now = time.monotonic()
        hit = _known.get(digest) if ttl > 0 else None
        if hit is not None and hit[0] > now:
            token = hit[1]
            # A copy per request: code that sets attributes on request.user (permission
            # caches) must not share them with other requests.
            return copy.copy(token.user), token
        token = api_token_find(key)
        if token is None:
            raise AuthenticationFailed(_("Invalid token."))
        if not token.user.is_active:
            raise AuthenticationFailed(_("User inactive or deleted."))
        if ttl > 0:
            with _lock:
                if len(_known) >= MAX_ENTRIES:
                    _known.clear()
                _known[digest] = (now + ttl, token)
        return copy.copy(token.user), token


def forget_tokens(**_: Any) -> None:
    """A token or a user changed in this process: nothing remembered is trusted any more."""
    with _lock:
        _known.clear()


post_delete.connect(forget_tokens, sender=ApiToken, dispatch_uid="portal-forget-tokens-delete")
post_save.connect(forget_tokens, sender=ApiToken, dispatch_uid="portal-forget-tokens-save")
post_save.connect(forget_tokens, sender=get_user_model(), dispatch_uid="portal-forget-tokens-user")
