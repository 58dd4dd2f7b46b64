"""Intake: the placement units a workflow is split into, with their facts."""

from __future__ import annotations

import pytest

from placement.parser import (
    Limits,
    Resources,
    expand_with_param,
    parse_with_param_value,
    parse_workflow,
)
from tests.placement.demo import EXAMPLE, GIB
from tests.placement.parser.helpers import HEAD, errors, wf


def test_the_demo_pipeline_gives_three_units_with_their_facts() -> None:
    p = parse_workflow(EXAMPLE.read_bytes())
    assert p.generate_name == "eo-pipeline-" and p.entrypoint == "pipeline"
    scene = p.arguments.parameters[0]
    assert scene.name == "scene-uri" and scene.description
    model = p.arguments.parameters[1]
    assert model.enum == ("cloud-segmentation-v3", "land-cover-v2")
    ingest, pre, inference = p.units
    assert (ingest.name, pre.name, inference.name) == ("ingest", "preprocess", "inference")
    assert pre.upstream == ("ingest",) and pre.depends == "ingest"
    assert inference.upstream == ("preprocess",)
    assert ingest.datasets == ("sentinel2-l1c",)
    # The scene's key in the site's repository (its input artifact) and the scene URI.
    assert ingest.data_refs[0] == "sentinel2/l1c/T31UDQ/S2B_MSIL1C_20240612T105619.SAFE"
    assert ingest.data_refs[1].startswith("s3://eo-archive/sentinel2/l1c/")
    assert ingest.resources == Resources(2000, 4 * GIB, 0)
    assert inference.resources == Resources(4000, 24 * GIB, 1)
    assert inference.images == ("python:3",)
    assert pre.arguments.artifacts[0].from_ == "{{tasks.ingest.outputs.artifacts.tiles}}"
    assert inference.arguments.parameters[1].value == "{{tasks.preprocess.outputs.result}}"


def test_steps_give_one_unit_per_step_after_the_previous_group() -> None:
    p = wf(
        HEAD
        + """
    spec:
      entrypoint: main
      templates:
      - name: main
        steps:
        - [{name: a, template: leaf}]
        - - {name: b, template: leaf}
          - {name: c, template: leaf, when: "{{steps.a.outputs.result}} == x"}
        - [{name: d, template: leaf}]
      - {name: leaf, container: {image: x}}
    """
    )
    units = {u.name: u for u in p.units}
    assert [u.name for u in p.units] == ["a", "b", "c", "d"]
    assert units["b"].upstream == ("a",) and units["c"].upstream == ("a",)
    assert units["d"].upstream == ("b", "c") and units["d"].depends == "b && c"
    assert units["c"].when == "{{steps.a.outputs.result}} == x"
    assert {u.kind for u in p.units} == {"step"}


def test_any_other_entrypoint_is_one_unit_and_nested_dags_stay_whole() -> None:
    p = wf(
        HEAD
        + """
    spec:
      entrypoint: outer
      templates:
      - name: outer
        dag:
          tasks:
          - {name: x, template: inner}
      - name: inner
        dag:
          tasks:
          - {name: p, template: cpu}
          - {name: q, template: gpu, depends: p}
      - name: cpu
        container: {image: c, resources: {requests: {cpu: 3}}}
      - name: gpu
        container: {image: g, resources: {limits: {nvidia.com/gpu: 2, cpu: 500m, memory: 1Gi}}}
    """
    )
    (unit,) = p.units
    assert unit.templates == ("inner", "cpu", "gpu")
    # Pods of a nested DAG run one after another or side by side: the unit needs their maximum.
    assert unit.resources == Resources(3000, GIB, 2)
    single = wf(HEAD + "spec: {entrypoint: a, templates: [{name: a, container: {image: x}}]}")
    assert [(u.name, u.kind) for u in single.units] == [("a", "workflow")]


