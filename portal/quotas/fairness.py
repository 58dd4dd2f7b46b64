"""Why a unit waits at a site, in its queue's order: its project's units queued ahead of it, its
quotas, and, when it borrows, whether it passes what waits and its fair turn among the
projects that borrow."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from portal.quotas import admission
from portal.quotas.admission import Amount, SiteQuotas
from portal.quotas.models import Workload
from portal.quotas.queue import queue_key


@dataclass
class Waiter:
    """A project's head of the queue at a site: what it asks for."""

    project: str
    request: Amount


def heads(queue: Iterable[Workload], project: str) -> dict[str, Waiter]:
    """Other projects' heads of the queue at a site, for fair sharing of what is borrowed."""
    heads: dict[str, Waiter] = {}
    for w in sorted(queue, key=queue_key):
        if w.project.name != project and w.project.name not in heads:
            heads[w.project.name] = Waiter(
                w.project.name, Amount(w.cpu_millicores, w.memory_bytes, w.gpus)
            )
    return heads


def why_it_waits(
    project: str,
    site: str,
    priority: int,
    request: Amount,
    quotas: Sequence[SiteQuotas],
    ahead: Mapping[tuple[int, Amount], None],
    heads: Mapping[str, Waiter],
    blocked: str | None,
) -> str | None:
    """Why a unit of ``project`` waits at ``site`` (None: it is admitted): the project's units
    queued ahead of it, its quotas, and, when it borrows, whether it passes what waits (only
    units within the nominal quota do) and its fair turn among the projects that borrow."""
    why = _ahead_waits(project, site, priority, ahead, quotas)
    if why is None:
        why = admission.fits_all(project, request, quotas)
    if (
        why is None
        and (ahead or blocked is not None)
        and admission.borrows_any(project, request, quotas)
    ):
        return blocked or f"{project}: earlier units wait for quota at {site} before this one"
    if why is None and admission.borrows_any(project, request, quotas):
        borrowers = [
            h.project
            for h in heads.values()
            if admission.fits_all(h.project, h.request, quotas) is None
            and admission.borrows_any(h.project, h.request, quotas)
        ]
        if not admission.fair_turn_all(project, borrowers, quotas):
            return (
                f"{project} borrows at {site} while projects borrowing less wait; "
                "waiting for its fair share"
            )
    return why


def _ahead_waits(
    project: str,
    site: str,
    priority: int,
    ahead: Mapping[tuple[int, Amount], None],
    quotas: Sequence[SiteQuotas],
) -> str | None:
    """Why a unit must wait for the project's units queued before it at the site (None: it
    may go). A unit of higher priority always goes first; one of the same priority that
    fits now goes first (its run is being advanced too); one that does not fit is passed by a
    smaller unit that fits within the nominal quota (Kueue's BestEffortFIFO)."""
    if any(p > priority for p, _ in ahead):
        return f"{project}: higher-priority units wait for quota at {site} before this one"
    if any(admission.fits_all(project, size, quotas) is None for _, size in ahead):
        return f"{project}: earlier units wait for quota at {site} before this one"
    return None


def behind(why: str, project: str, site: str) -> str:
    if why.endswith("waiting for quota") or "before this one" in why:
        return why
    return f"{project}: earlier units wait for quota at {site} before this one"
