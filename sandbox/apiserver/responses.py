"""JSON answers, Status errors and request bodies, as every handler writes and reads them."""

from __future__ import annotations

import json
from typing import Any

import orjson
import yaml
from aiohttp import web

from sandbox.errors import ApiError


def dumps(obj: Any) -> str:
    """Compact JSON (orjson: answers and watch events were a tenth of the sandbox's time
    under a fan-out); what orjson refuses goes through the standard library."""
    try:
        return orjson.dumps(obj).decode()
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(obj, separators=(",", ":"))


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(text=dumps(body), status=status, content_type="application/json")


def error_response(err: ApiError) -> web.Response:
    return json_response(err.status(), status=err.code)


def not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def not_allowed(method: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", f"method {method} not allowed")


async def read_body(request: web.Request) -> Any:
    """The request's body, YAML when its content type says so, else JSON."""
    raw = await request.read()
    try:
        if "yaml" in (request.content_type or ""):
            return yaml.safe_load(raw)
        return json.loads(raw)
    except (ValueError, yaml.YAMLError) as exc:
        raise ApiError.bad_request(f"the request body is not valid: {exc}") from exc


def truthy(value: str | None) -> bool:
    # Go's strconv.ParseBool, which the apiserver uses: the Python client sends "True".
    return value in ("1", "t", "T", "true", "TRUE", "True")
