"""Bounded expressions and expansions (issue 21, items 1, 2, 5 and 14): no ``when``, ``depends``
or loop a user writes can make the parser, the planner's intake or the evaluator hang, recurse
out, crash or build gigabytes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.manifests import (
    DependsError,
    ExpressionError,
    TaskOutputs,
    WhenError,
    evaluate_depends,
    evaluate_when,
)
from placement.parser import (
    MAX_WHEN_CHARS,
    MAX_WHEN_DEPTH,
    FieldError,
    Limits,
    WorkflowInvalid,
    parse_with_param_value,
    parse_workflow,
    when_problem,
)


def dag_workflow(*tasks: dict[str, Any], extra_templates: list[Any] | None = None) -> dict:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "bounds-"},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {"name": "main", "dag": {"tasks": list(tasks)}},
                {"name": "leaf", "container": {"image": "alpine"}},
                *(extra_templates or []),
            ],
        },
    }


def steps_workflow(*groups: list[dict[str, Any]]) -> dict:
    doc = dag_workflow()
    doc["spec"]["templates"][0] = {"name": "main", "steps": list(groups)}
    return doc


def refused(doc: dict | str, **kwargs: Any) -> list[FieldError]:
    with pytest.raises(WorkflowInvalid) as info:
        parse_workflow(doc, **kwargs)
    return info.value.errors


def task(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "template": "leaf", **fields}


# -- 1. when: bounded in time and size, one typed error ----------------------------------------


def test_a_catastrophic_regex_returns_at_once() -> None:
    # Python's backtracking `re` never returns here; the evaluator runs in a child process so
    # that a regression fails this test instead of hanging the suite.
    code = textwrap.dedent(
        """
        from placement.manifests import TaskOutputs, evaluate_when
        out = {"a": TaskOutputs(result="a" * 5000 + "!")}
        print(evaluate_when("'{{tasks.a.outputs.result}}' =~ '^(a+)+$'", {}, out))
        print(evaluate_when("'" + "a" * 100 + "!' =~ '^(a|aa)+$'", {}, {}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["False", "False"]


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        # govaluate's lexer: a backslash takes the next character as it is.
        (r"'\x' == 'a'", False),
        (r"'\x' == 'x'", True),
        ("'it\\'s' == \"it's\"", True),
        ("'café' == 'café'", True),
        ("'日本' =~ '^日'", True),
        (r"'a1' =~ '^a\\d$'", True),
    ],
)
def test_quoted_strings_are_read_as_argo_reads_them(expr: str, expected: bool) -> None:
    assert evaluate_when(expr) is expected


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("(" * 300 + "true" + ")" * 300, f"nested deeper than {MAX_WHEN_DEPTH}"),
        ("!" * 500 + "true", f"nested deeper than {MAX_WHEN_DEPTH}"),
        (" && ".join(["true"] * 2000), "more than 1000 tokens"),
        ("a =~ '(a'", "bad regular expression"),
        ("a =~ '(?=a)'", "bad regular expression"),  # no lookahead in Go's regexp either
        ("a =~ '" + "x" * 5000 + "'", "regular expression is 5000 characters long"),
        ("a =~ '((a{1000}){1000}){1000}'", "bad regular expression"),
        ("a ==", "ends too early"),
        ("'unterminated == a", "cannot read"),
    ],
    ids=lambda v: v[:30] if isinstance(v, str) else None,
)
def test_what_the_evaluator_cannot_do_is_one_typed_error(expr: str, message: str) -> None:
    with pytest.raises(ExpressionError, match=message.replace("(", r"\(")) as info:
        evaluate_when(expr)
    assert isinstance(info.value, WhenError)


def test_operands_are_bounded_in_size() -> None:
    outputs = {"a": TaskOutputs(result="x" * (MAX_WHEN_CHARS + 1))}
    with pytest.raises(WhenError, match="characters long"):
        evaluate_when("{{tasks.a.outputs.result}} =~ 'x$'", {}, outputs)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("()!&|=~<>'\"\\ ax1é{}.")), max_size=120))
def test_any_text_gives_a_boolean_or_an_expression_error(text: str) -> None:
    try:
        result = evaluate_when(text)
    except ExpressionError:
        return
    assert isinstance(result, bool)


def test_a_depends_that_cannot_be_read_is_an_expression_error() -> None:
    expr = "(" * 300 + "a" + ")" * 300
    with pytest.raises(DependsError, match="nested deeper") as info:
        evaluate_depends(expr, {"a": "Succeeded"})
    assert isinstance(info.value, ExpressionError)
    with pytest.raises(ExpressionError):
        evaluate_depends("!" * 3000 + "a", {"a": "Succeeded"})