def test_resources_sum_sidecars_and_container_sets_and_honour_pod_spec_patch() -> None:
    p = wf(
        HEAD
        + """
    spec:
      entrypoint: main
      templates:
      - name: main
        dag:
          tasks:
          - {name: side, template: side}
          - {name: set, template: set}
          - {name: patched, template: patched}
      - name: side
        container: {image: a, resources: {requests: {cpu: "1", memory: 1Gi}}}
        sidecars: [{name: s, image: b, resources: {requests: {cpu: 250m, memory: 512Mi}}}]
        initContainers: [{name: i, image: c, resources: {requests: {cpu: "4"}}}]
      - name: set
        containerSet:
          containers:
          - {name: x, image: x, resources: {requests: {cpu: "2"}}}
          - {name: y, image: y, resources: {requests: {cpu: "2", nvidia.com/gpu: "1"}}}
      - name: patched
        podSpecPatch: |
          containers:
          - name: main
            resources: {limits: {cpu: "6", nvidia.com/gpu: "2"}}
        container: {image: p, resources: {requests: {cpu: "1"}}}
    """
    )
    units = {u.name: u for u in p.units}
    assert units["side"].resources == Resources(4000, int(1.5 * GIB), 0)
    assert units["set"].resources == Resources(4000, 0, 1)
    assert units["patched"].resources == Resources(6000, 0, 2)
    assert units["side"].images == ("a", "c", "b")


def test_with_items_expands_at_plan_time_and_with_param_waits() -> None:
    p = wf(
        HEAD
        + """
    spec:
      entrypoint: main
      templates:
      - name: main
        dag:
          tasks:
          - {name: gen, template: leaf}
          - name: each
            template: leaf
            depends: gen
            arguments:
              parameters: [{name: uri, value: "{{item.uri}}"}]
            withItems:
            - {uri: "s3://b/one", size: 1}
            - {uri: "s3://b/two", size: 2}
          - name: later
            template: leaf
            depends: each
            withParam: "{{tasks.gen.outputs.result}}"
            arguments:
              parameters: [{name: v, value: "{{item}}"}]
      - name: leaf
        inputs: {parameters: [{name: uri, default: ""}, {name: v, default: ""}]}
        container: {image: x}
    """
    )
    names = [u.name for u in p.units]
    assert names == [
        "gen",
        "each(0:size:1,uri:s3://b/one)",
        "each(1:size:2,uri:s3://b/two)",
        "later",
    ]
    each0 = p.units[1]
    assert each0.item == {"uri": "s3://b/one", "size": 1} and each0.item_index == 0
    assert each0.arguments.parameters[0].value == "s3://b/one"
    assert "s3://b/one" in each0.data_refs
    later = p.units[3]
    assert later.runtime_expansion and later.with_param == "{{tasks.gen.outputs.result}}"
    assert later.upstream == (p.units[1].name, p.units[2].name)
    expanded = expand_with_param(later, parse_with_param_value('["x", "y"]'))
    assert [u.name for u in expanded] == ["later(0:x)", "later(1:y)"]
    assert expanded[1].arguments.parameters[0].value == "y"
    assert not expanded[0].runtime_expansion
    assert len({u.slug for u in p.units}) == len(p.units)
    with pytest.raises(ValueError, match="JSON list"):
        parse_with_param_value('{"a": 1}')


def test_with_sequence_expands_when_literal() -> None:
    p = wf(
        HEAD
        + """
    spec:
      entrypoint: main
      templates:
      - name: main
        steps:
        - [{name: s, template: leaf, withSequence: {count: "3"}}]
      - {name: leaf, container: {image: x}}
    """
    )
    assert [u.name for u in p.units] == ["s(0:0)", "s(1:1)", "s(2:2)"]


def test_the_unit_limit_is_enforced() -> None:
    body = (
        HEAD
        + """
    spec:
      entrypoint: main
      templates:
      - name: main
        dag:
          tasks:
          - {name: a, template: leaf, withItems: [1, 2, 3, 4, 5]}
      - {name: leaf, container: {image: x}}
    """
    )
    errs = errors(body, limits=Limits(max_units=3))
    assert errs[0].message.endswith("the limit is 3 units") or "limit is 3" in errs[0].message


def test_dataset_annotation_applies_to_root_units_or_named_tasks() -> None:
    body = """
    apiVersion: argoproj.io/v1alpha1
    kind: Workflow
    metadata:
      generateName: t-
      annotations: {"example.org/datasets": "root-ds, b=b-ds"}
    spec:
      entrypoint: main
      templates:
      - name: main
        dag:
          tasks:
          - {name: a, template: leaf}
          - {name: b, template: leaf, depends: a}
      - {name: leaf, container: {image: x}}
    """
    p = wf(body, domain="example.org")
    assert {u.name: u.datasets for u in p.units} == {"a": ("root-ds",), "b": ("b-ds",)}
    default_domain = wf(body)
    assert all(u.datasets == () for u in default_domain.units)
