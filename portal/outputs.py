"""What the portal keeps of a step's outputs, whatever a member reports: a parameter over
PORTAL_MAX_PARAMETER_BYTES is not stored and fails its unit, and a ``result`` keeps its last
PORTAL_MAX_PARAMETER_BYTES, as Argo's executor keeps the last 256 kB of one
(workflow/executor/executor.go). A parameter holding a NUL byte fails its unit too, and
every other NUL reported becomes U+FFFD (PostgreSQL cannot store U+0000). Pure: plain data
in, plain data out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def parameter_too_large(name: str, size: int, limit: int) -> str:
    return (
        f"output parameter {name} is {size} bytes, more than the {limit} bytes an output "
        "parameter may hold; it was not stored (pass large values as an output artifact)"
    )


def parameter_with_nul(name: str) -> str:
    return (
        f"output parameter {name} holds NUL bytes (U+0000), which the portal cannot store "
        "or pass on; it was not stored (pass binary data as an output artifact)"
    )


NUL = "\x00"
# What stands for a NUL the portal cannot keep: the character Go's encoding/json (and so
# Argo) writes for bytes it cannot represent, so a reader sees where a byte was lost.
NUL_STANDIN = "\ufffd"


def storable(value: Any) -> Any:
    """``value`` with every NUL in its strings (keys too) replaced by U+FFFD: PostgreSQL's
    text and jsonb refuse U+0000 (``unsupported Unicode escape sequence``), which the
    Kubernetes API and Argo accept (Go's encoding/json writes it as ``\\u0000``)."""
    if isinstance(value, str):
        return value.replace(NUL, NUL_STANDIN) if NUL in value else value
    if isinstance(value, Mapping):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [storable(v) for v in value]
    return value


def bound_outputs(outputs: dict[str, Any], limit: int) -> tuple[dict[str, Any], str]:
    """``outputs`` with every parameter value over ``limit`` bytes or holding a NUL left out,
    ``result`` cut to its last ``limit`` bytes with its NULs as U+FFFD (as is any other NUL
    reported), and the message for the first parameter left out."""
    problem = ""
    kept = []
    for p in outputs.get("parameters") or []:
        value = p.get("value") if isinstance(p, dict) else None
        size = len(str(value).encode()) if value is not None else 0
        if size > limit:
            problem = problem or parameter_too_large(str(p.get("name")), size, limit)
            continue
        if isinstance(value, str) and NUL in value:
            # A parameter is a value later steps receive: one changed silently would be
            # passed on as if it were the step's, so it fails as one too large does.
            problem = problem or parameter_with_nul(str(storable(p.get("name"))))
            continue
        kept.append(p)
    out = dict(outputs)
    if "parameters" in out:
        out["parameters"] = kept
    result = out.get("result")
    if isinstance(result, str) and len(result.encode()) > limit:
        out["result"] = result.encode()[-limit:].decode("utf-8", "ignore")
    # ``result`` is the step's standard output as seen (already cut, as Argo cuts it): a
    # program printing binary data is common and fine in Argo, so it is kept readable.
    return storable(out), problem


def preview(outputs: dict[str, Any] | None, limit: int) -> dict[str, Any]:
    """``outputs`` with each parameter value and the ``result`` cut to their first ``limit``
    characters: a cut parameter says ``"truncated": true`` and its ``size`` (characters),
    a cut result ``resultTruncated`` and ``resultSize``. The rest is paged
    (``page``) from ``GET /api/v1/runs/{id}/units/{name}/outputs/``."""
    out = dict(outputs or {})
    params = []
    for p in out.get("parameters") or []:
        value = p.get("value") if isinstance(p, dict) else None
        if isinstance(value, str) and len(value) > limit:
            p = {**p, "value": value[:limit], "truncated": True, "size": len(value)}
        params.append(p)
    if "parameters" in out:
        out["parameters"] = params
    result = out.get("result")
    if isinstance(result, str) and len(result) > limit:
        out.update(result=result[:limit], resultTruncated=True, resultSize=len(result))
    return out


class NoSuchOutput(LookupError):
    """The unit has no such output parameter (or no result)."""


def output_value(outputs: dict[str, Any] | None, *, parameter: str | None) -> str:
    """The whole value of one output parameter, or of the result when ``parameter`` is None."""
    out = outputs or {}
    if parameter is None:
        if not isinstance(out.get("result"), str):
            raise NoSuchOutput("this step has no result")
        return str(out["result"])
    for p in out.get("parameters") or []:
        if isinstance(p, dict) and p.get("name") == parameter:
            return "" if p.get("value") is None else str(p["value"])
    raise NoSuchOutput(f"this step has no output parameter {parameter!r}")


def page(value: str, offset: int, limit: int) -> dict[str, Any]:
    """Characters ``offset`` to ``offset + limit`` of ``value``, with where the next page
    starts (None at the end)."""
    chunk = value[offset : offset + limit]
    end = offset + len(chunk)
    return {
        "size": len(value),
        "offset": offset,
        "limit": limit,
        "value": chunk,
        "next_offset": end if end < len(value) else None,
    }


PAGE_DEFAULT = 65536


@dataclass
class PageRequest:
    parameter: str | None  # None: the result
    offset: int
    limit: int


def page_request(
    query: Mapping[str, str], max_limit: int
) -> tuple[PageRequest, list[tuple[str, str]]]:
    """``?parameter=NAME`` (or ``?result=1``), ``offset`` and ``limit`` (characters) of a
    page request, and the (field, message) of each thing wrong with them."""
    errors: list[tuple[str, str]] = []
    parameter = query.get("parameter") or None
    result = query.get("result") in ("1", "true", "yes")
    if parameter is None and not result:
        errors.append(("parameter", "name an output parameter, or ask for result=1"))
    if parameter is not None and result:
        errors.append(("result", "ask for one output parameter or the result, not both"))
    numbers = {"offset": 0, "limit": min(PAGE_DEFAULT, max_limit)}
    for key in ("offset", "limit"):
        raw = query.get(key)
        if not raw:
            continue
        if not raw.isdecimal() or len(raw) > 18:
            errors.append((key, "must be a whole number, 0 or more"))
            continue
        numbers[key] = int(raw)
    if not 1 <= numbers["limit"] <= max_limit:
        errors.append(("limit", f"must be 1 to {max_limit}"))
    return PageRequest(parameter, numbers["offset"], numbers["limit"]), errors