# -- 5. expressions are checked at submission, with their path -----------------------------------


@pytest.mark.parametrize(
    ("when", "message"),
    [
        ("(" * 300 + "{{tasks.a.outputs.result}} == x" + ")" * 300, "nested deeper"),
        ("{{tasks.a.outputs.result}} =~ '(a'", "bad regular expression"),
        ("{{tasks.a.outputs.result}} ==", "ends too early"),
        ("{{tasks.a.outputs.result}} == x)", "unexpected ')'"),
        ("x" * (MAX_WHEN_CHARS + 1), "characters long"),
    ],
)
def test_a_when_the_portal_could_not_evaluate_is_refused_at_submission(
    when: str, message: str
) -> None:
    errs = refused(dag_workflow(task("a"), task("b", depends="a", when=when)))
    assert [e.path for e in errs] == ["spec.templates[0].dag.tasks[1].when"]
    assert message in errs[0].message


def test_a_steps_when_is_checked_with_its_path() -> None:
    errs = refused(steps_workflow([task("a")], [task("b", when="a =~ '[z-a]'")]))
    assert [e.path for e in errs] == ["spec.templates[0].steps[1][0].when"]


@pytest.mark.parametrize(
    "when",
    [
        "{{tasks.a.outputs.result}} == heads",
        "{{tasks.a.outputs.result}} =~ '^(a+)+$'",  # harmless with RE2
        "{{= asInt(tasks.a.outputs.result) > 2 }}",  # expr form: evaluated once a has run
        "'{{tasks.a.outputs.result}}' != '' && ({{workflow.parameters.go}} == true)",
    ],
)
def test_whens_that_can_be_evaluated_are_accepted(when: str) -> None:
    assert when_problem(when) is None
    parsed = parse_workflow(dag_workflow(task("a"), task("b", depends="a", when=when)))
    assert parsed.units[1].when == when


def test_a_deeply_nested_depends_is_refused_with_its_path() -> None:
    expr = "(" * 300 + "a" + ")" * 300
    errs = refused(dag_workflow(task("a"), task("b", depends=expr)))
    assert [e.path for e in errs] == ["spec.templates[0].dag.tasks[1].depends"]
    assert "nested deeper" in errs[0].message


# -- 2. every expansion is sized before anything is built ---------------------------------------


@pytest.mark.parametrize(
    ("sequence", "field", "message"),
    [
        ({"count": "20000000"}, "withSequence.count", "20000000 items; the limit is 5000"),
        ({"count": "1000000000"}, "withSequence.count", "1000000000 items"),
        ({"count": 10**15}, "withSequence.count", "items; the limit is 5000"),
        ({"end": "9" * 5000}, "withSequence.end", "too large"),
        ({"start": "-" + "9" * 30, "end": "1"}, "withSequence.start", "too large"),
        ({"start": "5", "end": str(10**17)}, "withSequence.end", "items; the limit"),
        ({"count": "3", "format": "%0999999999d"}, "withSequence.format", "too large"),
        ({"count": "ten"}, "withSequence.count", "not a whole number"),
        ({"count": "3", "end": "4"}, "withSequence.count", "either count or end"),
    ],
)
def test_a_sequence_is_sized_before_it_is_built(sequence: dict, field: str, message: str) -> None:
    errs = refused(dag_workflow(task("a", withSequence=sequence)))
    assert [e.path for e in errs] == [f"spec.templates[0].dag.tasks[0].{field}"]
    assert message in errs[0].message


def test_a_templated_sequence_waits_for_run_time_and_is_bounded_there() -> None:
    parsed = parse_workflow(
        dag_workflow(
            task("a"), task("b", depends="a", withSequence={"count": "{{tasks.a.outputs.result}}"})
        )
    )
    later = parsed.units[1]
    assert later.runtime_expansion
    value = later.with_param.replace("{{tasks.a.outputs.result}}", "20000000")
    with pytest.raises(ValueError, match="20000000 items; the run can take at most 4000 more"):
        parse_with_param_value(value, max_items=4000)
    assert parse_with_param_value(value.replace("20000000", "3"), max_items=4000) == ["0", "1", "2"]


def test_a_runtime_list_is_sized_against_the_room_left() -> None:
    with pytest.raises(ValueError, match="5 items; the run can take at most 4 more units"):
        parse_with_param_value(json.dumps(list(range(5))), max_items=4)
    assert parse_with_param_value("[1, 2]", max_items=2) == [1, 2]
    with pytest.raises(ValueError, match="JSON list"):
        parse_with_param_value('{"a": 1}', max_items=2)


