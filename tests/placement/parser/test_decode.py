"""Intake: safe decoding of YAML and JSON bodies."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from placement.parser import (
    FieldError,
    Limits,
    parse_workflow,
)
from tests.placement.parser.helpers import HEAD, errors, wf


def test_it_refuses_a_billion_laughs_at_once_with_little_memory() -> None:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    bomb = HEAD + "spec:\n" + "\n".join("  " + line for line in lines) + "\n"
    tracemalloc.start()
    try:
        errs = errors(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert errs[0].path == ""
    assert "expands to more than" in errs[0].message or "aliases" in errs[0].message
    assert peak < 5 * 2**20  # the expansion (~10^9 nodes) was never built


def test_it_refuses_too_many_aliases_and_recursive_ones() -> None:
    many = HEAD + "spec:\n  x: &x 1\n  y: [" + ", ".join(["*x"] * 20) + "]\n"
    assert (
        "more than 10 YAML aliases" in errors(many, limits=Limits(max_yaml_aliases=10))[0].message
    )
    assert "recursive" in errors("a: &a [*a]\n")[0].message


def test_it_refuses_deep_nesting_without_crashing() -> None:
    assert "nesting deeper" in errors("[" * 100_000 + "]" * 100_000)[0].message
    nested: dict = {}
    node = nested
    for _ in range(200):
        node["x"] = {}
        node = node["x"]
    assert "nested deeper" in errors(nested)[0].message


def test_it_refuses_a_body_over_the_size_limit() -> None:
    big = HEAD + "spec: {entrypoint: a}\n# " + "x" * 2000 + "\n"
    errs = errors(big.encode(), limits=Limits(max_body_bytes=1000))
    assert errs == [FieldError("", f"document is {len(big)} bytes; the limit is 1000")]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("", "empty document"),
        ("- a\n- b\n", "expected a mapping (an object), found a list"),
        ("just text", "expected a mapping (an object), found a string"),
        ("a: [1, 2\n", "not valid YAML or JSON"),
        (b"\xff\xfe\x00", "not UTF-8 text"),
        ("a: 1\n---\nb: 2\n", "expected one document, found 2"),
        ('{"kind": "Workflow", ', "not valid YAML or JSON"),
    ],
)
def test_it_refuses_what_is_not_one_mapping(raw: str | bytes, message: str) -> None:
    errs = errors(raw)
    assert errs[0].path == "" and message in errs[0].message


def test_it_refuses_other_kinds() -> None:
    errs = errors(HEAD.replace("kind: Workflow", "kind: WorkflowTemplate") + "spec: {}\n")
    assert errs[0].path == "kind" and "catalogue" in errs[0].message
    assert errors({"kind": "Pod"})[0].message == 'expected Workflow, found "Pod"'


def test_it_accepts_json_and_a_dict_alike() -> None:
    doc = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "hello"},
        "spec": {
            "entrypoint": "main",
            "templates": [{"name": "main", "container": {"image": "x"}}],
        },
    }
    from_json = parse_workflow(json.dumps(doc).encode())
    from_dict = parse_workflow(doc)
    assert from_json.name == from_dict.name == "hello"
    assert [u.name for u in from_json.units] == [u.name for u in from_dict.units] == ["main"]


def test_timestamps_stay_strings() -> None:
    p = wf(
        HEAD
        + """
    spec:
      entrypoint: main
      arguments: {parameters: [{name: day, value: 2024-06-12}]}
      templates: [{name: main, container: {image: x}}]
    """
    )
    assert p.arguments.parameters[0].value == "2024-06-12"
