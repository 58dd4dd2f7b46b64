"""Request bodies sent with ``Transfer-Encoding: chunked`` (no ``Content-Length``).

Django reads a request body only up to ``CONTENT_LENGTH`` and treats a missing one as 0, so a
chunked body reached every view as empty (``400 empty document``; the webhook's "not JSON").
This middleware reads such a body once, bounded by ``PORTAL_MAX_CHUNKED_BODY_BYTES`` (413 past
it), and hands it on as if it had come with its length: each view then applies its own limit
(``PORTAL_MAX_BODY_BYTES``, ``DATA_UPLOAD_MAX_MEMORY_SIZE``, the webhook's) as for any body.

Servers differ in who decodes the chunks:

* gunicorn (and any server that sets ``wsgi.input_terminated``) decodes them and ends
  ``wsgi.input`` at the end of the body: read it directly;
* Django's own server (``runserver``, the live test server) passes the socket on undecoded,
  wrapped in a ``LimitedStream`` of length 0: decode the chunks here from the socket.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.handlers.wsgi import LimitedStream
from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict

from sites.nul import MESSAGE, NUL, shown

# How much of a body past the limit is still read (and dropped) so the client gets the 413.
DRAIN_FACTOR = 4


class BodyTooLarge(Exception):
    pass


class BadChunks(Exception):
    pass


def _read_terminated(stream: Any, limit: int) -> bytes:
    out = bytearray()
    while len(out) <= limit:
        piece = stream.read(min(64 * 1024, limit + 1 - len(out)))
        if not piece:
            return bytes(out)
        out += piece
    raise BodyTooLarge


def read_chunks(raw: Any, limit: int) -> bytes:
    """Decode an HTTP/1.1 chunked body from ``raw`` (a buffered socket reader).

    Past ``limit`` the rest of the body is read and dropped, up to ``DRAIN_FACTOR`` times the
    limit, before ``BodyTooLarge``: Django's server drains a body with a length it did not read
    (``ServerHandler.close`` reads ``stdin`` to its end) so that closing the socket with unread
    bytes does not reset the connection, and a client still sending would then get a broken
    pipe instead of the 413. Memory stays bounded by the limit; a body past the drain bound
    is cut off."""
    out = bytearray()
    dropped = 0
    while True:
        line = raw.readline(1024)
        if not line.endswith(b"\n"):
            raise BadChunks("chunk size line missing or too long")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise BadChunks("chunk size is not hexadecimal") from None
        if size < 0:
            raise BadChunks("negative chunk size")
        if size == 0:
            break
        if dropped or len(out) + size > limit:
            dropped += size
            if dropped > DRAIN_FACTOR * limit:
                raise BodyTooLarge
        while size:
            piece = raw.read(min(size, 64 * 1024))
            if not piece:
                raise BadChunks("body ends inside a chunk")
            if not dropped:
                out += piece
            size -= len(piece)
        if raw.readline(16).strip():
            raise BadChunks("chunk not followed by CRLF")
    for _ in range(100):  # trailer fields, then the empty line
        if not raw.readline(8192).strip():
            if dropped:
                raise BodyTooLarge
            return bytes(out)
    raise BadChunks("too many trailer fields")


def read_chunked_body(environ: dict[str, Any], limit: int) -> bytes:
    stream = environ["wsgi.input"]
    if environ.get("wsgi.input_terminated"):
        return _read_terminated(stream, limit)
    # Django's server: LimitedStream(socket reader, 0) keeps the reader's bound read method.
    raw = getattr(getattr(stream, "_read", None), "__self__", None)
    if isinstance(stream, LimitedStream) and raw is not None and hasattr(raw, "readline"):
        return read_chunks(raw, limit)
    raise BadChunks("this server does not hand on chunked request bodies")


class ChunkedBodyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        meta = request.META
        if "chunked" in meta.get("HTTP_TRANSFER_ENCODING", "").lower() and not meta.get(
            "CONTENT_LENGTH"
        ):
            limit = int(settings.PORTAL_MAX_CHUNKED_BODY_BYTES)
            try:
                body = read_chunked_body(meta, limit)
            except BodyTooLarge:
                return JsonResponse(
                    {"errors": [{"path": "", "message": f"body larger than {limit} bytes"}]},
                    status=413,
                )
            except (BadChunks, OSError) as exc:
                return JsonResponse(
                    {"errors": [{"path": "", "message": f"unreadable chunked body: {exc}"}]},
                    status=400,
                )
            meta["CONTENT_LENGTH"] = str(len(body))
            # What WSGIRequest reads the body from (HttpRequest.read/body, DRF's stream).
            request._stream = io.BytesIO(body)
            request._read_started = False  # type: ignore[attr-defined]
        return self.get_response(request)


class NulByteMiddleware:
    """A NUL character in the path is a 404 (no object has one in its name); in a query
    parameter or a form field a 400 naming it (sites/nul.py). JSON bodies are checked by the
    API's parser, workflow documents by the decoder."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if NUL in request.path:
            detail = "Not found: the path holds a NUL character."
            return JsonResponse({"detail": detail}, status=404)
        field = _nul_field(request.GET)
        if field is None and request.method == "POST" and _is_form(request):
            field = _nul_field(request.POST)
        if field is not None:
            return JsonResponse({"errors": [{"path": field, "message": MESSAGE}]}, status=400)
        return self.get_response(request)


def _is_form(request: HttpRequest) -> bool:
    content_type = request.META.get("CONTENT_TYPE", "")
    return content_type.startswith(("application/x-www-form-urlencoded", "multipart/form-data"))


def _nul_field(params: QueryDict) -> str | None:
    for key, values in params.lists():
        if NUL in key or any(NUL in value for value in values):
            return shown(key)
    return None
