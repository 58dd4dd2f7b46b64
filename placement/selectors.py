"""Read the inventory and the rules from the database as the planner's plain inputs.

The planner never touches the ORM: these selectors turn rows into its frozen dataclasses in a
fixed number of queries (one per table), whatever the fleet's size.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from django.db import connection

from placement import planner
from placement.models import PlacementRule
from sites.choices import ReplicaState
from sites.models import Dataset, DatasetReplica, Site, SiteLink


def site_state(site: Site) -> planner.SiteState:
    return planner.SiteState(
        name=site.name,
        region=site.region,
        zone=site.zone,
        provider=site.provider,
        labels={str(k): str(v) for k, v in (site.labels or {}).items()},
        capabilities=frozenset(str(c) for c in (site.capabilities or [])),
        ready=site.ready,
        cordoned=site.cordoned,
        taint=site.karmada_taint,
        cpu_allocatable=site.cpu_allocatable,
        cpu_allocated=site.cpu_allocated,
        memory_allocatable=site.memory_allocatable,
        memory_allocated=site.memory_allocated,
        gpu_allocatable=site.gpu_allocatable,
        gpu_allocated=site.gpu_allocated,
        pods_allocatable=site.pods_allocatable,
        pods_allocated=site.pods_allocated,
    )


def fleet_state() -> planner.Fleet:
    sites = tuple(site_state(s) for s in Site.objects.all())
    links = tuple(
        planner.Link(
            source=src,
            target=dst,
            bandwidth_mbps=float(bw),
            cost_per_gb=float(cost),
            latency_ms=float(lat),
            artifacts_reachable=bool(reachable),
            observed_mbps=float(observed) if observed else None,
        )
        for src, dst, bw, cost, lat, reachable, observed in SiteLink.objects.values_list(
            "source__name",
            "target__name",
            "bandwidth_mbps",
            "cost_per_gb",
            "latency_ms",
            "artifacts_reachable",
            "observed_mbps",
        )
    )
    return planner.Fleet(sites=sites, links=links)


def rule_inputs() -> list[planner.Rule]:
    return [
        planner.Rule(
            id=r.pk,
            name=r.name,
            effect=r.effect,  # type: ignore[arg-type]  # choices match planner.Effect
            selector=planner.Selector.from_dict(r.selector or {}),
            timing=r.timing,  # type: ignore[arg-type]
            params=r.parameters or {},
            weight=r.weight,
            order=r.order,
            enabled=r.enabled,
        )
        for r in PlacementRule.objects.filter(enabled=True).order_by("order", "name")
    ]


def dataset_inputs() -> list[planner.DatasetInfo]:
    replicas: dict[int, list[planner.Replica]] = {}
    for dataset_id, site, uri, nbytes in DatasetReplica.objects.filter(
        state=ReplicaState.READY
    ).values_list("dataset_id", "site__name", "uri", "bytes"):
        replicas.setdefault(dataset_id, []).append(
            planner.Replica(site=site, uri=uri, bytes=nbytes)
        )
    return [
        planner.DatasetInfo(
            name=d.name,
            uri_prefix=d.uri_prefix,
            bytes=d.bytes,
            residency=frozenset(d.residency or []),
            replicas=tuple(replicas.get(d.pk, ())),
            project=d.project.name if d.project else None,
        )
        for d in Dataset.objects.select_related("project")
    ]


# --------------------------------------------------------------------------------------------
# Everything a plan reads, reused while the tables are unchanged


@dataclass(frozen=True)
class PlannerInputs:
    fleet: planner.Fleet
    rules: planner.RuleBook
    datasets: planner.DataCatalogue


_INPUT_MODELS = (Site, SiteLink, PlacementRule, Dataset, DatasetReplica)
_cached: tuple[str, PlannerInputs] | None = None
_cached_lock = threading.Lock()


def _stamp_sql() -> str:
    # Every row version has its own (ctid, xmin): an insert, an update (even a second one in
    # the same transaction, which gets a new ctid) or a delete changes the aggregate. One
    # query over small tables instead of five reads and a rebuild of the rule book.
    parts = [
        f"(SELECT md5(coalesce(string_agg(ctid::text || xmin::text, ',' ORDER BY ctid), '')) "
        f"FROM {connection.ops.quote_name(m._meta.db_table)})"
        for m in _INPUT_MODELS
    ]
    return "SELECT " + " || ".join(parts)


def planner_inputs() -> PlannerInputs:
    """The fleet, rules and datasets as of now, built once per change of the tables.

    PostgreSQL only: the change stamp is read first and the inputs after it, so a change
    racing with a rebuild at worst costs one more rebuild, never a stale plan. Other databases
    (the embedded SQLite demo) read the tables every time.
    """
    global _cached
    if connection.vendor != "postgresql":
        return _build_inputs()
    with connection.cursor() as cursor:
        cursor.execute(_stamp_sql())
        row = cursor.fetchone()
    stamp = str(row[0]) if row else ""
    cached = _cached
    if cached is not None and cached[0] == stamp:
        return cached[1]
    with _cached_lock:
        inputs = _build_inputs()
        _cached = (stamp, inputs)
    return inputs


def planner_inputs_clear() -> None:
    """Forget the inputs: the next ``planner_inputs`` reads the tables (tests counting the
    queries of a cold read)."""
    global _cached
    with _cached_lock:
        _cached = None


def _build_inputs() -> PlannerInputs:
    return PlannerInputs(
        fleet=fleet_state(),
        rules=planner.RuleBook(rule_inputs()),
        datasets=planner.DataCatalogue(dataset_inputs()),
    )
