"""Quantities in words for people: sizes and time estimates. Pure: no Django import.

One formatter for sizes, used by the planner's reasons and by the pages, so a run page never
shows the same dataset as "129 GB" in one column and "120.0 GiB" in the next. Sizes are binary
(1 KiB = 1024 B) because the capacities they sit beside (Kubernetes ``Gi`` quantities) are.
"""

from __future__ import annotations

_BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human_bytes(n: float) -> str:
    """A size in binary units: "512 B", "4.7 GiB", "112 GiB", "1.5 TiB".

    One decimal below 10 of a unit, none from 10 up: the decimal matters for small figures and
    is noise for large ones. A figure that would round to 1024 goes to the next unit instead."""
    value = float(n)
    step = 0
    while round(abs(value)) >= 1024 and step < len(_BINARY_UNITS) - 1:
        value /= 1024
        step += 1
    unit = _BINARY_UNITS[step]
    if step == 0 or abs(value) >= 9.95:
        return f"{value:.0f} {unit}"
    return f"{value:.1f} {unit}"


def human_seconds(s: float) -> str:
    """An estimate for humans: "<1 s", "~96 s", "~16 min", "~2.5 h"."""
    if s < 1:
        return "<1 s"
    if s < 120:
        return f"~{s:.0f} s"
    if s < 7200:
        return f"~{s / 60:.0f} min"
    return f"~{s / 3600:.1f} h"
