"""One error shape for every 400 the API gives: ``{"errors": [{"path", "message"}]}``.

DRF's nested validation errors become dotted paths (``replicas[0].site``) so a client can point
at the offending field; 401/403/404 keep DRF's ``{"detail": ...}``.
"""

from __future__ import annotations

from typing import Any

from rest_framework import status
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


def flatten_errors(detail: Any, path: str = "") -> list[dict[str, str]]:
    if isinstance(detail, dict):
        out: list[dict[str, str]] = []
        for key, value in detail.items():
            if key == "non_field_errors":
                out.extend(flatten_errors(value, path))
            else:
                out.extend(flatten_errors(value, f"{path}.{key}" if path else str(key)))
        return out
    if isinstance(detail, list):
        if all(not isinstance(item, (dict, list)) for item in detail):
            return [{"path": path, "message": str(item)} for item in detail]
        out = []
        for index, item in enumerate(detail):
            if item in ({}, []):
                continue
            out.extend(flatten_errors(item, f"{path}[{index}]"))
        return out
    return [{"path": path, "message": str(detail)}]


def errors_response(errors: list[dict[str, str]], code: int = 400) -> Response:
    return Response({"errors": errors}, status=code)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ValidationError):
        return errors_response(flatten_errors(exc.detail))
    if isinstance(exc, ParseError):
        return errors_response([{"path": "", "message": str(exc.detail)}])
    response = drf_exception_handler(exc, context)
    if response is not None and response.status_code == status.HTTP_400_BAD_REQUEST:
        response.data = {"errors": flatten_errors(response.data)}
    return response
