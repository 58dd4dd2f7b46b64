"""Kubernetes quantities in and out of the quota API: "8", "500m", "32Gi" (as a pod's
``resources`` spells them), stored as millicores, bytes and whole GPUs."""

from __future__ import annotations

import math
from typing import Any

from placement.parser import parse_quantity


def millicores(value: Any) -> int:
    """CPU as millicores; ValueError with why for anything else."""
    q = _quantity(value)
    return math.ceil(q * 1000 - 1e-9)


def bytes_of(value: Any) -> int:
    q = _quantity(value)
    return math.ceil(q - 1e-9)


def gpus(value: Any) -> int:
    q = _quantity(value)
    if q != int(q):
        raise ValueError("GPUs are whole devices: give an integer")
    return int(q)


def _quantity(value: Any) -> float:
    if isinstance(value, bool) or value is None:
        raise ValueError("a Kubernetes quantity such as 8, 500m or 32Gi")
    q = parse_quantity(value)
    if q is None or not math.isfinite(q):
        raise ValueError(f"{value!r} is not a Kubernetes quantity (such as 8, 500m or 32Gi)")
    if q < 0:
        raise ValueError("must not be negative")
    if q > 2**62:
        raise ValueError("too large")
    return q


def cpu_text(m: int) -> str:
    return str(m // 1000) if m % 1000 == 0 else f"{m}m"


def memory_text(b: int) -> str:
    for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if b and b % size == 0:
            return f"{b // size}{suffix}"
    return str(b)
