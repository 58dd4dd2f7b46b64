"""Whether a unit fits its project's quota at a site, and why not: pure code, no Django.

The rules (Kueue's ClusterQueue within a cohort, without preemption; see docs/decisions.md):

* a project with no quota at a site is not limited there;
* within its nominal quota a project is always admitted, whatever the others borrow: so a
  project within its nominal quota is never blocked by another's borrowing (without
  preemption, the site may then hold more than the sum of nominal quotas for a while, and the
  member's scheduler queues the difference, as it would without quotas);
* above its nominal quota it borrows: at most its borrowing limit (none: no limit), and only
  what the other projects with a quota at the site leave unused (the cohort's nominal total is
  never exceeded by borrowing);
* when several projects wait to borrow at one site, the one with the smallest weighted
  dominant share of what it already borrows goes first (dominant-resource fairness over CPU,
  memory and GPUs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

RESOURCES = ("cpu", "memory", "gpu")

# Units of the same priority tried, in one admission pass, behind one that does not fit: a
# smaller one that fits within its project's nominal quota goes first (Kueue's
# BestEffortFIFO), at a bounded cost per pass.
LOOKAHEAD = 20


@dataclass(frozen=True)
class Amount:
    """CPU in millicores, memory in bytes, GPUs."""

    cpu: int = 0
    memory: int = 0
    gpu: int = 0

    def __add__(self, other: Amount) -> Amount:
        return Amount(self.cpu + other.cpu, self.memory + other.memory, self.gpu + other.gpu)

    def get(self, resource: str) -> int:
        return int(getattr(self, resource))

    def over(self, limit: Amount) -> Amount:
        """How much of each resource is above ``limit`` (0 where within it)."""
        return Amount(*(max(0, self.get(r) - limit.get(r)) for r in RESOURCES))

    def within(self, limit: Amount) -> bool:
        return all(self.get(r) <= limit.get(r) for r in RESOURCES)

    @property
    def empty(self) -> bool:
        return not (self.cpu or self.memory or self.gpu)


def total(amounts: Iterable[Amount]) -> Amount:
    out = Amount()
    for a in amounts:
        out = out + a
    return out


@dataclass(frozen=True)
class Limit:
    """A project's quota at a site. ``borrowing``: per resource, None is no limit."""

    nominal: Amount
    borrowing: tuple[int | None, int | None, int | None] = (None, None, None)
    weight: Decimal = Decimal(1)

    def borrow_limit(self, resource: str) -> int | None:
        return self.borrowing[RESOURCES.index(resource)]


@dataclass(frozen=True)
class SiteQuotas:
    """One site's quotas (by project) and what each project's admitted units hold there."""

    site: str
    limits: Mapping[str, Limit]
    used: Mapping[str, Amount]

    def used_by(self, project: str) -> Amount:
        return self.used.get(project, Amount())

    def lendable(self, project: str, resource: str) -> int:
        """What the cohort can still lend ``project``: its nominal total less what every
        project holds there (the borrower's own nominal quota included on both sides)."""
        nominal = sum(lim.nominal.get(resource) for lim in self.limits.values())
        held = sum(self.used_by(p).get(resource) for p in self.limits)
        return nominal - held

    def borrowed_share(self, project: str) -> Decimal:
        """Weighted dominant share of what ``project`` borrows at the site (0 within its
        nominal quota): the largest, over resources, of borrowed / cohort nominal total."""
        limit = self.limits[project]
        over = self.used_by(project).over(limit.nominal)
        share = Decimal(0)
        for r in RESOURCES:
            pool = sum(lim.nominal.get(r) for lim in self.limits.values())
            if pool and over.get(r):
                share = max(share, Decimal(over.get(r)) / Decimal(pool))
        return share / limit.weight


