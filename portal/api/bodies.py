"""The raw body of a workflow's POST or PUT, read once, by one reader.

DRF reads a request's body through its parser the first time anything asks for
``request.data`` or ``request.POST``, and a browser session's CSRF check asks for
``request.POST`` (Django's ``CsrfViewMiddleware`` looks for the ``csrfmiddlewaretoken`` form
field) before the view runs. A parser that read the body there left the view an empty stream,
so a session's submission answered ``400 empty document``. The parser here reads nothing: it
hands the stream over, wrapped, and ``read_body`` is the only reader, with the size limit."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.parsers import BaseParser
from rest_framework.request import Request


class BodyTooLarge(Exception):
    pass


class RawBody:
    """The body's stream, unread. For a form content type (``curl -d`` sends one) DRF answers
    ``request.POST`` with the parser's result, and the CSRF check calls ``.get`` on it: the
    workflow is no form, so no field is found and the check reads the ``X-CSRFToken`` header,
    as it does for any body that is not a form."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def read(self, size: int) -> bytes:
        return bytes(self.stream.read(size))

    def get(self, key: str, default: Any = None) -> Any:
        return default


class RawWorkflowParser(BaseParser):
    """Hands the body through unread: the workflow parser decodes YAML and JSON itself, with
    its own limits (alias expansion, depth, size), once ``read_body`` has read it."""

    media_type = "*/*"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        return RawBody(stream)


def read_body(request: Request) -> bytes:
    """The body, at most ``PORTAL_MAX_BODY_BYTES`` (``BodyTooLarge`` past it, refused on the
    declared length before anything is read); empty when there is none."""
    limit = int(settings.PORTAL_MAX_BODY_BYTES)
    length = request.META.get("CONTENT_LENGTH") or "0"
    try:
        declared = int(length)
    except ValueError:
        declared = 0
    if declared > limit:
        raise BodyTooLarge(f"body of {declared} bytes exceeds the limit of {limit} bytes")
    data = request.data  # DRF: {} (or an empty QueryDict) when the body is empty
    raw = data.read(limit + 1) if isinstance(data, RawBody) else b""
    if len(raw) > limit:
        raise BodyTooLarge(f"body exceeds the limit of {limit} bytes")
    return raw
