"""Fan-out reservations (issue #17, item 6): a plan reserves what it places, so a fan-out
spreads by capacity and every reason says what is really free."""

from __future__ import annotations

import re
from collections import Counter

from placement import planner
from placement.parser import Arguments, Resources, Unit

CPU = 1000


def tile(i: int) -> Unit:
    return Unit(
        name=f"tile-{i}",
        slug=f"tile-{i}",
        kind="task",
        task="tile",
        template="tile",
        templates=("tile",),
        upstream=(),
        depends="",
        when=None,
        arguments=Arguments(),
        labels={},
        images=("busybox",),
        resources=Resources(cpu_millicores=CPU, memory_bytes=2**30),
        datasets=(),
        data_refs=(),
    )


def fleet(free_cpus: int = 20) -> planner.Fleet:
    return planner.Fleet(
        sites=tuple(
            planner.SiteState(
                name=name,
                cpu_allocatable=free_cpus * CPU,
                memory_allocatable=256 * 2**30,
                pods_allocatable=110,
            )
            for name in ("site-a", "site-b", "site-c")
        )
    )


def test_sixty_one_cpu_tiles_over_three_sites_of_twenty_spread_over_all_three() -> None:
    result = planner.plan([tile(i) for i in range(60)], fleet(), [], [])
    placed = Counter(d.site for d in result.decisions)
    assert placed == {"site-a": 20, "site-b": 20, "site-c": 20}


def test_each_candidate_table_tells_what_is_free_after_the_tiles_before_it() -> None:
    result = planner.plan([tile(i) for i in range(60)], fleet(), [], [])
    placed_at: Counter[str] = Counter()
    for d in result.decisions:
        for row in d.table.rows():
            said = re.search(r"free ([\d.]+) CPU", row.why)
            assert said, row.why
            assert float(said.group(1)) == 20 - placed_at[row.site], (d.unit, row)
        match = re.search(r"has ([\d.]+) CPU", d.reason)
        if match:  # a reason naming free capacity names what is left now
            assert float(match.group(1)) == 20 - placed_at[d.site or ""]
        placed_at[d.site or ""] += 1


def test_what_other_runs_hold_counts_as_taken() -> None:
    held = planner.hold(fleet(), {"site-a": Resources(cpu_millicores=20 * CPU)})
    result = planner.plan([tile(i) for i in range(20)], held, [], [])
    assert "site-a" not in {d.site for d in result.decisions}
    assert held.site_by_name["site-a"].cpu_free == 0


def test_a_reservation_keeps_the_fleets_link_tables() -> None:
    links = (
        planner.Link("site-a", "site-b", 1_000),
        planner.Link("site-b", "site-c", 0, artifacts_reachable=False),
    )
    base = planner.Fleet(sites=fleet().sites, links=links)
    # Built once for the fleet, then shared by every fleet a plan's reservations derive from
    # it (they have the same links): not rebuilt from every link per placed unit.
    bandwidth, unreachable = base.bandwidth, base.unreachable
    held = planner.hold(base, {"site-a": Resources(cpu_millicores=CPU)})
    assert held.bandwidth is bandwidth and unreachable is held.unreachable
    assert held.bandwidth == {("site-a", "site-b"): 1_000}
    assert held.unreachable == {("site-b", "site-c")}
    # A fleet whose tables were never read computes its own, from its links.
    fresh = planner.hold(
        planner.Fleet(sites=fleet().sites, links=links), {"site-b": Resources(cpu_millicores=CPU)}
    )
    assert fresh.bandwidth == bandwidth and fresh.bandwidth is not bandwidth
