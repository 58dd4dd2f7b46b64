"""A decision's candidate table: the numbers now, the rows (with their words) on first access."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any, NamedTuple

from placement.planner.inputs import SiteState
from placement.planner.scoring import Costs
from placement.units import human_bytes, human_seconds


class Candidate(NamedTuple):
    """One row of a decision's candidate table (the REST shape of DESIGN section 9)."""

    site: str
    eligible: bool
    why: str
    score: float | None
    bytes_to_move: int
    est_transfer_s: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "site": self.site,
            "eligible": self.eligible,
            "why": self.why,
            "score": self.score,
            "bytes_to_move": self.bytes_to_move,
            "est_transfer_s": self.est_transfer_s,
        }


class CandidateTable:
    """A decision's candidate table: numbers now (for eligible sites: positions ``idx`` in the
    site list, their ``scores`` and transfer ``seconds``), rows with their text on first access."""

    __slots__ = (
        "_rows",
        "cap_notes",
        "capacity",
        "costs",
        "elig",
        "has_inputs",
        "idx",
        "n_data",
        "scores",
        "seconds",
        "sites",
    )

    def __init__(
        self,
        sites: Sequence[SiteState],
        elig: list[str | None],
        capacity: tuple[list[float], list[str]],
        costs: Sequence[Costs],
        idx: list[int],
        scores: list[float],
        seconds: list[float],
        has_inputs: bool,
        n_data: int = 0,
    ) -> None:
        self.sites = sites
        self.n_data = n_data  # how many of ``costs`` (first) are dataset costs: 0 or 1
        self.elig = elig
        self.capacity, self.cap_notes = capacity
        self.costs = costs
        self.idx = idx
        self.scores = scores
        self.seconds = seconds
        self.has_inputs = has_inputs
        self._rows: tuple[Candidate, ...] | None = None

    @property
    def any_eligible(self) -> bool:
        return bool(self.idx)

    def bytes_at(self, i: int) -> int:
        return sum(c.bytes[i] for c in self.costs)

    def rows(self) -> tuple[Candidate, ...]:
        if self._rows is None:
            numbers = dict(zip(self.idx, zip(self.scores, self.seconds, strict=True), strict=True))
            self._rows = tuple(self._row(i, numbers) for i in range(len(self.sites)))
        return self._rows

    def _row(self, i: int, numbers: dict[int, tuple[float, float]]) -> Candidate:
        # tuple.__new__ skips NamedTuple's Python-level __new__: rows are built by the
        # hundred thousand for a large preview.
        s = self.sites[i]
        why = self.elig[i]
        if why is not None:
            return tuple.__new__(Candidate, (s.name, False, why, None, 0, 0.0))
        score, seconds = numbers[i]
        costs = self.costs
        fallback = "data local" if self.has_inputs else "no input data"
        if not costs:
            notes, moved = fallback, 0
        elif len(costs) == 1:
            notes, moved = costs[0].note(i) or fallback, costs[0].bytes[i]
        else:
            notes, moved = self._combined(i, fallback)
        return tuple.__new__(
            Candidate,
            (
                s.name,
                True,
                f"{self.cap_notes[i]}; {notes}",
                round(score, 4),
                moved,
                round(seconds, 1),
            ),
        )

    def top(self, k: int, chosen: str | None = None) -> tuple[Candidate, ...]:
        """The ``k`` best eligible rows (by score, best first; the chosen site always among
        them), built without building the rest: a preview of thousands of units over hundreds
        of sites shows these inline and the full table on request."""
        if self._rows is not None or len(self.sites) <= k:
            rows = self.rows()
            if len(rows) <= k:
                return rows
        numbers = dict(zip(self.idx, zip(self.scores, self.seconds, strict=True), strict=True))
        best = heapq.nlargest(k, self.idx, key=lambda i: (numbers[i][0], -i))
        if chosen is not None and not any(self.sites[i].name == chosen for i in best):
            at = next((i for i in self.idx if self.sites[i].name == chosen), None)
            if at is not None:
                best = [*best[: k - 1], at] if k > 0 else [at]
        return tuple(self._row(i, numbers) for i in best)

    @property
    def size(self) -> int:
        return len(self.sites)

    @property
    def eligible_count(self) -> int:
        return len(self.idx)

    def _combined(self, i: int, fallback: str) -> tuple[str, int]:
        """Notes and bytes for a site when several inputs move: the dataset note as is, the
        upstream outputs summed into one note (one line per upstream would be long and slow)."""
        data = self.costs[: self.n_data]
        ups = self.costs[self.n_data :]
        parts = [data[0].note(i)] if data else []
        moved_up = 0
        seconds_up = 0.0
        moving = [c for c in ups if c.bytes[i]]
        for c in moving:
            moved_up += c.bytes[i]
            seconds_up += c.seconds[i]
        sources = len(moving)
        if sources == 1:
            parts.append(moving[0].note(i))
        elif sources:
            parts.append(
                f"upstream outputs {human_bytes(moved_up)} from {sources} other sites "
                f"({human_seconds(seconds_up)})"
            )
        moved = moved_up + (data[0].bytes[i] if data else 0)
        return "; ".join([p for p in parts if p]) or fallback, moved

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CandidateTable) and self.rows() == other.rows()

    def __hash__(self) -> int:
        return hash(self.rows())
