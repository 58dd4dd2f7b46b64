"""Kubernetes resource quantities: parse to numbers, format back canonically enough."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
_DECIMAL = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}


def parse(q: Any) -> float:
    if isinstance(q, int | float):
        return float(q)
    s = str(q).strip()
    for suffix, mult in _BINARY.items():
        if s.endswith(suffix):
            return float(s[: -len(suffix)]) * mult
    if s and s[-1] in _DECIMAL:
        return float(s[:-1]) * _DECIMAL[s[-1]]
    return float(s)


def fmt(resource: str, value: float) -> str:
    if resource == "memory" or resource.endswith("storage"):
        v = round(value)
        for suffix in ("Gi", "Mi", "Ki"):
            if v and v % _BINARY[suffix] == 0:
                return f"{v // _BINARY[suffix]}{suffix}"
        return str(v)
    if abs(value - round(value)) < 1e-9:
        return str(round(value))
    return f"{round(value * 1000)}m"


def parse_map(m: Mapping[str, Any] | None) -> dict[str, float]:
    return {k: parse(v) for k, v in (m or {}).items()}


def fmt_map(m: Mapping[str, float]) -> dict[str, str]:
    return {k: fmt(k, v) for k, v in sorted(m.items())}
