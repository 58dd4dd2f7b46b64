"""Quantities in words for people: sizes and time estimates. Pure: no Django import."""

from __future__ import annotations


def human_bytes(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            v = n / size
            return f"{v:.0f} {unit}" if v >= 10 else f"{v:.1f} {unit}"
    return f"{int(n)} B"


def human_seconds(s: float) -> str:
    """An estimate for humans: "<1 s", "~96 s", "~16 min", "~2.5 h"."""
    if s < 1:
        return "<1 s"
    if s < 120:
        return f"~{s:.0f} s"
    if s < 7200:
        return f"~{s / 60:.0f} min"
    return f"~{s / 3600:.1f} h"
