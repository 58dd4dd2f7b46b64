"""What the portal keeps of a step's outputs, whatever a member reports: a parameter over
PORTAL_MAX_PARAMETER_BYTES is not stored and fails its unit, and a ``result`` keeps its last
PORTAL_MAX_PARAMETER_BYTES, as Argo's executor keeps the last 256 kB of one
(workflow/executor/executor.go). Pure: plain data in, plain data out."""

from __future__ import annotations

from typing import Any


def parameter_too_large(name: str, size: int, limit: int) -> str:
    return (
        f"output parameter {name} is {size} bytes, more than the {limit} bytes an output "
        "parameter may hold; it was not stored (pass large values as an output artifact)"
    )


def bound_outputs(outputs: dict[str, Any], limit: int) -> tuple[dict[str, Any], str]:
    """``outputs`` with every parameter value over ``limit`` bytes left out and ``result``
    cut to its last ``limit`` bytes, and the message for the first parameter left out."""
    problem = ""
    kept = []
    for p in outputs.get("parameters") or []:
        value = p.get("value") if isinstance(p, dict) else None
        size = len(str(value).encode()) if value is not None else 0
        if size > limit:
            problem = problem or parameter_too_large(str(p.get("name")), size, limit)
            continue
        kept.append(p)
    out = dict(outputs)
    if "parameters" in out:
        out["parameters"] = kept
    result = out.get("result")
    if isinstance(result, str) and len(result.encode()) > limit:
        out["result"] = result.encode()[-limit:].decode("utf-8", "ignore")
    return out, problem
