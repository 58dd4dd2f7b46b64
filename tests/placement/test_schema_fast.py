"""The compiled schema validator must agree with jsonschema: it only short-cuts valid input."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import fastjsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement import parser
from placement.parser import schema

EXAMPLES = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "argo" / "examples"
DEMO = Path(__file__).resolve().parents[2] / "examples" / "eo-pipeline.yaml"


def _fast_valid(doc: Any) -> bool:
    validator = schema.fast_validator("Workflow", wait=True)
    assert validator is not None
    try:
        validator(doc)
    except fastjsonschema.JsonSchemaException:
        return False
    return True


def _full_valid(doc: Any) -> bool:
    return not list(schema.full_validator("Workflow").iter_errors(doc))


def test_it_agrees_with_jsonschema_on_every_reference_example() -> None:
    if not EXAMPLES.is_dir():
        pytest.skip(f"no reference examples at {EXAMPLES}")
    docs = [
        d
        for p in sorted(EXAMPLES.glob("*.yaml"))
        for d in yaml.safe_load_all(p.read_text())
        if isinstance(d, dict)
    ]
    assert len(docs) > 50
    assert [_fast_valid(d) for d in docs] == [_full_valid(d) for d in docs]


def test_schema_errors_still_lists_every_problem_when_the_fast_path_is_ready() -> None:
    schema.fast_validator("Workflow", wait=True)
    doc = yaml.safe_load(DEMO.read_text())
    doc["spec"]["templates"][0]["dag"]["tasks"][0]["name"] = 7
    doc["spec"]["entrypoint"] = ["not", "a", "string"]
    paths = {e.path for e in parser.schema_errors(doc)}
    assert "spec.entrypoint" in paths
    assert "spec.templates[0].dag.tasks[0].name" in paths


_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path_choice=st.integers(min_value=0, max_value=10_000), value=_values)
def test_it_agrees_with_jsonschema_on_mangled_documents(path_choice: int, value: Any) -> None:
    doc = yaml.safe_load(DEMO.read_text())
    # Replace one node of the demo document, chosen by index, with a random value.
    nodes: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        items = (
            node.items()
            if isinstance(node, dict)
            else enumerate(node)
            if isinstance(node, list)
            else []
        )
        for key, child in list(items):
            nodes.append((node, key))
            walk(child)

    mangled = copy.deepcopy(doc)
    walk(mangled)
    parent, key = nodes[path_choice % len(nodes)]
    parent[key] = value
    assert _fast_valid(mangled) == _full_valid(mangled)
