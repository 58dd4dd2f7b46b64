"""Declared output sizes (issue #17, item 2): Argo records no size for an output artifact, so a
template declares them (``portal.multisite.io/output-sizes: "tiles=2Gi,patches=500Mi"``), the
planner weighs moving them, and without a declaration the decision says the size is unknown."""

from __future__ import annotations

from typing import Any

import pytest

from placement import codec, parser, planner

KEY = "portal.multisite.io/output-sizes"
GI = 2**30
MI = 2**20
PATH = f'spec.templates[1].metadata.annotations["{KEY}"]'


def pipeline(sizes: str | None, artifacts: tuple[str, ...] = ("tiles", "patches")) -> dict:
    make: dict[str, Any] = {
        "name": "make",
        "container": {"image": "busybox"},
        "outputs": {"artifacts": [{"name": a, "path": f"/out/{a}"} for a in artifacts]},
    }
    if sizes is not None:
        make["metadata"] = {"annotations": {KEY: sizes}}
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "sized"},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {
                    "name": "main",
                    "dag": {
                        "tasks": [
                            {"name": "make", "template": "make"},
                            {"name": "use", "template": "use", "depends": "make"},
                        ]
                    },
                },
                make,
                {"name": "use", "container": {"image": "busybox"}},
            ],
        },
    }


def units(doc: dict) -> dict[str, parser.Unit]:
    return {u.name: u for u in parser.parse_workflow(doc).units}


def test_declared_sizes_are_summed_per_unit() -> None:
    got = units(pipeline("tiles=2Gi, patches=500Mi"))
    assert got["make"].output_bytes == 2 * GI + 500 * MI
    # A template that declares no output artifacts passes nothing on.
    assert got["use"].output_bytes == 0


def test_without_a_declaration_the_size_is_unknown() -> None:
    assert units(pipeline(None))["make"].output_bytes is None


def test_the_size_survives_storage() -> None:
    unit = units(pipeline("tiles=1G,patches=0"))["make"]
    assert codec.unit_from_dict(codec.unit_to_dict(unit)).output_bytes == 10**9


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ("tiles=2Gi", "no size for output artifact 'patches'"),
        ("tiles=2Gi,patches=lots", "'lots' for 'patches' is not a size"),
        ("tiles=2Gi,patches=-1", "'-1' for 'patches' is not a size"),
        ("tiles=2Gi,patches={{inputs.parameters.n}}", "is not a size"),
        ("tiles=2Gi,patches=1Mi,logs=1Ki", "'logs' is not an output artifact of this template"),
        ("tiles=2Gi,tiles=1Gi,patches=1", "'tiles' is given more than once"),
        ("tiles,patches=1", "'tiles' is not name=size"),
    ],
)
def test_an_invalid_declaration_is_refused_naming_the_field(sizes: str, message: str) -> None:
    with pytest.raises(parser.WorkflowInvalid) as refused:
        parser.parse_workflow(pipeline(sizes))
    errors = refused.value.as_dicts()
    assert [e["path"] for e in errors] == [PATH], errors
    assert message in errors[0]["message"]


def test_a_declaration_on_a_template_without_outputs_is_refused() -> None:
    with pytest.raises(parser.WorkflowInvalid) as refused:
        parser.parse_workflow(pipeline("tiles=1Gi", artifacts=()))
    assert "it declares: none" in refused.value.errors[0].message


def fleet() -> planner.Fleet:
    """site-a is nearly full, site-b is empty; a slow link between them."""
    return planner.Fleet(
        sites=(
            planner.SiteState(name="site-a", cpu_allocatable=16000, cpu_allocated=15000),
            planner.SiteState(name="site-b", cpu_allocatable=64000),
        ),
        links=(planner.Link("site-a", "site-b", bandwidth_mbps=100),),
    )


def plan_use(doc: dict) -> planner.Decision:
    parsed = parser.parse_workflow(doc)
    pin = planner.Rule(
        id=1,
        name="make-at-a",
        effect="pin",
        selector=planner.Selector(task="make"),
        params={"sites": ["site-a"]},
    )
    return planner.plan(parsed, fleet(), [pin], []).by_unit()["use"]


def row(decision: planner.Decision, site: str) -> str:
    return next(c.why for c in decision.candidates if c.site == site)


def test_the_planner_weighs_what_the_producer_declares() -> None:
    # 200 GiB over 100 Mbit/s is hours: the consumer goes where the outputs are.
    heavy = plan_use(pipeline("tiles=150Gi,patches=50Gi"))
    assert heavy.site == "site-a"
    assert "upstream output 200 GiB (declared) from site-a" in row(heavy, "site-b")
    assert heavy.candidates[1].bytes_to_move == 200 * GI

    # Declared small: nothing worth moving for, free capacity wins.
    light = plan_use(pipeline("tiles=1Ki,patches=0"))
    assert light.site == "site-b"
    assert "(declared)" in row(light, "site-b")


def test_without_a_declaration_the_reason_says_the_size_is_unknown() -> None:
    unknown = plan_use(pipeline(None))
    assert "upstream output of unknown size (counted as" in row(unknown, "site-b")
    assert "(declared)" not in row(unknown, "site-b")


def test_a_producer_without_output_artifacts_moves_nothing() -> None:
    none = plan_use(pipeline(None, artifacts=()))
    assert none.site == "site-b"
    assert "upstream output" not in row(none, "site-b")
