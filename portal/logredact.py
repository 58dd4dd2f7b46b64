"""Keep the admission webhook's token out of log lines.

karmada-apiserver cannot send headers to a webhook, so its token is a path segment
(``/webhooks/placement/<token>/``), and every line that prints a request's path would print it:
Django's ``django.request`` (each 4xx and 5xx), ``django.server`` (``runserver``) and gunicorn's
access log. ``redact`` replaces the segment; ``RedactWebhookToken`` is the logging filter that
applies it to a record's message (settings.LOGGING puts it on those loggers and on the console
handler), and ``portal.gunicorn_conf`` applies it to gunicorn's access-log fields.

No Django import: gunicorn's master loads this before the application.
"""

from __future__ import annotations

import contextlib
import logging
import re
from typing import Any

REDACTED = "[redacted]"
# The segment after /webhooks/placement/ (also URL-encoded slashes, a query or a fragment
# end it), wherever the path appears: a request line, a full URL, a quoted path.
_TOKEN = re.compile(r"(/webhooks/placement/)([^/?#\s\"'<>]+)")


def redact(text: str) -> str:
    if "/webhooks/placement/" not in text:
        return text
    return _TOKEN.sub(lambda m: m.group(1) + REDACTED, text)


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, bytes):
        return redact(value.decode("latin-1")).encode("latin-1")
    return value


class RedactWebhookToken(logging.Filter):
    """Rewrites a record's message and arguments without the webhook token; the request
    object Django attaches (``record.request``) keeps its path for handlers that need it but
    its ``path`` and ``path_info`` are redacted too, so reporters that format it do not leak."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken record is logged as it is
            return True
        if "/webhooks/placement/" in message:
            record.msg, record.args = redact(message), None
        request = getattr(record, "request", None)
        for attr in ("path", "path_info"):
            value = getattr(request, attr, None)
            if isinstance(value, str) and "/webhooks/placement/" in value:
                with contextlib.suppress(AttributeError):
                    setattr(request, attr, redact(value))
        return True


def redact_atoms(atoms: dict[str, Any]) -> dict[str, Any]:
    """Gunicorn's access-log fields (request line, path, environ, headers) without the token."""
    return {key: _redact_value(value) for key, value in atoms.items()}
