"""Which site relays an output a reader's site cannot read, and what the preview lists.
Pure: the planner's inputs, no database."""

from __future__ import annotations

from placement import planner
from placement.parser import Resources, Unit
from placement.planner import relays
from tests.placement.planned_units import task_unit

GB = 10**9


def site(name: str, region: str = "eu-west", ready: bool = True) -> planner.SiteState:
    gpus = 8 if name == "site-c" else 0
    return planner.SiteState(
        name=name, region=region, ready=ready, cpu_allocatable=8000, gpu_allocatable=gpus
    )


def demo_fleet(**ready: bool) -> planner.Fleet:
    """The demo: site-c reads only site-b's repository, site-a only site-b's, site-b both."""
    names = {"site-a": "eu-west", "site-b": "eu-west", "site-c": "eu-central"}
    reads = {("site-a", "site-b"), ("site-b", "site-a"), ("site-b", "site-c"), ("site-c", "site-b")}
    mbps = {"site-a": 10000, "site-b": 5000, "site-c": 1000}
    links = tuple(
        planner.Link(
            s,
            t,
            bandwidth_mbps=min(mbps[s], mbps[t]),
            cost_per_gb=0.02 if "site-c" in (s, t) else 0.0,
            artifacts_reachable=(s, t) in reads,
        )
        for s in names
        for t in names
        if s != t
    )
    sites = tuple(site(n, r, ready.get(n.replace("-", "_"), True)) for n, r in names.items())
    return planner.Fleet(sites=sites, links=links)


def unit(name: str, upstream: tuple[str, ...] = (), gpus: int = 0) -> Unit:
    return task_unit(name, upstream, resources=Resources(gpus=gpus))


def test_a_reader_that_cannot_read_the_source_reads_through_a_site_that_can() -> None:
    fleet = demo_fleet()
    assert relays.relay_for(fleet, "site-a", "site-c", GB) == "site-b"
    # No relay where the reader reads the source itself.
    assert relays.relay_for(fleet, "site-a", "site-b", GB) is None
    assert relays.relay_for(fleet, "site-a", "site-a", GB) is None


def test_no_relay_when_the_only_one_is_lost_or_outside_the_regions() -> None:
    assert relays.relay_for(demo_fleet(site_b=False), "site-a", "site-c", GB) is None
    assert relays.relay_for(demo_fleet(), "site-a", "site-c", GB, exclude=["site-b"]) is None
    # The output may be in eu-central only: site-b (eu-west) may not hold a copy.
    assert relays.relay_for(demo_fleet(), "site-a", "site-c", GB, ["eu-central"]) is None
    assert relays.relay_for(demo_fleet(), "site-a", "site-c", GB, ["eu-west", "eu-central"]) == (
        "site-b"
    )


def test_the_fastest_relay_is_chosen_then_the_cheapest() -> None:
    sites = (site("src"), site("dst"), site("slow"), site("fast"))
    links = (
        planner.Link("src", "dst", 1000, artifacts_reachable=False),
        planner.Link("src", "slow", 100),
        planner.Link("slow", "dst", 100),
        planner.Link("src", "fast", 10000, cost_per_gb=1.0),
        planner.Link("fast", "dst", 10000),
    )
    fleet = planner.Fleet(sites=sites, links=links)
    assert relays.relay_for(fleet, "src", "dst", GB) == "fast"
    moved = relays.transfer(fleet, "src", "fast", "dst", GB)
    assert moved.as_dict() == {
        "from": "src",
        "via": "fast",
        "to": "dst",
        "bytes": GB,
        "seconds": 0.8,
        "cost": "1.00",
    }


def test_observed_bandwidth_replaces_the_configured_figure() -> None:
    link = planner.Link("a", "b", bandwidth_mbps=1000, observed_mbps=250)
    fleet = planner.Fleet(sites=(site("a"), site("b")), links=(link,))
    assert fleet.bandwidth[("a", "b")] == 250
    assert relays.hop_seconds(fleet, "a", "b", GB) == 32.0


def test_the_gpu_step_is_placed_at_site_c_and_the_plan_lists_one_copy_for_a_fan_out() -> None:
    fleet = demo_fleet()
    units = [unit("write"), *(unit(f"read-{i}", ("write",), gpus=1) for i in range(50))]
    # write ran at site-a (where its data is).
    plan = planner.plan(
        units[1:], fleet, [], [], upstream_sites={"write": planner.Upstream("site-a", GB)}
    )
    by = plan.by_unit()
    assert {by[f"read-{i}"].site for i in range(50)} == {"site-c"}
    why = {c.site: c.why for c in by["read-0"].candidates}
    assert "through a copy at site-b" in why["site-c"]
    decisions = (
        planner.decide(units[0], fleet, [], [], exclude_sites=["site-b", "site-c"]),
        *plan.decisions,
    )
    listed = relays.planned(decisions, {u.name: u.upstream for u in units}, fleet, {"write": GB})
    assert listed == [
        {
            "unit": "write-copy-site-b",
            "producer": "write",
            "from": "site-a",
            "via": "site-b",
            "to": "site-c",
            "bytes": GB,
            "seconds": 1.6,
            "cost": "0.00",
        }
    ]


def test_a_decision_for_a_built_step_never_counts_on_a_relay() -> None:
    """The webhook decides for a step workflow already built: its inputs are read where they
    are, so a site that cannot read them is not eligible, relay or not."""
    fleet = demo_fleet()
    read = unit("read", ("write",), gpus=1)
    where = {"write": planner.Upstream("site-a", GB)}
    assert planner.decide(read, fleet, [], [], upstream_sites=where).site == "site-c"
    built = planner.decide(read, fleet, [], [], upstream_sites=where, relays=False)
    assert built.site is None
    why = {c.site: c.why for c in built.candidates}
    assert "cannot reach the artifact repository of site-a" in why["site-c"]
