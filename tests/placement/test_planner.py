"""The planner on the demo scenario (DESIGN sections 5 and 9) and on focused cases."""

from __future__ import annotations

from dataclasses import replace

import pytest

from placement.parser import Resources, Unit, parse_workflow
from placement.planner import (
    DEFAULT_BANDWIDTH_MBPS,
    DatasetInfo,
    Decision,
    Fleet,
    Link,
    Replica,
    Rule,
    RuleBook,
    Selector,
    SiteState,
    Upstream,
    decide,
    plan,
)
from tests.placement.demo import (
    DATASETS,
    FLEET,
    GB,
    RULES,
    SENTINEL,
    SITE_A,
    SITE_C,
    dataset_at,
    eo_pipeline,
    fleet_with,
)


def by_unit(decisions: tuple[Decision, ...]) -> dict[str, Decision]:
    return {d.unit: d for d in decisions}


def candidate(decision: Decision, site: str):
    return next(c for c in decision.candidates if c.site == site)


@pytest.fixture(scope="module")
def demo_plan() -> dict[str, Decision]:
    return by_unit(plan(eo_pipeline(), FLEET, RULES, DATASETS, project="eo").decisions)


def test_it_places_ingest_at_the_data_site(demo_plan: dict[str, Decision]) -> None:
    ingest = demo_plan["ingest"]
    assert ingest.site == "site-a"
    assert ingest.timing == "submit"
    assert ingest.reason == "data locality: dataset sentinel2-l1c (112 GiB) is at site-a"
    assert ingest.datasets == ("sentinel2-l1c",)
    a, b = candidate(ingest, "site-a"), candidate(ingest, "site-b")
    assert a.bytes_to_move == 0 and a.est_transfer_s == 0
    # 120 GB over the 10 Gbit/s link: 96 s.
    assert b.bytes_to_move == 120 * GB and b.est_transfer_s == pytest.approx(96.0)
    # site-a is busy: it stays eligible at submission (capacity scores, it does not filter).
    assert a.eligible and "would queue" in a.why


def test_it_places_inference_on_the_gpu_site(demo_plan: dict[str, Decision]) -> None:
    inference = demo_plan["inference"]
    assert inference.site == "site-c"
    assert inference.reason.startswith("rule 'gpu-inference': requires gpu; site-c has 8 free GPUs")
    for site in ("site-a", "site-b"):
        c = candidate(inference, site)
        assert not c.eligible and c.score is None
        assert "lacks capability gpu" in c.why


def test_it_leaves_preprocess_to_runtime_with_candidates(demo_plan: dict[str, Decision]) -> None:
    pre = demo_plan["preprocess"]
    assert pre.timing == "runtime"
    assert pre.site is None
    assert "preprocess-at-runtime" in pre.reason
    assert [c.site for c in pre.candidates] == ["site-a", "site-b", "site-c"]
    assert all(c.eligible for c in pre.candidates)
    # Computed as if ingest ran where it is planned (site-a): site-b, fast link and free CPU, wins.
    assert pre.runtime_hint == "site-b"
    assert candidate(pre, "site-a").bytes_to_move == 0
    assert candidate(pre, "site-b").bytes_to_move > 0


def test_the_preview_has_the_rest_shape(demo_plan: dict[str, Decision]) -> None:
    body = plan(eo_pipeline(), FLEET, RULES, DATASETS, project="eo").as_dict()
    assert [u["name"] for u in body["units"]] == ["ingest", "preprocess", "inference"]
    unit = body["units"][1]
    assert set(unit) == {"name", "template", "depends", "timing", "site", "reason", "candidates"}
    assert unit["depends"] == "ingest" and unit["site"] is None and unit["timing"] == "runtime"
    assert set(unit["candidates"][0]) == {
        "site",
        "eligible",
        "why",
        "score",
        "bytes_to_move",
        "est_transfer_s",
    }


def test_ingest_follows_the_dataset_when_it_moves() -> None:
    decisions = by_unit(plan(eo_pipeline(), FLEET, RULES, (dataset_at("site-b"),)).decisions)
    assert decisions["ingest"].site == "site-b"
    assert (
        decisions["ingest"].reason == "data locality: dataset sentinel2-l1c (112 GiB) is at site-b"
    )


