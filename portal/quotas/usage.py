"""What units used and cost (issue 32), as OpenCost counts it: a unit's resource-seconds are
its requests times its wall time (the larger of that and its actual usage where the member
reports it), its compute cost those times its site's prices; its transfer cost the bytes moved
to its site times the link's ``cost_per_gb``.

Money is ``Decimal``, never float. Each unit's compute and transfer costs are rounded to the
cent once (half up); a run's, a project's and a period's totals are sums of those rounded
figures, so every sum reconciles to the cent with the units it is made of.

``unit_cost`` is pure; the rest reads the database.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from portal.models import CandidateTable, PlacementDecision, UnitRun, WorkflowRun
from portal.quotas.admission import Amount
from portal.quotas.models import SitePrice
from sites.models import SiteLink

CENT = Decimal("0.01")
HOUR = Decimal(3600)
GIB = Decimal(2**30)
GB = Decimal(10**9)
ZERO = Decimal(0)


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
    transfer = Decimal(max(bytes_moved, 0)) / GB * cost_per_gb
    return Cost(
        seconds=seconds,
        cpu_seconds=cpu_s,
        memory_gib_seconds=mem_s,
        gpu_seconds=gpu_s,
        bytes_moved=max(bytes_moved, 0),
        compute=cents(compute),
        transfer=cents(transfer),
    )


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
    members: list[int] = field(default_factory=list)

    def add(self, cost: Cost) -> None:
        self.units += 1
        self.cpu_seconds += cost.cpu_seconds
        self.memory_gib_seconds += cost.memory_gib_seconds
        self.gpu_seconds += cost.gpu_seconds
        self.bytes_moved += cost.bytes_moved
        self.compute += cost.compute
        self.transfer += cost.transfer

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
            "compute": money(self.compute),
            "transfer": money(self.transfer),
            "total": money(self.total),
        }


def site_prices() -> dict[str, Prices]:
    return {
        p.site.name: Prices(p.cpu_hour, p.memory_gib_hour, p.gpu_hour)
        for p in SitePrice.objects.select_related("site")
    }


def _link_prices() -> dict[str, Decimal]:
    """The dearest ``cost_per_gb`` of any link into each site: what the bytes the planner
    counted to move there are priced at (the planner's table does not say from where)."""
    out: dict[str, Decimal] = {}
    for target, cost in SiteLink.objects.values_list("target__name", "cost_per_gb"):
        out[target] = max(out.get(target, ZERO), Decimal(cost))
    return out


def _bytes_moved(units: list[dict[str, Any]]) -> dict[int, int]:
    """Bytes the newest decision of each unit counted to move to the site it ran at. A
    fan-out's decisions share a few candidate tables: each is read once."""
    site_of = {u["id"]: u["site"] for u in units}
    ids = list(site_of)
    newest: dict[int, tuple[int | None, list[dict[str, Any]]]] = {}
    for start in range(0, len(ids), 2000):
        rows = (
            PlacementDecision.objects.filter(unit_id__in=ids[start : start + 2000])
            .order_by("unit_id", "-id")
            .values_list("unit_id", "shared_table_id", "candidates")
        )
        for unit_id, shared, listed in rows:
            if unit_id is not None and unit_id not in newest:
                newest[unit_id] = (shared, listed or [])
    tables = dict(
        CandidateTable.objects.filter(
            pk__in={t for t, _ in newest.values() if t is not None}
        ).values_list("pk", "rows")
    )
    out: dict[int, int] = {}
    chosen: dict[tuple[int, str], int] = {}
    for uid, (table_id, candidates) in newest.items():
        site = site_of[uid]
        if table_id is not None and (table_id, site) in chosen:
            out[uid] = chosen[(table_id, site)]
            continue
        table: list[dict[str, Any]] = (
            list(tables.get(table_id) or []) if table_id is not None else candidates
        )
        found = next((r for r in table if r.get("site") == site), None)
        out[uid] = int((found or {}).get("bytes_to_move") or 0)
        if table_id is not None:
            chosen[(table_id, site)] = out[uid]
    return out


UNIT_COLUMNS = (
    "id",
    "name",
    "run_id",
    "site",
    "spec__resources",
    "started_at",
    "finished_at",
    "run__project__name",
    "run__owner__username",
)


def costs(
    units: QuerySet[UnitRun], now: datetime | None = None
) -> Iterator[tuple[dict[str, Any], Cost]]:
    """Each unit that ran (it has a start) with its cost; a unit still running counts until
    ``now``. Group rows of a fan-out (their items ran) count nothing themselves."""
    now = now or timezone.now()
    rows = list(
        units.filter(started_at__isnull=False)
        .exclude(site="")
        .filter(Q(spec__expanded__isnull=True))
        .order_by("id")
        .values(*UNIT_COLUMNS)
    )
    prices = site_prices()
    links = _link_prices()
    moved = _bytes_moved(rows)
    for u in rows:
        r = u["spec__resources"] or {}
        request = Amount(
            int(r.get("cpu_millicores") or 0),
            int(r.get("memory_bytes") or 0),
            int(r.get("gpus") or 0),
        )
        end = u["finished_at"] or now
        seconds = Decimal(str((end - u["started_at"]).total_seconds()))
        yield (
            u,
            unit_cost(
                request,
                seconds,
                prices.get(u["site"], Prices()),
                bytes_moved=moved.get(u["id"], 0),
                cost_per_gb=links.get(u["site"], ZERO),
            ),
        )


def run_cost(run: WorkflowRun) -> dict[str, str]:
    """``{"compute", "transfer", "total", "currency"}`` of a run, and its units' figures."""
    row = Row(key=run.name)
    for _, cost in costs(UnitRun.objects.filter(run=run)):
        row.add(cost)
    return {
        "compute": money(row.compute),
        "transfer": money(row.transfer),
        "total": money(row.total),
        "currency": currency(),
    }


def run_unit_costs(run: WorkflowRun) -> list[dict[str, Any]]:
    out = []
    for u, cost in costs(UnitRun.objects.filter(run=run)):
        out.append(
            {
                "name": u["name"],
                "site": u["site"],
                "seconds": f"{cost.seconds.quantize(Decimal('0.001'))}",
                "cpu_seconds": f"{cost.cpu_seconds.quantize(Decimal('0.001'))}",
                "gpu_seconds": f"{cost.gpu_seconds.quantize(Decimal('0.001'))}",
                "bytes_moved": cost.bytes_moved,
                "compute": money(cost.compute),
                "transfer": money(cost.transfer),
                "total": money(cost.total),
            }
        )
    return out


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
        "currency",
    ]
    writer = csv.writer(out)
    writer.writerow(columns)
    for row in [*rows, total]:
        d = row.as_dict()
        writer.writerow([d["key"], *[d[c] for c in columns[1:-1]], currency()])
    return out.getvalue()
