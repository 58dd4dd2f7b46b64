"""What units used and cost, as OpenCost counts it: a unit's resource-seconds are
its requests times its wall time (the larger of that and its actual usage where the member
reports it), its compute cost those times its site's prices. Transfer cost is what transfer units
actually moved: the bytes a copy reported, times the ``cost_per_gb`` of the link it
crossed (its producer's site to its relay); every other unit has none. A transfer that has not
reported its bytes yet (still running, or failed) has moved nothing the portal can price.

Money is ``Decimal``, never float. Each unit's compute and transfer costs are rounded to the
cent once (half up); a run's, a project's and a period's totals are sums of those rounded
figures, so every sum reconciles to the cent with the units it is made of.

``unit_cost`` is pure; the rest reads the database.
"""

from __future__ import annotations

import csv
import heapq
import io
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from portal.choices import UnitKind, UnitPhase
from portal.models import UnitRun, WorkflowRun
from portal.quotas.admission import Amount
from portal.quotas.models import SitePrice
from sites.models import SiteLink

CENT = Decimal("0.01")
HOUR = Decimal(3600)
GIB = Decimal(2**30)
GB = Decimal(10**9)
ZERO = Decimal(0)
# The key of a transfer unit's spec that says what it copies (``portal.selectors.transfers``).
TRANSFER_KIND = "transfer"


@dataclass(frozen=True)
class Prices:
    cpu_hour: Decimal = ZERO
    memory_gib_hour: Decimal = ZERO
    gpu_hour: Decimal = ZERO


@dataclass(frozen=True)
class Cost:
    """One unit's usage and cost."""

    seconds: Decimal
    cpu_seconds: Decimal
    memory_gib_seconds: Decimal
    gpu_seconds: Decimal
    bytes_moved: int
    compute: Decimal
    transfer: Decimal
    # The link a transfer's bytes crossed (``link_key``), "" for a step.
    link: str = ""

    @property
    def total(self) -> Decimal:
        return self.compute + self.transfer


def cents(value: Decimal) -> Decimal:
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


def unit_cost(
    request: Amount,
    seconds: Decimal,
    prices: Prices,
    *,
    bytes_moved: int = 0,
    cost_per_gb: Decimal = ZERO,
    link: str = "",
    actual: Amount | None = None,
) -> Cost:
    """``request`` held for ``seconds`` (``actual``: the average the member reported, when it
    did; each resource counts the larger of the two, as OpenCost does)."""
    seconds = max(seconds, ZERO)
    held = request
    if actual is not None:
        held = Amount(
            max(request.cpu, actual.cpu),
            max(request.memory, actual.memory),
            max(request.gpu, actual.gpu),
        )
    cpu_s = Decimal(held.cpu) / 1000 * seconds
    mem_s = Decimal(held.memory) / GIB * seconds
    gpu_s = Decimal(held.gpu) * seconds
    compute = (
        cpu_s * prices.cpu_hour + mem_s * prices.memory_gib_hour + gpu_s * prices.gpu_hour
    ) / HOUR
    return Cost(
        seconds=seconds,
        cpu_seconds=cpu_s,
        memory_gib_seconds=mem_s,
        gpu_seconds=gpu_s,
        bytes_moved=max(bytes_moved, 0),
        compute=cents(compute),
        transfer=transfer_cost(bytes_moved, cost_per_gb),
        link=link,
    )


def transfer_cost(nbytes: int, cost_per_gb: Decimal) -> Decimal:
    """``nbytes`` over a link at ``cost_per_gb`` (GB of 10^9 bytes, as clouds bill egress), in
    cents: the one rounding every figure of a transfer (REST unit, run, usage row) shares."""
    return cents(Decimal(max(nbytes, 0)) / GB * Decimal(cost_per_gb))


def link_key(source: str, target: str) -> str:
    """How usage rows, the CSV and the metrics name a link."""
    return f"{source}>{target}"


def transfer_bytes(outputs: Mapping[str, Any] | None) -> int | None:
    """The bytes a transfer unit reported it moved (its ``bytes`` output parameter), or None
    before it reported them."""
    for p in (outputs or {}).get("parameters") or []:
        if isinstance(p, dict) and p.get("name") == "bytes":
            try:
                return max(int(str(p.get("value", "")).strip()), 0)
            except ValueError:
                return None
    return None


def link_prices() -> dict[tuple[str, str], Decimal]:
    """``cost_per_gb`` of every link, by (source, target)."""
    return {
        (s, t): Decimal(c)
        for s, t, c in SiteLink.objects.values_list("source__name", "target__name", "cost_per_gb")
    }


