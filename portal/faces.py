"""What the OGC API and STAC faces share: DRF's authentication (Token or Bearer) in front of
plain JSON answers, and errors as RFC 7807 problem documents."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from rest_framework import exceptions
from rest_framework.authentication import SessionAuthentication
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.views import APIView

from portal.api.authentication import CachedTokenAuthentication

OGC_EXCEPTIONS = "http://www.opengis.net/def/exceptions/ogcapi-processes-1/1.0"


class Problem(Exception):
    """An RFC 7807 problem: ``type`` (a URI), ``title``, ``status`` and ``detail``."""

    def __init__(self, status: int, type_: str, title: str, detail: str = "", **extra: Any):
        super().__init__(detail or title)
        self.status = status
        self.type = type_
        self.title = title
        self.detail = detail
        self.extra = extra

    def document(self, instance: str) -> dict[str, Any]:
        doc = {"type": self.type, "title": self.title, "status": self.status}
        if self.detail:
            doc["detail"] = self.detail
        return {**doc, "instance": instance, **self.extra}


def problem_response(problem: Problem, request: HttpRequest) -> JsonResponse:
    response = JsonResponse(
        problem.document(request.path), status=problem.status, json_dumps_params={}
    )
    response["Content-Type"] = "application/problem+json"
    return response


class AnyAccept(BaseContentNegotiation):
    """The faces answer JSON (or GeoJSON) whatever ``Accept`` says: clients send
    ``application/geo+json``, ``application/json`` or ``*/*`` and each gets the one document."""

    def select_parser(self, request: Request, parsers: Any) -> Any:
        return parsers[0] if parsers else None

    def select_renderer(self, request: Request, renderers: Any, format_suffix: Any = None) -> Any:
        return renderers[0], renderers[0].media_type


class FaceView(APIView):
    """A face's endpoint: authenticated as ``/api/v1/`` is, answered with ``JsonResponse``,
    every refusal a problem document. ``public`` views answer without a login (landing
    page, conformance, the API description)."""

    authentication_classes = [CachedTokenAuthentication, SessionAuthentication]
    content_negotiation_class = AnyAccept
    schema = None  # not part of /api/schema/: each face serves its own description
    public = False
    problem_base = OGC_EXCEPTIONS

    def get_permissions(self) -> list[Any]:
        from rest_framework.permissions import AllowAny, IsAuthenticated

        return [AllowAny() if self.public else IsAuthenticated()]

    def handle_exception(self, exc: Exception) -> Any:
        if isinstance(exc, Problem):
            return problem_response(exc, self.request)
        if isinstance(exc, (exceptions.NotAuthenticated, exceptions.AuthenticationFailed)):
            response = problem_response(
                Problem(401, "about:blank", "Unauthorized", str(exc.detail)), self.request
            )
            response["WWW-Authenticate"] = 'Bearer realm="api"'
            return response
        if isinstance(exc, exceptions.APIException):
            problem = Problem(
                exc.status_code, "about:blank", str(exc.default_detail), str(exc.detail)
            )
            response = problem_response(problem, self.request)
            wait = getattr(exc, "wait", None)
            if wait:
                response["Retry-After"] = str(int(wait))
            return response
        return super().handle_exception(exc)


class RawBody(BaseParser):
    """The body as bytes: ``json_body`` decodes it, bounded."""

    media_type = "*/*"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        return stream


def json_body(request: Request, invalid_type: str = "about:blank") -> Any:
    """The JSON body, at most ``PORTAL_MAX_BODY_BYTES`` (413 past it, before reading it
    all); ``{}`` when empty; a 400 problem when it is not JSON."""
    limit = int(settings.PORTAL_MAX_BODY_BYTES)
    declared = request.META.get("CONTENT_LENGTH") or "0"
    too_big = Problem(413, "about:blank", "Payload Too Large", f"at most {limit} bytes")
    if declared.isdigit() and int(declared) > limit:
        raise too_big
    stream = request.data
    raw = stream.read(limit + 1) if hasattr(stream, "read") else b""
    if len(raw) > limit:
        raise too_big
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise Problem(
            400,
            invalid_type,
            "Invalid parameter value",
            "the body must be JSON",
            errors=[{"path": "", "message": "the body must be JSON"}],
        ) from None


def root_url(request: HttpRequest, prefix: str) -> str:
    """The face's absolute root, without a trailing slash (``https://host/ogcapi``)."""
    return request.build_absolute_uri(f"/{prefix}").rstrip("/")


def portal_url(request: HttpRequest) -> str:
    return request.build_absolute_uri("/").rstrip("/")


def json_response(
    data: Any, status: int = 200, content_type: str = "application/json"
) -> JsonResponse:
    response = JsonResponse(data, status=status, safe=False)
    response["Content-Type"] = content_type
    return response