def fits(project: str, request: Amount, quotas: SiteQuotas) -> str | None:
    """None when ``request`` may be admitted for ``project`` at the site now; otherwise why
    not, in the words the run page shows."""
    limit = quotas.limits.get(project)
    if limit is None:
        return None
    used = quotas.used_by(project)
    after = used + request
    if after.within(limit.nominal):
        return None
    for r in RESOURCES:
        above = after.get(r) - limit.nominal.get(r)
        if above <= 0:
            continue
        cap = limit.borrow_limit(r)
        if cap is not None and request.get(r) > limit.nominal.get(r) + cap:
            asked, most = quantity(r, request.get(r)), quantity(r, limit.nominal.get(r) + cap)
            return (
                f"it asks for {asked} {UNITS[r]}, more than {project}'s quota at "
                f"{quotas.site} ever allows ({most} with borrowing); an operator must raise it"
            )
        if cap is not None and above > cap:
            return _reason(project, quotas.site, r, used, limit, borrowing=cap)
        if request.get(r) > quotas.lendable(project, r):
            return _reason(project, quotas.site, r, used, limit, cohort=True)
    return None


def borrows(project: str, request: Amount, quotas: SiteQuotas) -> bool:
    """Whether admitting ``request`` takes ``project`` above its nominal quota."""
    limit = quotas.limits.get(project)
    return limit is not None and not (quotas.used_by(project) + request).within(limit.nominal)


def admit_with(quotas: SiteQuotas, project: str, request: Amount) -> SiteQuotas:
    """The site's quotas after ``request`` was admitted for ``project``."""
    used = dict(quotas.used)
    used[project] = quotas.used_by(project) + request
    return SiteQuotas(quotas.site, quotas.limits, used)


def fair_turn(project: str, waiting: Iterable[str], quotas: SiteQuotas) -> bool:
    """Whether ``project`` may borrow now while ``waiting`` projects also wait to borrow at
    the site: none of them borrows a smaller weighted dominant share (ties: by name, so that
    every worker agrees)."""
    if project not in quotas.limits:
        return True
    mine = (quotas.borrowed_share(project), project)
    return all(
        mine <= (quotas.borrowed_share(other), other)
        for other in waiting
        if other != project and other in quotas.limits
    )


def fits_all(project: str, request: Amount, scopes: Sequence[SiteQuotas]) -> str | None:
    """``fits`` against every quota covering a site (its own, its groups'): the first why not."""
    for quotas in scopes:
        why = fits(project, request, quotas)
        if why is not None:
            return why
    return None


def borrows_any(project: str, request: Amount, scopes: Sequence[SiteQuotas]) -> bool:
    return any(borrows(project, request, q) for q in scopes)


def admit_all(scopes: Sequence[SiteQuotas], project: str, request: Amount) -> list[SiteQuotas]:
    return [admit_with(q, project, request) for q in scopes]


def fair_turn_all(project: str, waiting: Iterable[str], scopes: Sequence[SiteQuotas]) -> bool:
    """``fair_turn`` in every scope where ``project`` would borrow."""
    others = list(waiting)
    return all(fair_turn(project, others, q) for q in scopes)


UNITS = {"cpu": "CPU", "memory": "memory", "gpu": "GPUs"}


def quantity(resource: str, value: int) -> str:
    """A figure as people read it: cores, GiB, GPUs (at most three decimals, no trailing 0)."""
    if resource == "cpu":
        number = Decimal(value) / 1000
    elif resource == "memory":
        number = Decimal(value) / Decimal(2**30)
    else:
        number = Decimal(value)
    text = f"{number.quantize(Decimal('0.001')).normalize():f}"
    return f"{text}Gi" if resource == "memory" else text


def _reason(
    project: str,
    site: str,
    resource: str,
    used: Amount,
    limit: Limit,
    *,
    borrowing: int | None = None,
    cohort: bool = False,
) -> str:
    what = UNITS[resource]
    held = quantity(resource, used.get(resource))
    nominal = quantity(resource, limit.nominal.get(resource))
    text = f"{project} uses {held} of {nominal} {what} at {site}"
    if borrowing is not None and borrowing > 0:
        text += f" (and may borrow {quantity(resource, borrowing)} more)"
    elif cohort:
        text += " (the other projects' unused quota there is taken)"
    return f"{text}; waiting for quota"