def link_price(source: str, target: str) -> Decimal:
    found = (
        SiteLink.objects.filter(source__name=source, target__name=target)
        .values_list("cost_per_gb", flat=True)
        .first()
    )
    return Decimal(found) if found is not None else ZERO


def money(value: Decimal) -> str:
    return f"{cents(value):.2f}"


def currency() -> str:
    return str(getattr(settings, "PORTAL_CURRENCY", "EUR"))


@dataclass
class Row:
    """Usage and cost of a group of units (a run, a site, a user, a day)."""

    key: str
    units: int = 0
    cpu_seconds: Decimal = ZERO
    memory_gib_seconds: Decimal = ZERO
    gpu_seconds: Decimal = ZERO
    bytes_moved: int = 0
    compute: Decimal = ZERO
    transfer: Decimal = ZERO
    # Bytes moved by transfers, per link (``link_key``).
    links: dict[str, int] = field(default_factory=dict)

    def add(self, cost: Cost) -> None:
        self.units += 1
        self.cpu_seconds += cost.cpu_seconds
        self.memory_gib_seconds += cost.memory_gib_seconds
        self.gpu_seconds += cost.gpu_seconds
        self.bytes_moved += cost.bytes_moved
        self.compute += cost.compute
        self.transfer += cost.transfer
        if cost.link:
            self.links[cost.link] = self.links.get(cost.link, 0) + cost.bytes_moved

    @property
    def total(self) -> Decimal:
        return self.compute + self.transfer

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "units": self.units,
            "cpu_seconds": f"{self.cpu_seconds.quantize(Decimal('0.001'))}",
            "memory_gib_seconds": f"{self.memory_gib_seconds.quantize(Decimal('0.001'))}",
            "gpu_seconds": f"{self.gpu_seconds.quantize(Decimal('0.001'))}",
            "bytes_moved": self.bytes_moved,
            "bytes_by_link": dict(sorted(self.links.items())),
            "compute": money(self.compute),
            "transfer": money(self.transfer),
            "total": money(self.total),
        }


def site_prices() -> dict[str, Prices]:
    return {
        p.site.name: Prices(p.cpu_hour, p.memory_gib_hour, p.gpu_hour)
        for p in SitePrice.objects.select_related("site")
    }


# What a unit's cost is computed from (a run's units need no join to the run, its project
# and its owner: usage rows are grouped by those, a run's cost is not).
RUN_UNIT_COLUMNS = (
    "id",
    "name",
    "run_id",
    "site",
    "spec__resources",
    "started_at",
    "finished_at",
    "kind",
    "spec__transfer__from",
)
UNIT_COLUMNS = (*RUN_UNIT_COLUMNS, "run__project__name", "run__owner__username")


def costs(
    units: QuerySet[UnitRun],
    now: datetime | None = None,
    columns: tuple[str, ...] = UNIT_COLUMNS,
) -> Iterator[tuple[dict[str, Any], Cost]]:
    """Each unit that ran (it has a start) with its cost; a unit still running counts until
    ``now``. Group rows of a fan-out (their items ran) count nothing themselves, nor does a
    loop that expanded to no item (Skipped before any step workflow)."""
    now = now or timezone.now()
    rows = list(
        units.filter(started_at__isnull=False)
        .exclude(site="")
        .filter(expanded=False)
        .exclude(phase=UnitPhase.SKIPPED, workflow_name="")
        .order_by("id")
        .values(*columns)
    )
    prices = site_prices()
    links = link_prices()
    moved = _transfers_moved(rows)
    for u in rows:
        r = u["spec__resources"] or {}
        request = Amount(
            int(r.get("cpu_millicores") or 0),
            int(r.get("memory_bytes") or 0),
            int(r.get("gpus") or 0),
        )
        end = u["finished_at"] or now
        seconds = Decimal(str((end - u["started_at"]).total_seconds()))
        source = str(u["spec__transfer__from"] or "") if u["id"] in moved else ""
        yield (
            u,
            unit_cost(
                request,
                seconds,
                prices.get(u["site"], Prices()),
                bytes_moved=moved.get(u["id"], 0),
                cost_per_gb=links.get((source, u["site"]), ZERO),
                link=link_key(source, u["site"]) if source else "",
            ),
        )


def _transfers_moved(units: list[dict[str, Any]]) -> dict[int, int]:
    """Bytes each transfer unit among ``units`` reported (0 before it did); outputs are read
    for those alone (a step's can be large)."""
    ids = [u["id"] for u in units if u["kind"] == UnitKind.TRANSFER]
    out: dict[int, int] = {}
    for start in range(0, len(ids), 2000):
        for pk, outputs in UnitRun.objects.filter(pk__in=ids[start : start + 2000]).values_list(
            "pk", "outputs"
        ):
            out[pk] = transfer_bytes(outputs) or 0
    return out