@pytest.mark.parametrize(
    ("change", "why"),
    [({"cordoned": True}, "cordoned"), ({"ready": False}, "not ready")],
)
def test_a_cordoned_or_not_ready_site_is_never_chosen(change: dict[str, bool], why: str) -> None:
    fleet = fleet_with(site_a=replace(SITE_A, **change))
    decisions = by_unit(plan(eo_pipeline(), fleet, RULES, DATASETS).decisions)
    for d in decisions.values():
        assert d.site != "site-a" and d.runtime_hint != "site-a"
        c = candidate(d, "site-a")
        assert not c.eligible and c.why == why
    # Without its data site, ingest goes where moving the data is cheapest: the fast link.
    assert decisions["ingest"].site == "site-b"


def test_residency_excludes_out_of_region_sites() -> None:
    resident = replace(SENTINEL, residency=frozenset({"eu-west"}))
    pw = parse_workflow(
        """
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {generateName: resident-}
spec:
  entrypoint: main
  arguments:
    parameters: [{name: scene, value: "s3://eo-archive/sentinel2/l1c/T31/x.SAFE"}]
  templates:
  - name: main
    container: {image: ghcr.io/eo/analyse:1, args: ["{{workflow.parameters.scene}}"]}
"""
    )
    only_c = Rule(1, "pin-c", "pin", Selector(template="main"), params={"sites": ["site-c"]})
    d = decide(pw.units[0], FLEET, [], [resident])
    assert d.site == "site-a"
    assert candidate(d, "site-c").why == (
        "dataset sentinel2-l1c must stay in eu-west (site region eu-central)"
    )
    blocked = decide(pw.units[0], FLEET, [only_c], [resident])
    assert blocked.site is None and blocked.unplaceable
    assert "must stay in eu-west" in blocked.reason


def test_a_gpu_unit_whose_gpus_are_all_taken_waits_for_one_at_submission() -> None:
    """At submission busy GPUs only score, as busy CPUs do: the unit runs later, and a full
    member queues its pod. Before, the ninth demo pipeline submitted while site-c's 8 GPUs
    were taken was refused outright."""
    fleet = fleet_with(site_c=replace(SITE_C, gpu_allocated=8))
    decisions = by_unit(plan(eo_pipeline(), fleet, RULES, DATASETS).decisions)
    inference = decisions["inference"]
    assert inference.site == "site-c" and not inference.unplaceable
    assert "site-c has 0 free GPUs" in inference.reason
    assert "lacks capability gpu" in candidate(inference, "site-a").why


def test_deciding_now_a_gpu_unit_with_no_free_gpu_is_unplaceable_with_reasons() -> None:
    fleet = fleet_with(site_c=replace(SITE_C, gpu_allocated=8))
    inference = eo_pipeline().units[2]
    d = decide(inference, fleet, RULES, DATASETS, strict_capacity=True)
    assert d.unplaceable
    assert candidate(d, "site-c").why == "busy: needs 1 GPU, 0 free of 8"
    assert "lacks capability gpu" in d.reason and "needs 1 GPU" in d.reason


def test_a_gpu_request_alone_filters_sites_without_rules() -> None:
    unit = replace(eo_pipeline().units[2], resources=Resources(1000, GB, 2))
    d = decide(unit, FLEET, [], [])
    assert d.site == "site-c"
    assert candidate(d, "site-a").why == "needs 2 GPU, site has 0 in all"


def test_pin_exclude_and_labels_are_hard_filters() -> None:
    unit = eo_pipeline().units[0]
    pin = Rule(1, "pin-b", "pin", Selector(task="ingest"), params={"sites": ["site-b"]})
    assert decide(unit, FLEET, [pin], DATASETS).site == "site-b"
    exclude = Rule(2, "no-a", "exclude", Selector(), params={"sites": ["site-a"]})
    d = decide(unit, FLEET, [exclude], DATASETS)
    assert d.site == "site-b" and candidate(d, "site-a").why == "rule 'no-a': site excluded"
    labels = Rule(
        3, "nvidia", "require_labels", Selector(), params={"labels": {"accelerator": "*"}}
    )
    d = decide(unit, FLEET, [labels], DATASETS)
    assert d.site == "site-c"
    assert d.reason.startswith("rule 'nvidia': requires accelerator")


