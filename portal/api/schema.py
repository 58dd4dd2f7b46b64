"""What the OpenAPI document says beyond what drf-spectacular infers: the error answers.

Every operation may answer 400 (``{"errors": [{"path", "message"}]}``, portal/api/errors.py:
a bad query, body or path value), 401 (no or a bad token), 403 (not allowed) and 404 (nothing
there, or nothing you may see), the last three as DRF writes them, ``{"detail": "..."}``. An
operation that writes may also answer 409 (the object's state refuses it), 413 (a body over
the limit) and 415 (a body in a media type it does not take). Each is added where the view did
not describe that status itself. The tests check the document against the answers
(tests/portal/test_schema_conformance.py)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

ERRORS = "ErrorList"
DETAIL = "ErrorDetail"
SCHEMAS: dict[str, dict[str, Any]] = {
    ERRORS: {
        "type": "object",
        "description": "A refused request: every problem with the field path it concerns.",
        "properties": {
            "errors": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "dotted field path"},
                        "message": {"type": "string"},
                    },
                    "required": ["path", "message"],
                },
            }
        },
        "required": ["errors"],
    },
    DETAIL: {
        "type": "object",
        "description": "DRF's error answer.",
        "properties": {"detail": {"type": "string"}},
        "required": ["detail"],
    },
}
EVERY_OPERATION = {
    "400": (ERRORS, "Bad input, each problem with its field path; nothing is stored."),
    "401": (DETAIL, "No credentials, or a token that is not valid."),
    "403": (DETAIL, "Not allowed for this user."),
    "404": (DETAIL, "Nothing there, or nothing this user may see."),
}
WRITES = {
    "409": (DETAIL, "The object's state refuses the request."),
    "413": (ERRORS, "The body is over the size limit."),
    "415": (DETAIL, "A body in a media type the operation does not take."),
}
WRITE_METHODS = {"post", "put", "patch", "delete"}


def _reference(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def add_error_responses(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """drf-spectacular postprocessing hook (SPECTACULAR_SETTINGS['POSTPROCESSING_HOOKS'])."""
    result.setdefault("components", {}).setdefault("schemas", {}).update(SCHEMAS)
    for operations in result.get("paths", {}).values():
        for method, operation in operations.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            described = dict(EVERY_OPERATION)
            if method in WRITE_METHODS:
                described.update(WRITES)
            # An operation that answers text too (``?format=txt``) gives its errors so.
            ok = operation["responses"].get("200", {}).get("content", {})
            texts = [t for t in ok if not t.endswith("json")]
            for status, (name, description) in described.items():
                content: dict[str, Any] = {"application/json": {"schema": _reference(name)}}
                content.update({t: {"schema": {"type": "string"}} for t in texts})
                operation["responses"].setdefault(
                    status, {"description": description, "content": content}
                )
    return result


@csrf_exempt  # as DRF's views are: a POST to a wrong path is a 404, not a CSRF failure
def api_not_found(request: HttpRequest, path: str = "") -> JsonResponse:
    """A path under /api/v1/ that names no operation: DRF's 404 answer, JSON as the rest of
    the API, not the site's HTML page."""
    return JsonResponse({"detail": "Not found."}, status=404)