def test_loops_of_many_tasks_are_summed_before_any_is_built() -> None:
    # Ten loops of 4,000 items: each under the limit, 40,000 units together.
    items = list(range(4000))
    doc = dag_workflow(*(task(f"t{i}", withItems=items) for i in range(10)))
    errs = refused(doc)
    assert [e.path for e in errs] == ["spec.templates[0].dag.tasks"]
    assert "40000 placement units; the limit is 5000" in errs[0].message


def test_a_loop_after_a_loop_is_refused_by_its_edges() -> None:
    # 300 items each waiting for 300 items: 600 units but 90,000 unit-to-unit dependencies.
    items = list(range(300))
    errs = refused(
        dag_workflow(task("a", withItems=items), task("b", depends="a", withItems=items))
    )
    assert [e.path for e in errs] == ["spec.templates[0].dag.tasks"]
    assert "90000 unit-to-unit edges; the limit is 20000" in errs[0].message
    steps = steps_workflow([task("a", withItems=items)], [task("b", withItems=items)])
    assert "90000 unit-to-unit edges" in refused(steps)[0].message


def test_a_withparam_over_workflow_parameters_is_sized_too() -> None:
    doc = dag_workflow(task("a", withParam="{{workflow.parameters.list}}"))
    doc["spec"]["arguments"] = {
        "parameters": [{"name": "list", "value": json.dumps(list(range(6000)))}]
    }
    errs = refused(doc)
    assert [e.path for e in errs] == ["spec.templates[0].dag.tasks[0].withParam"]
    assert "6000 items; the limit is 5000" in errs[0].message


_MEASURE = textwrap.dedent(
    """
    import json, resource, sys
    # A regression must fail the test, not take the machine's memory: cap the address space.
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) for line in f if line.startswith("VmSize:"))
    cap = (vm + 768 * 1024) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    from placement.parser import WorkflowInvalid, parse_workflow
    warm = json.loads(sys.argv[2])
    try:
        parse_workflow(warm)
    except WorkflowInvalid:
        pass
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        parse_workflow(sys.argv[1])
        errors = []
    except WorkflowInvalid as exc:
        errors = exc.as_dicts()
    except MemoryError:
        errors = [{"path": "", "message": "MemoryError"}]
    growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps({"growth_kib": growth, "errors": errors}))
    """
)


def peak_growth_kib(doc: dict) -> tuple[int, list[dict[str, str]]]:
    """Peak RSS growth of a fresh process parsing ``doc`` (after a warm-up parse)."""
    warm = dag_workflow(task("a", withSequence={"count": "3"}), task("b", depends="a"))
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, json.dumps(doc), json.dumps(warm)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    out = json.loads(done.stdout)
    return out["growth_kib"], out["errors"]


@pytest.mark.parametrize(
    "doc",
    [
        dag_workflow(task("a", withSequence={"count": "20000000"})),
        dag_workflow(task("a", withSequence={"count": "1000000000"})),
        dag_workflow(task("a", withSequence={"start": "0", "end": str(10**18 - 1)})),
        steps_workflow([task("a", withSequence={"count": "20000000"})]),
        dag_workflow(*(task(f"t{i}", withSequence={"count": "4999"}) for i in range(200))),
    ],
    ids=["count-2e7", "count-1e9", "huge-end", "steps", "many-loops"],
)
def test_a_huge_expansion_is_refused_in_bounded_memory(doc: dict) -> None:
    growth, errors = peak_growth_kib(doc)
    assert errors and errors[0]["message"] != "MemoryError"
    assert "limit is 5000" in errors[0]["message"]
    assert growth < 16 * 1024, f"peak RSS grew by {growth} KiB"


# -- 14. dependency edges are bounded -----------------------------------------------------------


def dense_dag(n: int) -> dict:
    """Every task depends on every task before it: n(n-1)/2 edges."""
    names = [f"t{i}" for i in range(n)]
    return dag_workflow(
        *(task(name, dependencies=names[:i]) if i else task(name) for i, name in enumerate(names))
    )


def test_a_dense_dag_is_refused_by_its_dependency_edges() -> None:
    errs = refused(dense_dag(450))  # 101,025 edges
    assert [e.path for e in errs] == ["spec.templates[0].dag.tasks"]
    assert "101025 dependencies between tasks; the limit is 20000" in errs[0].message


def test_the_edge_limit_is_a_parser_limit() -> None:
    doc = dense_dag(30)  # 435 edges
    assert len(parse_workflow(doc).units) == 30
    errs = refused(doc, limits=Limits(max_dependency_edges=400))
    assert "435 dependencies between tasks; the limit is 400" in errs[0].message
