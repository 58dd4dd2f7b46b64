"""Intake: safe decoding, structural and semantic validation, placement units."""

from __future__ import annotations

import json
import textwrap
import tracemalloc

import pytest

from placement.parser import (
    DEFAULT_LIMITS,
    FieldError,
    Limits,
    ParsedWorkflow,
    Resources,
    WorkflowInvalid,
    expand_with_param,
    parse_depends,
    parse_quantity,
    parse_with_param_value,
    parse_workflow,
    parse_workflow_template,
    slugify,
)
from tests.placement.demo import EXAMPLE, GIB

HEAD = """
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {generateName: t-}
"""


def _text(body: str) -> str:
    # HEAD is flush left, the indented spec after it comes from a triple-quoted block.
    if body.startswith(HEAD):
        return HEAD + textwrap.dedent(body[len(HEAD) :])
    return textwrap.dedent(body)


def wf(body: str, **kwargs) -> ParsedWorkflow:
    return parse_workflow(_text(body), **kwargs)


def errors(body: str | bytes | dict, **kwargs) -> list[FieldError]:
    raw = _text(body) if isinstance(body, str) else body
    with pytest.raises(WorkflowInvalid) as info:
        parse_workflow(raw, **kwargs)
    assert info.value.errors, "WorkflowInvalid must carry at least one error"
    return info.value.errors


def paths(errs: list[FieldError]) -> set[str]:
    return {e.path for e in errs}


# -- decoding --------------------------------------------------------------------------------


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


# -- structure and meaning -------------------------------------------------------------------


def test_it_reports_every_problem_at_once_with_paths() -> None:
    errs = errors(
        HEAD
        + """
    spec:
      entrypoint: missing
      templates:
      - name: main
        dag:
          tasks:
          - name: a
            template: nope
          - name: b
            dependencies: [zzz]
            template: leaf
          - name: c
            depends: "a && (b.Succeeded ||"
            template: leaf
      - name: leaf
        container: {image: x}
      - name: leaf
        container: {image: y}
    """
    )
    assert {
        "spec.entrypoint",
        "spec.templates[0].dag.tasks[0].template",
        "spec.templates[0].dag.tasks[1].dependencies[0]",
        "spec.templates[0].dag.tasks[2].depends",
        "spec.templates[2].name",
    } <= paths(errs)


def test_schema_errors_carry_field_paths() -> None:
    errs = errors(
        HEAD
        + """
    spec:
      entrypoint: main
      templates:
      - name: main
        container: {image: x, args: notalist}
        retryStrategy: {limit: [1]}
      - container: {image: y}
    """
    )
    by_path = {e.path: e.message for e in errs}
    assert by_path["spec.templates[0].container.args"] == "must be of type array, found a string"
    assert "spec.templates[0].retryStrategy.limit" in by_path
    # Meaning is checked once the structure is sound (a nameless template is a meaning error).
    nameless = errors(
        HEAD
        + """
    spec:
      entrypoint: main
      templates:
      - name: main
        container: {image: x}
      - container: {image: y}
    """
    )
    assert nameless == [FieldError("spec.templates[1].name", "a template needs a name")]


def test_it_needs_a_name_and_valid_names() -> None:
    errs = errors("""
    apiVersion: argoproj.io/v1alpha1
    kind: Workflow
    metadata: {labels: {a: b}}
    spec:
      entrypoint: Main_1
      templates:
      - {name: Main_1, container: {image: x}}
    """)
    assert {"metadata", "spec.templates[0].name"} <= paths(errs)
    bad = errors(
        HEAD.replace("generateName: t-", "name: Not_Valid")
        + "spec: {entrypoint: a, templates: [{name: a, container: {image: x}}]}"
    )
    assert paths(bad) == {"metadata.name"}


