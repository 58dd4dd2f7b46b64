"""The demo fleet of DESIGN section 9 as plain planner inputs, shared by the placement tests.

site-a (eu-west) holds the Sentinel-2 archive and is busy; site-b (eu-west) has plenty of CPU and
a fast link from site-a; site-c (eu-central) has 8 GPUs.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from placement.parser import ParsedWorkflow, parse_workflow
from placement.planner import DatasetInfo, Fleet, Link, Replica, Rule, Selector, SiteState

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO.parent / "shared" / "reference"
EXAMPLE = REPO / "examples" / "eo-pipeline.yaml"
GIB = 2**30
GB = 10**9

SITE_A = SiteState(
    name="site-a",
    region="eu-west",
    zone="eu-west-1a",
    provider="onprem",
    labels={"tier": "archive"},
    capabilities=frozenset({"fast-scratch"}),
    cpu_allocatable=16_000,
    cpu_allocated=15_000,
    memory_allocatable=64 * GIB,
    memory_allocated=56 * GIB,
    pods_allocatable=110,
    pods_allocated=90,
)
SITE_B = SiteState(
    name="site-b",
    region="eu-west",
    zone="eu-west-1b",
    provider="cloud",
    labels={"tier": "compute"},
    cpu_allocatable=64_000,
    cpu_allocated=8_000,
    memory_allocatable=256 * GIB,
    memory_allocated=32 * GIB,
    pods_allocatable=110,
    pods_allocated=10,
)
SITE_C = SiteState(
    name="site-c",
    region="eu-central",
    zone="eu-central-1a",
    provider="cloud",
    labels={"tier": "compute", "accelerator": "nvidia-a100"},
    capabilities=frozenset({"gpu", "nvidia-a100"}),
    cpu_allocatable=32_000,
    cpu_allocated=4_000,
    memory_allocatable=128 * GIB,
    memory_allocated=16 * GIB,
    gpu_allocatable=8,
    gpu_allocated=0,
    pods_allocatable=110,
    pods_allocated=5,
)
LINKS = (
    Link("site-a", "site-b", bandwidth_mbps=10_000, latency_ms=2),
    Link("site-b", "site-a", bandwidth_mbps=10_000, latency_ms=2),
    Link("site-a", "site-c", bandwidth_mbps=1_000, latency_ms=15),
    Link("site-c", "site-a", bandwidth_mbps=1_000, latency_ms=15),
    Link("site-b", "site-c", bandwidth_mbps=1_000, latency_ms=15),
    Link("site-c", "site-b", bandwidth_mbps=1_000, latency_ms=15),
)
FLEET = Fleet(sites=(SITE_A, SITE_B, SITE_C), links=LINKS)

SENTINEL = DatasetInfo(
    name="sentinel2-l1c",
    uri_prefix="s3://eo-archive/sentinel2/l1c/",
    bytes=120 * GB,
    residency=frozenset(),
    replicas=(Replica("site-a", "s3://site-a-archive/sentinel2/l1c/", 120 * GB),),
)
DATASETS = (SENTINEL,)

RULES = (
    Rule(
        id=1,
        name="ingest-near-data",
        order=10,
        effect="prefer_data_locality",
        selector=Selector(template="ingest"),
        timing="submit",
        weight=2.0,
    ),
    Rule(
        id=2,
        name="preprocess-at-runtime",
        order=20,
        effect="prefer_free_capacity",
        selector=Selector(template="preprocess"),
        timing="runtime",
        weight=1.0,
    ),
    Rule(
        id=3,
        name="gpu-inference",
        order=30,
        effect="require_capabilities",
        selector=Selector(template="inference"),
        params={"capabilities": ["gpu"]},
        timing="submit",
    ),
)


def eo_pipeline() -> ParsedWorkflow:
    return parse_workflow(EXAMPLE.read_bytes())


def fleet_with(**changes: SiteState) -> Fleet:
    """The demo fleet with some sites replaced (keyword = site name with '_' for '-')."""
    by_name = {s.name: s for s in FLEET.sites}
    for key, site in changes.items():
        by_name[key.replace("_", "-")] = site
    return Fleet(sites=tuple(by_name.values()), links=LINKS)


def dataset_at(site: str) -> DatasetInfo:
    return replace(SENTINEL, replicas=(Replica(site, f"s3://{site}-archive/sentinel2/l1c/", 0),))
