"""``manage.py check --deploy``: secrets that are known placeholders.

Django's own deploy checks catch a short or ``django-insecure-`` key; these catch the values
that have been public in this repository (the old docker-compose defaults, the development key)
and the usual placeholders ("changeme", "secret", ...) in every secret the portal reads.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register

# Values that were defaults in this repository at some point: public, so never secret.
KNOWN_PUBLIC = {
    "change-me-in-production-0123456789abcdefghijklmnopqrstuvwxyz",
    "compose-webhook-token-change-me",
    "django-insecure-local-development-key-do-not-use-in-production",
    "portal",
}
# Words that mark a value someone meant to replace.
PLACEHOLDER = re.compile(
    r"change[-_ .]?me|changeit|replace[-_ .]?me|placeholder|dummy|example|"
    r"^(secret|password|passw0rd|token|admin|postgres|test|default|xxx+|12345+)$",
    re.IGNORECASE,
)


def is_placeholder(value: str) -> bool:
    value = value.strip()
    return bool(value) and (value in KNOWN_PUBLIC or bool(PLACEHOLDER.search(value)))


def _database_password() -> str:
    url = str(getattr(settings, "DATABASE_URL", "") or "")
    try:
        return urlsplit(url).password or ""
    except ValueError:
        return ""


@register(Tags.security, deploy=True)
def placeholder_secrets(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    secrets = {
        "SECRET_KEY": ("portal.E001", str(settings.SECRET_KEY)),
        "PORTAL_WEBHOOK_TOKEN": ("portal.E002", str(settings.PORTAL_WEBHOOK_TOKEN or "")),
        "DATABASE_URL": ("portal.E003", _database_password()),
        "PORTAL_METRICS_TOKEN": ("portal.E004", str(settings.PORTAL_METRICS_TOKEN or "")),
    }
    out: list[CheckMessage] = []
    for name, (check_id, value) in secrets.items():
        if is_placeholder(value):
            what = "password" if name == "DATABASE_URL" else "value"
            out.append(
                Error(
                    f"{name} holds a placeholder or publicly known {what}.",
                    hint=f"Set {name} to a long random value, e.g. "
                    "`python -c 'import secrets; print(secrets.token_urlsafe(40))'`.",
                    id=check_id,
                )
            )
    return out