def test_it_refuses_dependency_cycles() -> None:
    errs = errors(
        HEAD
        + """
    spec:
      entrypoint: main
      templates:
      - name: main
        dag:
          tasks:
          - {name: a, template: leaf, depends: c}
          - {name: b, template: leaf, depends: a}
          - {name: c, template: leaf, dependencies: [b]}
          - {name: d, template: leaf}
      - {name: leaf, container: {image: x}}
    """
    )
    cycle = [e for e in errs if "cycle" in e.message]
    assert len(cycle) == 1
    assert cycle[0].path.startswith("spec.templates[0].dag.tasks[")
    assert (
        "a -> b -> c -> a" in cycle[0].message
        or "c -> a -> b -> c" in cycle[0].message
        or "b -> c -> a -> b" in cycle[0].message
    )


def test_it_refuses_a_task_with_both_depends_and_dependencies() -> None:
    errs = errors(
        HEAD
        + """
    spec:
      entrypoint: main
      templates:
      - name: main
        dag:
          tasks:
          - {name: a, template: leaf}
          - {name: b, template: leaf, depends: a, dependencies: [a]}
      - {name: leaf, container: {image: x}}
    """
    )
    assert "spec.templates[0].dag.tasks[1]" in paths(errs)


def test_a_template_has_exactly_one_type() -> None:
    errs = errors(
        HEAD
        + """
    spec:
      entrypoint: main
      templates:
      - {name: main, container: {image: x}, script: {image: y, source: z}}
    """
    )
    assert errs == [
        FieldError("spec.templates[0]", "a template has exactly one type; found container, script")
    ]


# -- catalogue ------------------------------------------------------------------------------

WFT = {
    "apiVersion": "argoproj.io/v1alpha1",
    "kind": "WorkflowTemplate",
    "metadata": {"name": "shared"},
    "spec": {
        "templates": [
            {"name": "say", "container": {"image": "ghcr.io/x/say:1"}},
            {
                "name": "twice",
                "steps": [
                    [{"name": "one", "template": "say"}],
                    [{"name": "two", "template": "say"}],
                ],
            },
        ]
    },
}


def test_template_refs_resolve_against_the_catalogue() -> None:
    body = (
        HEAD
        + """
    spec:
      entrypoint: main
      templates:
      - name: main
        dag:
          tasks:
          - {name: a, templateRef: {name: shared, template: twice}}
          - {name: b, templateRef: {name: shared, template: gone}, depends: a}
          - {name: c, templateRef: {name: absent, template: say}, depends: a}
    """
    )
    errs = errors(body, catalogue={"shared": WFT})
    assert paths(errs) == {
        "spec.templates[0].dag.tasks[1].templateRef.template",
        "spec.templates[0].dag.tasks[2].templateRef.name",
    }
    ok = wf(
        body.split("          - {name: b")[0], catalogue={"shared": parse_workflow_template(WFT)}
    )
    (unit,) = ok.units
    # The referenced steps template stays whole, with the template it calls in its own scope.
    assert unit.template == "ref:shared/twice"
    assert unit.templates == ("ref:shared/twice", "ref:shared/say")
    assert unit.images == ("ghcr.io/x/say:1",)


def test_workflow_template_ref_merges_the_stored_spec() -> None:
    stored = dict(
        WFT,
        spec=dict(
            WFT["spec"], entrypoint="twice", arguments={"parameters": [{"name": "p", "value": "1"}]}
        ),
    )
    p = wf(
        HEAD
        + """
    spec:
      workflowTemplateRef: {name: shared}
      arguments: {parameters: [{name: p, value: "2"}]}
    """,
        catalogue={"shared": stored},
    )
    assert p.entrypoint == "twice"
    assert [u.name for u in p.units] == ["one", "two"]
    assert p.workflow_parameters() == {"p": "2"}
    assert paths(errors(HEAD + "spec: {workflowTemplateRef: {name: nope}}")) == {
        "spec.workflowTemplateRef.name"
    }


def test_parse_workflow_template_refuses_a_workflow() -> None:
    with pytest.raises(WorkflowInvalid) as info:
        parse_workflow_template(HEAD + "spec: {}")
    assert info.value.errors[0].path == "kind"


# -- units ----------------------------------------------------------------------------------


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
