"""Budgets per project and calendar month: what was spent (the usage of its units
that ended this month, and of those still running until now), a submission's estimate, the
80 % warning and the optional hard stop.

A submission's estimate is each unit's requests times the mean wall time of the last units of
the same template in the project (no history: not counted, and the estimate says how many),
at the prices of the site it was planned at, plus the planned transfers: each copy's
estimated bytes at its link's ``cost_per_gb``, priced as the run's cost will price it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from statistics import fmean

from django.utils import timezone

from portal.models import UnitRun
from portal.quotas import usage
from portal.quotas.admission import Amount
from portal.quotas.models import Budget
from sites.models import Project

WARN_AT = Decimal("0.8")
HISTORY = 50


@dataclass(frozen=True)
class Standing:
    monthly: Decimal
    spent: Decimal
    hard_stop: bool
    since: datetime

    @property
    def left(self) -> Decimal:
        return self.monthly - self.spent

    @property
    def warn(self) -> bool:
        return self.spent >= self.monthly * WARN_AT

    def as_dict(self) -> dict[str, object]:
        return {
            "monthly": usage.money(self.monthly),
            "spent": usage.money(self.spent),
            "left": usage.money(self.left),
            "since": self.since.isoformat(),
            "hard_stop": self.hard_stop,
            "warning": self.warn,
        }


def month_start(now: datetime | None = None) -> datetime:
    now = timezone.localtime(now or timezone.now())
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def standing(project: Project | None) -> Standing | None:
    if project is None:
        return None
    budget = Budget.objects.filter(project=project).first()
    if budget is None:
        return None
    since = month_start()
    units = usage.in_period(UnitRun.objects.filter(run__project=project), since, None)
    total, _ = usage.usage(units, "project")
    return Standing(budget.monthly, total.total, budget.hard_stop, since)


@dataclass(frozen=True)
class Estimate:
    compute: Decimal
    unknown: int  # units without history, not counted
    transfer: Decimal = Decimal(0)

    @property
    def total(self) -> Decimal:
        return self.compute + self.transfer


def estimate(
    project: Project | None,
    units: Iterable[tuple[str, Amount, str]],
    transfers: Iterable[tuple[str, str, int]] = (),
) -> Estimate:
    """``units``: (template, requests, planned site) of a submission; ``transfers``: (source,
    relay, estimated bytes) of the copies its plan implies."""
    items = list(units)
    copies = list(transfers)
    links = usage.link_prices() if copies else {}
    moved = sum(
        (usage.transfer_cost(n, links.get((s, r), usage.ZERO)) for s, r, n in copies),
        Decimal(0),
    )
    if project is None or not items:
        return Estimate(Decimal(0), 0, moved)
    means = _mean_seconds(project, {t for t, _, _ in items})
    prices = usage.site_prices()
    total, unknown = Decimal(0), 0
    for template, request, site in items:
        seconds = means.get(template)
        if seconds is None or not site:
            unknown += 1
            continue
        total += usage.unit_cost(request, seconds, prices.get(site, usage.Prices())).compute
    return Estimate(total, unknown, moved)


def _mean_seconds(project: Project, templates: set[str]) -> Mapping[str, Decimal]:
    out: dict[str, Decimal] = {}
    for template in templates:
        rows = list(
            UnitRun.objects.filter(
                run__project=project,
                template=template,
                started_at__isnull=False,
                finished_at__isnull=False,
            )
            .order_by("-finished_at")
            .values_list("started_at", "finished_at")[:HISTORY]
        )
        spans = [(f - s).total_seconds() for s, f in rows if s is not None and f is not None]
        if spans:
            out[template] = Decimal(str(fmean(spans)))
    return out