def run_cost(run: WorkflowRun) -> dict[str, str]:
    """``{"compute", "transfer", "total", "currency"}`` of a run."""
    row = Row(key=run.name)
    for _, cost in costs(UnitRun.objects.filter(run=run), columns=RUN_UNIT_COLUMNS):
        row.add(cost)
    return _totals(row)


def run_cost_panel(run: WorkflowRun, shown: int) -> dict[str, Any]:
    """The run's cost and its ``shown`` costliest units (ties in unit order), from one read
    of its units: the page of a 10,000-unit run lists fifty, not ten thousand."""
    row = Row(key=run.name)
    priced: list[tuple[Decimal, dict[str, Any], Cost]] = []
    for u, cost in costs(UnitRun.objects.filter(run=run), columns=RUN_UNIT_COLUMNS):
        row.add(cost)
        priced.append((cost.total, u, cost))
    top = heapq.nlargest(shown, priced, key=lambda p: p[0])
    return {
        "cost": _totals(row),
        "unit_costs": [_unit_cost_row(u, cost) for _, u, cost in top],
        "unit_costs_total": len(priced),
    }


def _totals(row: Row) -> dict[str, str]:
    return {
        "compute": money(row.compute),
        "transfer": money(row.transfer),
        "total": money(row.total),
        "currency": currency(),
    }


def _unit_cost_row(u: Mapping[str, Any], cost: Cost) -> dict[str, Any]:
    return {
        "name": u["name"],
        "site": u["site"],
        "seconds": f"{cost.seconds.quantize(Decimal('0.001'))}",
        "cpu_seconds": f"{cost.cpu_seconds.quantize(Decimal('0.001'))}",
        "gpu_seconds": f"{cost.gpu_seconds.quantize(Decimal('0.001'))}",
        "bytes_moved": cost.bytes_moved,
        "link": cost.link,
        "link_from": cost.link.partition(">")[0],
        "compute": money(cost.compute),
        "transfer": money(cost.transfer),
        "total": money(cost.total),
    }


GROUPS = ("site", "run", "user", "day", "project")


def _group_key(group_by: str, u: Mapping[str, Any], run_names: Mapping[int, str]) -> str:
    if group_by == "site":
        return str(u["site"])
    if group_by == "run":
        return run_names.get(u["run_id"], str(u["run_id"]))
    if group_by == "user":
        return str(u["run__owner__username"])
    if group_by == "project":
        return str(u["run__project__name"] or "")
    start = u["finished_at"] or u["started_at"]
    return timezone.localdate(start).isoformat() if start else ""


def usage(units: QuerySet[UnitRun], group_by: str = "site") -> tuple[Row, list[Row]]:
    """The total and one row per group of ``units`` (``GROUPS``)."""
    total = Row(key="total")
    rows: dict[str, Row] = {}
    found = list(costs(units))
    run_names = dict(
        WorkflowRun.objects.filter(pk__in={u["run_id"] for u, _ in found}).values_list("pk", "name")
    )
    for u, cost in found:
        key = _group_key(group_by, u, run_names)
        rows.setdefault(key, Row(key=key)).add(cost)
        total.add(cost)
    return total, [rows[k] for k in sorted(rows)]


def in_period(
    units: QuerySet[UnitRun], start: date | datetime | None, end: date | datetime | None
) -> QuerySet[UnitRun]:
    """Units that ended in [start, end), and those still running when ``end`` is open."""
    if start is not None:
        units = units.filter(Q(finished_at__gte=start) | Q(finished_at__isnull=True))
    if end is not None:
        units = units.filter(finished_at__lt=end)
    return units


def as_csv(group_by: str, total: Row, rows: Iterable[Row]) -> str:
    """One line per row and the total; after ``bytes_moved``, one ``bytes <link>`` column per
    link any row's transfers crossed."""
    rows = list(rows)
    links = sorted({k for r in [*rows, total] for k in r.links})
    out = io.StringIO()
    columns = [
        group_by,
        "units",
        "cpu_seconds",
        "memory_gib_seconds",
        "gpu_seconds",
        "bytes_moved",
        "compute",
        "transfer",
        "total",
    ]
    writer = csv.writer(out)
    writer.writerow([*columns[:6], *(f"bytes {k}" for k in links), *columns[6:], "currency"])
    for row in [*rows, total]:
        d = row.as_dict()
        writer.writerow(
            [
                d["key"],
                *[d[c] for c in columns[1:6]],
                *[row.links.get(k, 0) for k in links],
                *[d[c] for c in columns[6:]],
                currency(),
            ]
        )
    return out.getvalue()
