"""What the planner returns: a ``Decision`` per unit with its candidate table, and a ``Plan``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from placement.planner.inputs import Timing
from placement.planner.table import Candidate, CandidateTable


@dataclass(frozen=True)
class Decision:
    """Where one unit goes. ``site`` is None when the unit is left to runtime (``timing`` runtime,
    in a plan) or when no site is eligible (``timing`` submit: unplaceable).

    ``candidates`` has one row per site, by site name. Scores, bytes and times are computed when
    the decision is made; the rows (and their ``why`` text) are built on first access, because a
    plan of thousands of units is mostly read for its chosen sites.
    """

    unit: str
    template: str
    depends: str
    timing: Timing
    site: str | None
    reason: str
    table: CandidateTable = field(repr=False)
    rules: tuple[str, ...] = ()
    datasets: tuple[str, ...] = ()
    # For a runtime unit in a plan: where it would go if decided now (later units plan with it).
    runtime_hint: str | None = None

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        return self.table.rows()

    @property
    def unplaceable(self) -> bool:
        return self.site is None and self.runtime_hint is None and not self.table.any_eligible

    def as_dict(self, top: int | None = None) -> dict[str, Any]:
        """The REST shape of one unit in ``POST /api/v1/runs/preview/`` (DESIGN section 9).

        ``top``: when the table has more rows, ``candidates`` holds only the ``top`` best
        eligible ones (best first, the chosen site among them), and ``candidates_total`` and
        ``candidates_eligible`` say how many the full table has (the API serves it per unit).
        """
        out: dict[str, Any] = {
            "name": self.unit,
            "template": self.template,
            "depends": self.depends,
            "timing": self.timing,
            "site": self.site,
            "reason": self.reason,
        }
        if top is None or self.table.size <= top:
            out["candidates"] = [c.as_dict() for c in self.candidates]
            return out
        out["candidates"] = [
            c.as_dict() for c in self.table.top(top, self.site or self.runtime_hint)
        ]
        out["candidates_total"] = self.table.size
        out["candidates_eligible"] = self.table.eligible_count
        return out


@dataclass(frozen=True)
class Plan:
    decisions: tuple[Decision, ...]

    def by_unit(self) -> dict[str, Decision]:
        return {d.unit: d for d in self.decisions}

    def as_dict(self, top: int | None = None) -> dict[str, Any]:
        return {"units": [d.as_dict(top) for d in self.decisions]}
