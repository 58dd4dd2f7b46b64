"""REST API tokens."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class ApiToken(models.Model):
    """A user's REST API token, stored as its SHA-256 digest only (as GitHub and
    django-rest-knox keep theirs): the key itself is shown once, when it is made
    (``portal.api_tokens``), and a copy of this table gives no usable key. ``prefix`` (the
    key's first characters) tells tokens apart in the admin. One token per user, as DRF's."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_token"
    )
    digest = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8)
    created = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"
