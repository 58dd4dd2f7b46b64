"""Residency for everything derived (issue #17, item 5): outputs computed from a
residency-bound dataset inherit its residency, so every unit downstream is bound too, and the
decision says so."""

from __future__ import annotations

import pytest

from placement import planner
from placement.parser import Resources, Unit
from placement.planner.relays import cached_relay
from tests.placement.planned_units import task_unit

CPU = 1000


def _unit(name: str, upstream: tuple[str, ...] = (), datasets: tuple[str, ...] = ()) -> Unit:
    return task_unit(
        name,
        upstream,
        images=("busybox",),
        resources=Resources(cpu_millicores=CPU),
        datasets=datasets,
    )


def regional_fleet() -> planner.Fleet:
    return planner.Fleet(
        sites=tuple(
            planner.SiteState(name=name, region=region, cpu_allocatable=20 * CPU)
            for name, region in (("site-a", "eu-west"), ("site-b", "eu-west"), ("site-c", "us"))
        )
    )


BOUND = planner.DatasetInfo(
    name="patients",
    residency=frozenset({"us"}),
    replicas=(planner.Replica(site="site-c"),),
)


def test_outputs_of_a_residency_bound_dataset_bind_every_unit_downstream() -> None:
    units = [
        _unit("ingest", datasets=("patients",)),
        _unit("clean", upstream=("ingest",)),
        _unit("report", upstream=("clean",)),
    ]
    result = planner.plan(units, regional_fleet(), [], [BOUND]).by_unit()
    for name in ("clean", "report"):
        d = result[name]
        assert d.site == "site-c", d.reason
        assert "bound to us by patients read upstream" in d.reason
        why = {c.site: c.why for c in d.candidates}
        assert "must stay in us" in why["site-a"]


def test_a_decision_now_is_bound_by_what_its_ancestors_read() -> None:
    ingest = _unit("ingest", datasets=("patients",))
    clean = _unit("clean", upstream=("ingest",))
    free = planner.decide(clean, regional_fleet(), [], [BOUND])
    assert free.site == "site-a"  # nothing binds it without its ancestors
    bound = planner.decide(clean, regional_fleet(), [], [BOUND], ancestors=[ingest])
    assert bound.site == "site-c"


def test_a_site_that_cannot_reach_the_producers_repository_is_not_a_candidate() -> None:
    """site-b cannot read site-c's artifact repository, and no site can relay (site-a reads
    site-c but site-b cannot read site-a): a step reading outputs made at site-c is not
    placed at site-b, and its row says why (issue #28: with a relay it would be)."""
    fleet = planner.Fleet(
        sites=regional_fleet().sites,
        links=(
            planner.Link("site-c", "site-b", bandwidth_mbps=1000, artifacts_reachable=False),
            planner.Link("site-a", "site-b", bandwidth_mbps=1000, artifacts_reachable=False),
            planner.Link("site-c", "site-a", bandwidth_mbps=10),
        ),
    )
    units = [_unit("make"), _unit("use", upstream=("make",))]
    placed = planner.plan(
        units, fleet, [], [], upstream_sites={"make": planner.Upstream("site-c", 10**9)}
    )
    use = placed.by_unit()["use"]
    why = {c.site: c.why for c in use.candidates}
    assert "cannot reach the artifact repository of site-c" in why["site-b"]
    assert "no site can relay them" in why["site-b"]
    assert use.site in ("site-a", "site-c")


def test_a_site_that_reads_a_relay_is_a_candidate_through_a_copy() -> None:
    """site-b cannot read site-c's repository but reads site-a's, which reads site-c's: site-b
    stays a candidate, its estimate counting both hops."""
    fleet = planner.Fleet(
        sites=regional_fleet().sites,
        links=(
            planner.Link("site-c", "site-b", bandwidth_mbps=1000, artifacts_reachable=False),
            planner.Link("site-c", "site-a", bandwidth_mbps=1000),
            planner.Link("site-a", "site-b", bandwidth_mbps=1000),
        ),
    )
    units = [_unit("make"), _unit("use", upstream=("make",))]
    placed = planner.plan(
        units, fleet, [], [], upstream_sites={"make": planner.Upstream("site-c", 10**9)}
    )
    rows = {c.site: c for c in placed.by_unit()["use"].candidates}
    assert rows["site-b"].eligible
    assert cached_relay(fleet, "site-c", "site-b") == "site-a"
    # 1 GB over two 1 Gbit/s hops: 16 s, twice the direct read at site-a.
    assert rows["site-b"].est_transfer_s == pytest.approx(
        2 * rows["site-a"].est_transfer_s, rel=0.01
    )