def test_rules_match_by_selector_and_project_only() -> None:
    unit = eo_pipeline().units[0]
    other_project = Rule(1, "pin-b", "pin", Selector(project="other"), params={"sites": ["site-b"]})
    by_image = Rule(2, "img", "pin", Selector(image="python:*"), params={"sites": ["site-c"]})
    wrong_label = Rule(3, "lbl", "pin", Selector(labels={"app": "x"}), params={"sites": ["site-b"]})
    disabled = Rule(4, "off", "pin", Selector(), params={"sites": ["site-b"]}, enabled=False)
    book = RuleBook([other_project, by_image, wrong_label, disabled])
    assert [r.name for r in book.matching(unit, "eo")] == ["img"]
    assert decide(unit, FLEET, book, DATASETS, project="eo").site == "site-c"


def test_no_link_uses_a_slow_default_and_says_so() -> None:
    fleet = Fleet(sites=FLEET.sites, links=())
    d = decide(eo_pipeline().units[0], fleet, [], DATASETS)
    b = candidate(d, "site-b")
    assert b.est_transfer_s == pytest.approx(
        120 * GB * 8 / (DEFAULT_BANDWIDTH_MBPS * 1e6), rel=1e-3
    )
    assert f"no link: assumed {DEFAULT_BANDWIDTH_MBPS:.0f} Mbit/s" in b.why


def test_decide_uses_where_upstream_really_ran_and_what_it_produced() -> None:
    pre = eo_pipeline().units[1]
    d = decide(pre, FLEET, RULES, DATASETS, upstream_sites={"ingest": Upstream("site-a", 500 * GB)})
    assert d.timing == "runtime" and d.site is not None  # the webhook always gets a site
    # 500 GB: 400 s over the fast link to site-b, 4000 s to site-c: site-c drops far behind.
    assert candidate(d, "site-b").est_transfer_s == pytest.approx(400.0)
    assert candidate(d, "site-c").est_transfer_s == pytest.approx(4000.0)
    assert candidate(d, "site-b").score > candidate(d, "site-c").score


def test_exclude_sites_removes_a_lost_site_for_failover() -> None:
    d = decide(eo_pipeline().units[0], FLEET, RULES, DATASETS, exclude_sites=["site-a"])
    assert d.site == "site-b"
    assert candidate(d, "site-a").why == "excluded by caller"


def test_strict_capacity_filters_busy_sites() -> None:
    unit = eo_pipeline().units[1]  # 8 CPU
    d = decide(unit, FLEET, [], [], strict_capacity=True)
    assert candidate(d, "site-a").why.startswith("busy: needs 8 CPU, 1 free")
    loose = decide(unit, FLEET, [], [])
    assert candidate(loose, "site-a").eligible


def test_a_request_larger_than_any_site_is_unplaceable() -> None:
    unit = replace(eo_pipeline().units[0], resources=Resources(cpu_millicores=500_000))
    d = decide(unit, FLEET, [], [])
    assert d.site is None
    assert all("needs 500 CPU" in c.why for c in d.candidates)


def test_ties_are_broken_by_site_name() -> None:
    twins = tuple(
        SiteState(name, region="r", cpu_allocatable=4000, memory_allocatable=8 * GB)
        for name in ("site-z", "site-m", "site-b2")
    )
    d = decide(eo_pipeline().units[0], Fleet(twins), [], [])
    assert d.site == "site-b2"
    assert "tie" in d.reason
    assert [c.site for c in d.candidates] == ["site-b2", "site-m", "site-z"]


