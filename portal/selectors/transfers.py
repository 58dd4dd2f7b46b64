"""Reads of transfer units (a copy to a repository the reader can reach) as the REST API and
the pages show them: what a copy moved, in how long, at what cost."""

from __future__ import annotations

from typing import Any

from portal.choices import UnitKind, UnitPhase
from portal.models import UnitRun, WorkflowRun
from portal.quotas import usage

TRANSFER = usage.TRANSFER_KIND


def unit_is_transfer(unit: UnitRun) -> bool:
    return unit.kind == UnitKind.TRANSFER


def transfer_measured(unit: UnitRun) -> dict[str, Any]:
    """The transfer as the REST API and the pages show it: ``from``, ``to``, ``bytes``,
    ``seconds``, ``cost`` (actual once it succeeded, else the estimate) and the estimate."""
    info = (unit.spec or {}).get(TRANSFER) or {}
    estimate = info.get("estimate") or {}
    nbytes = usage.transfer_bytes(unit.outputs)
    seconds: float | None = None
    if unit.started_at and unit.finished_at and unit.phase == UnitPhase.SUCCEEDED:
        seconds = max((unit.finished_at - unit.started_at).total_seconds(), 0.0)
    actual = nbytes if nbytes is not None else int(estimate.get("bytes") or 0)
    source, relay = str(info.get("from", "")), unit.site or str(info.get("to", ""))
    # Priced as the run's cost and the usage rows price it, to the cent.
    cost = usage.transfer_cost(actual, usage.link_price(source, relay))
    return {
        "from": source,
        "to": relay,
        "bytes": actual,
        "seconds": seconds if seconds is not None else estimate.get("seconds"),
        "cost": usage.money(cost),
        "estimate": estimate,
        "measured": nbytes is not None and seconds is not None,
    }


def run_transfers_moved(run: WorkflowRun) -> dict[str, dict[str, Any]]:
    """``transfer_measured`` of each of the run's transfer units, by name (the run page's
    timeline labels a copy's bar with what it moved). A run has a few, read in one query."""
    return {u.name: transfer_measured(u) for u in run.units.filter(kind=UnitKind.TRANSFER)}
