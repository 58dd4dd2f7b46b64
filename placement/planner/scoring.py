"""The soft side: what a site costs a unit (bytes to move and their transfer time, free
capacity left), and how the best eligible site is picked from the scores."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from placement.parser import Resources
from placement.planner.inputs import DEFAULT_BANDWIDTH_MBPS, DatasetInfo, SiteState
from placement.units import human_bytes, human_seconds

if TYPE_CHECKING:
    from placement.planner.context import _Context


class _Costs(NamedTuple):
    """Per site (by name): bytes to move and seconds; ``note(i)`` says it in words for site i
    ("" when there is nothing to say), built only when a candidate row is."""

    bytes: list[int]
    seconds: list[float]
    note: Callable[[int], str]


def _no_note(_: int) -> str:
    return ""


def _memo_note(note: Callable[[int], str], n: int) -> Callable[[int], str]:
    """``note`` computed at most once per site (the vectors are shared by many decisions)."""
    done: list[str | None] = [None] * n

    def cached(i: int) -> str:
        text = done[i]
        if text is None:
            text = done[i] = note(i)
        return text

    return cached


def _dataset_cost(ctx: _Context, d: DatasetInfo, site: str) -> tuple[int, float, str, bool]:
    """(bytes to move, seconds, source site, link known) to read dataset ``d`` at ``site`` from
    its best replica; source "" when it is local or has no replica."""
    best: tuple[float, int, str, bool] | None = None
    for r in d.replicas:
        size = r.bytes or d.bytes
        if r.site == site:
            return 0, 0.0, "", True
        t, known = ctx.transfer(r.site, site, size)
        cand = (t, size, r.site, known)
        if best is None or cand[:3] < best[:3]:
            best = cand
    if best is None:
        return 0, 0.0, "", True
    t, size, src, known = best
    return size, t, src, known


def _dataset_note(ctx: _Context, d: DatasetInfo, site: str) -> str:
    if not d.replicas:
        return f"dataset {d.name} has no replica"
    size, t, src, known = _dataset_cost(ctx, d, site)
    if not src:
        return f"dataset {d.name} local"
    link = "" if known else f", no link: assumed {DEFAULT_BANDWIDTH_MBPS:.0f} Mbit/s"
    return f"dataset {d.name} {human_bytes(size)} from {src} ({human_seconds(t)}{link})"


def _capacity(s: SiteState, req: Resources) -> tuple[float, bool]:
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


def _best(scores: list[float], idx: Sequence[int], costs: Sequence[_Costs], skip: int) -> int:
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
