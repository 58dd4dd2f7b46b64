"""Errors as Argo Server answers them: grpc-gateway's ``DefaultHTTPProtoErrorHandler`` writes
the gRPC status as JSON, ``{"code": <grpc code>, "message": ...}``, with the HTTP status
grpc-gateway maps the code to (``runtime.HTTPStatusFromCode``, grpc-gateway v1.16). The argo
CLI's HTTP client reads exactly ``code`` and ``message`` (pkg/apiclient/http1/facade.go,
``errFromResponse``); Hera raises by the HTTP status."""

from __future__ import annotations

from typing import Any

from django.http import JsonResponse
from rest_framework import exceptions

from placement.parser import WorkflowInvalid

# google.golang.org/grpc/codes
CANCELED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
NOT_FOUND = 5
ALREADY_EXISTS = 6
PERMISSION_DENIED = 7
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14
UNAUTHENTICATED = 16

HTTP_STATUS = {
    CANCELED: 408,
    UNKNOWN: 500,
    INVALID_ARGUMENT: 400,
    NOT_FOUND: 404,
    ALREADY_EXISTS: 409,
    PERMISSION_DENIED: 403,
    RESOURCE_EXHAUSTED: 429,
    FAILED_PRECONDITION: 400,
    UNIMPLEMENTED: 501,
    INTERNAL: 500,
    UNAVAILABLE: 503,
    UNAUTHENTICATED: 401,
}


class ArgoError(Exception):
    """Raised by the views; answered as a gRPC status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def error_response(code: int, message: str, headers: dict[str, str] | None = None) -> JsonResponse:
    response = JsonResponse({"code": code, "message": message}, status=HTTP_STATUS[code])
    for key, value in (headers or {}).items():
        response[key] = value
    return response


def invalid(exc: WorkflowInvalid) -> ArgoError:
    """The parser's field errors as one message, each with its path (Argo's validation
    errors read ``templates.main.container: ...`` the same way)."""
    text = "; ".join(
        f"{e['path']}: {e['message']}" if e["path"] else e["message"] for e in exc.as_dicts()
    )
    return ArgoError(INVALID_ARGUMENT, text or "invalid workflow")


def exception_handler(exc: Exception, context: dict[str, Any]) -> JsonResponse | None:
    """DRF's own refusals (authentication, throttling, parsing) in the same shape."""
    if isinstance(exc, ArgoError):
        return error_response(exc.code, exc.message)
    if isinstance(exc, exceptions.NotAuthenticated):
        # Argo Server's words for a request without a valid token (server/auth/gatekeeper.go).
        return error_response(
            UNAUTHENTICATED,
            "token not valid. see https://argo-workflows.readthedocs.io/en/latest/faq/",
        )
    if isinstance(exc, exceptions.AuthenticationFailed):
        return error_response(UNAUTHENTICATED, str(exc.detail))
    if isinstance(exc, exceptions.PermissionDenied):
        return error_response(PERMISSION_DENIED, str(exc.detail))
    if isinstance(exc, exceptions.NotFound):
        return error_response(NOT_FOUND, str(exc.detail))
    if isinstance(exc, exceptions.Throttled):
        seconds = getattr(exc, "wait", None)
        wait = {"Retry-After": str(int(seconds))} if seconds is not None else None
        return error_response(RESOURCE_EXHAUSTED, str(exc.detail), wait)
    if isinstance(exc, exceptions.MethodNotAllowed):
        return error_response(UNIMPLEMENTED, str(exc.detail))
    if isinstance(exc, exceptions.APIException):
        return error_response(INVALID_ARGUMENT, str(exc.detail))
    return None
