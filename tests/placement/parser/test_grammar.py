"""Intake's small parsers and rules: depends, quantities, slugs, limits, template keys."""

from __future__ import annotations

import pytest

from placement.parser import (
    DEFAULT_LIMITS,
    parse_depends,
    parse_quantity,
    parse_workflow,
    slugify,
)
from tests.placement.demo import EXAMPLE


def test_depends_grammar() -> None:
    tree = parse_depends("A && (B.Succeeded || !C.Failed)")
    assert tree.tasks() == {"A", "B", "C"}
    for bad in ("A &&", "(A", "A.Bogus", "&& A", "A B"):
        with pytest.raises(ValueError):
            parse_depends(bad)


def test_quantities() -> None:
    assert parse_quantity("500m") == pytest.approx(0.5)
    assert parse_quantity("1Gi") == 2**30
    assert parse_quantity("1e3") == 1000
    assert parse_quantity(2) == 2.0
    assert parse_quantity("{{inputs.parameters.cpu}}") is None


def test_slugs_are_dns_labels_and_distinct() -> None:
    assert slugify("ingest") == "ingest"
    a, b = slugify("A"), slugify("a")
    assert a != b and a.startswith("a-")
    long = slugify("x" * 200 + "(3:" + "y" * 50 + ")")
    assert len(long) <= 40 and long[0].isalnum() and long[-1].isalnum()


def test_default_limits_match_the_issue() -> None:
    assert DEFAULT_LIMITS.max_body_bytes == 1024 * 1024


def test_template_keys_and_scopes_only_name_templates() -> None:
    p = parse_workflow(EXAMPLE.read_bytes())
    assert (
        set(p.templates)
        == set(p.template_scopes)
        == {
            "pipeline",
            "ingest",
            "preprocess",
            "inference",
        }
    )
    assert all(scope == "" for scope in p.template_scopes.values())