def test_the_nearest_replica_counts() -> None:
    two = DatasetInfo(
        "two",
        "s3://two/",
        10 * GB,
        replicas=(Replica("site-a", "", 0), Replica("site-c", "", 0)),
    )
    fleet = Fleet(FLEET.sites, (*FLEET.links, Link("site-c", "site-b", 40_000)))
    unit = replace(eo_pipeline().units[0], datasets=("two",), data_refs=())
    d = decide(unit, fleet, [], [two])
    b = candidate(d, "site-b")
    assert b.bytes_to_move == 10 * GB
    assert b.est_transfer_s == pytest.approx(2.0)  # from site-c over 40 Gbit/s
    assert "from site-c" in b.why


def test_data_refs_match_by_uri_prefix_and_name() -> None:
    by_name = replace(eo_pipeline().units[0], datasets=(), data_refs=("sentinel2-l1c",))
    by_uri = replace(
        eo_pipeline().units[0], datasets=(), data_refs=("s3://eo-archive/sentinel2/l1c/a/b",)
    )
    unrelated = replace(eo_pipeline().units[0], datasets=(), data_refs=("s3://eo-archive/other",))
    assert decide(by_name, FLEET, [], DATASETS).datasets == ("sentinel2-l1c",)
    assert decide(by_uri, FLEET, [], DATASETS).datasets == ("sentinel2-l1c",)
    assert decide(unrelated, FLEET, [], DATASETS).datasets == ()


def test_plan_accepts_units_and_seeds_upstream_sites() -> None:
    units: tuple[Unit, ...] = eo_pipeline().units
    seeded = plan(units, FLEET, RULES, DATASETS, upstream_sites={"ingest": "site-c"})
    pre = by_unit(seeded.decisions)["preprocess"]
    # ingest "ran" at site-c: preprocess there moves nothing.
    assert candidate(pre, "site-c").bytes_to_move == 0
    assert candidate(pre, "site-a").bytes_to_move > 0


def test_several_upstream_outputs_are_summed_in_one_note() -> None:
    unit = replace(eo_pipeline().units[1], upstream=("x", "y"))
    d = decide(
        unit,
        FLEET,
        [],
        [],
        upstream_sites={"x": Upstream("site-a", 2 * GB), "y": Upstream("site-c", 3 * GB)},
    )
    b = candidate(d, "site-b")
    assert b.bytes_to_move == 5 * GB
    assert "upstream outputs 4.7 GiB from 2 other sites" in b.why
    # 2 GB over 10 Gbit/s plus 3 GB over 1 Gbit/s.
    assert b.est_transfer_s == pytest.approx(1.6 + 24.0)
    a = candidate(d, "site-a")
    assert a.bytes_to_move == 3 * GB and "upstream output 2.8 GiB from site-c" in a.why


def test_decisions_against_a_reused_fleet_match_a_fresh_one() -> None:
    """The per-site vectors cached on a Fleet must never leak between different inputs."""
    units = eo_pipeline().units
    shared = FLEET
    seen = []
    for rules in (RULES, (), RULES[:1]):
        for datasets in (DATASETS, (dataset_at("site-b"),), ()):
            for unit in units:
                up = {u: Upstream("site-a", 7 * GB) for u in unit.upstream}
                warm = decide(unit, shared, rules, datasets, upstream_sites=up)
                cold = decide(
                    unit, Fleet(FLEET.sites, FLEET.links), rules, datasets, upstream_sites=up
                )
                assert warm.as_dict() == cold.as_dict()
                seen.append(warm.site)
    assert {"site-a", "site-b", "site-c"} <= set(seen)


def test_an_upstream_output_of_unknown_size_is_called_so_in_the_reason() -> None:
    # Argo records no output sizes: the estimate the score uses is named as one, never shown
    # as if it were measured.
    pre = eo_pipeline().units[1]
    unknown = decide(pre, FLEET, RULES, DATASETS, upstream_sites={"ingest": Upstream("site-a")})
    assert "upstream output of unknown size (counted as" in candidate(unknown, "site-c").why
    known = decide(
        pre, FLEET, RULES, DATASETS, upstream_sites={"ingest": Upstream("site-a", 500 * GB)}
    )
    assert "unknown size" not in candidate(known, "site-c").why
