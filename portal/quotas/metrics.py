"""Prometheus figures of a shared fleet, refreshed by ``/metrics``: usage and cost
per project and site since the portal's records began, quota held and units queued.

Usage and cost are read from every unit that ran; a scrape within ``REFRESH_SECONDS`` of the
last reuses its figures, so a scraper every few seconds does not read the table each time.
They are gauges named ``..._total`` (the issue's names): a counter cannot be set from the
database, and each value only grows unless runs are deleted."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from decimal import Decimal

from prometheus_client import Gauge

from portal.models import UnitRun
from portal.quotas import overview, usage

REFRESH_SECONDS = 30.0

CPU_SECONDS = Gauge(
    "portal_usage_cpu_seconds_total",
    "CPU-seconds of units (requests x wall time)",
    ["project", "site"],
)
MEMORY_SECONDS = Gauge(
    "portal_usage_memory_gib_seconds_total", "GiB-seconds of units", ["project", "site"]
)
GPU_SECONDS = Gauge("portal_usage_gpu_seconds_total", "GPU-seconds of units", ["project", "site"])
COST = Gauge(
    "portal_cost_total",
    "Cost of units in the portal's currency, by kind (compute, transfer)",
    ["project", "site", "kind"],
)
TRANSFER_BYTES = Gauge(
    "portal_transfer_bytes_total",
    "Bytes transfer units moved, by link (source site, relay site)",
    ["project", "source", "target"],
)
QUOTA_CPU_USED = Gauge(
    "portal_quota_cpu_used", "CPUs a project's admitted units hold at a site", ["project", "site"]
)
QUOTA_CPU = Gauge(
    "portal_quota_cpu", "A project's nominal CPU quota at a site", ["project", "site"]
)
QUEUED = Gauge("portal_quota_queued_units", "Units queued for quota", ["project", "site"])

_lock = threading.Lock()
_last = 0.0


def refresh(force: bool = False) -> None:
    global _last
    with _lock:
        if not force and time.monotonic() - _last < REFRESH_SECONDS:
            return
        _last = time.monotonic()
    sums: dict[tuple[str, str], list[Decimal]] = defaultdict(lambda: [Decimal(0)] * 5)
    moved: dict[tuple[str, str], int] = defaultdict(int)
    for u, cost in usage.costs(UnitRun.objects.all()):
        row = sums[(str(u["run__project__name"] or ""), str(u["site"]))]
        if cost.link:
            moved[(str(u["run__project__name"] or ""), cost.link)] += cost.bytes_moved
        for i, value in enumerate(
            (
                cost.cpu_seconds,
                cost.memory_gib_seconds,
                cost.gpu_seconds,
                cost.compute,
                cost.transfer,
            )
        ):
            row[i] += value
    for (project, site), (cpu, mem, gpu, compute, transfer) in sums.items():
        CPU_SECONDS.labels(project=project, site=site).set(float(cpu))
        MEMORY_SECONDS.labels(project=project, site=site).set(float(mem))
        GPU_SECONDS.labels(project=project, site=site).set(float(gpu))
        COST.labels(project=project, site=site, kind="compute").set(float(compute))
        COST.labels(project=project, site=site, kind="transfer").set(float(transfer))
    for (project, link), nbytes in moved.items():
        source, _, target = link.partition(">")
        TRANSFER_BYTES.labels(project=project, source=source, target=target).set(nbytes)
    for held in overview.quota_rows():
        q = held["quota"]
        labels = {"project": q.project.name, "site": held["where"]}
        QUOTA_CPU.labels(**labels).set(q.cpu_millicores / 1000)
        QUOTA_CPU_USED.labels(**labels).set(held["used"].cpu / 1000)
        QUEUED.labels(**labels).set(held["queued"])
