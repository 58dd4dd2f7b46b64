"""REST API tokens: made (the key shown once), checked, replaced.

A key is 40 random hex characters, as DRF's; the database keeps ``sha256(key)`` and the first
eight characters. A key is found by its digest (a unique index): SHA-256 of 160 random bits
needs no salt or slow hash, since nobody can guess a preimage, and the lookup reveals nothing
an attacker can steer.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from django.db import transaction

from portal.models import ApiToken

KEY_BYTES = 20
PREFIX_CHARS = 8


class TokenExists(Exception):
    """The user has a token already; its key cannot be shown again."""


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def api_token_create(*, user: Any, replace: bool = False) -> str:
    """Make ``user``'s token and return its key, the only time it is seen. With ``replace``
    the old token (if any) stops working; without it a user who has one gets ``TokenExists``."""
    key = secrets.token_hex(KEY_BYTES)
    with transaction.atomic():
        existing = ApiToken.objects.select_for_update().filter(user=user).first()
        if existing is not None and not replace:
            raise TokenExists(
                f"{user} has an API token already (made {existing.created:%Y-%m-%d %H:%M}, "
                f"starting {existing.prefix}); it cannot be shown again: replace it to get a "
                "new key."
            )
        if existing is not None:
            existing.delete()
        ApiToken.objects.create(user=user, digest=key_digest(key), prefix=key[:PREFIX_CHARS])
    return key


def api_token_find(key: str) -> ApiToken | None:
    """The token whose key is ``key``, with its user; None when there is none."""
    return ApiToken.objects.select_related("user").filter(digest=key_digest(key)).first()
