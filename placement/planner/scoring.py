"""The soft side: what a site costs a unit (bytes to move and their transfer time, free
capacity left), and how the best eligible site is picked from the scores."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from placement.parser import Resources
from placement.planner.inputs import SiteState


class Costs(NamedTuple):
    """Per site (by name): bytes to move and seconds; ``note(i)`` says it in words for site i
    ("" when there is nothing to say), built only when a candidate row is."""

    bytes: list[int]
    seconds: list[float]
    note: Callable[[int], str]


def no_note(_: int) -> str:
    return ""


def memo_note(note: Callable[[int], str], n: int) -> Callable[[int], str]:
    """``note`` computed at most once per site (the vectors are shared by many decisions)."""
    done: list[str | None] = [None] * n

    def cached(i: int) -> str:
        text = done[i]
        if text is None:
            text = done[i] = note(i)
        return text

    return cached


def free_fraction(s: SiteState, req: Resources) -> tuple[float, bool]:
    """Mean free fraction left after the request (0 if it does not fit now), and whether it
    fits now. GPUs count only for units that need them: free GPUs do not make a site better for
    CPU work."""
    fractions: list[float] = []
    fits = True
    dims = [
        (s.cpu_free, s.cpu_allocatable, req.cpu_millicores),
        (s.memory_free, s.memory_allocatable, req.memory_bytes),
    ]
    if req.gpus:
        dims.append((s.gpu_free, s.gpu_allocatable, req.gpus))
    for free, total, need in dims:
        if total <= 0:
            continue
        if need > free:
            fits = False
        fractions.append(max(free - need, 0) / total)
    if not fits:
        return 0.0, False
    return (sum(fractions) / len(fractions) if fractions else 0.0), True


def best_position(
    scores: list[float], idx: Sequence[int], costs: Sequence[Costs], skip: int
) -> int:
    """Position (in ``idx``) of the best eligible site: highest score, then fewer bytes, then
    name (sites are ordered by name); -1 if none. ``skip`` leaves one position out."""
    if skip >= 0:
        scores = [*scores[:skip], -1.0, *scores[skip + 1 :]]  # scores are never negative
    if not scores or (skip >= 0 and len(scores) == 1):
        return -1
    top = max(scores)
    if scores.count(top) == 1:
        return scores.index(top)
    tied = [k for k, sc in enumerate(scores) if sc == top]
    return min(tied, key=lambda k: (sum(c.bytes[idx[k]] for c in costs), k))
