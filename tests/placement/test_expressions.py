"""Argo's expression tags (``{{= expr}}``, expr-lang) as the portal evaluates them: every
expression in Argo's examples, expr-lang's semantics, and the bounds (issue 18 item 16,
issue 21 item 1)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from placement import expression
from placement.expression import ExprError, evaluate, fill_expressions, missing_variables
from tests.placement.schemas import example_documents, need_reference

CONFIG = json.dumps(
    {
        "employees": [
            {"name": "Baris", "age": 43, "salary": 10000},
            {"name": "Mo", "age": 42, "salary": 20000},
            {"name": "Jo", "age": 30, "salary": 30000},
        ]
    }
)

# The values the examples' expressions read, as the portal's scope holds them (dotted names).
SCOPE: dict[str, Any] = {
    "workflow.parameters.should-print": "true",
    "workflow.parameters.json": json.dumps([{"name": "should-print", "value": "true"}]),
    "workflow.parameters.config": CONFIG,
    "workflow.parameters.foo": "bar",
    "workflow.status": "Running",
    "workflow.creationTimestamp": "2024-05-06T07:08:09Z",
    "inputs.parameters.should-print": "true",
    "inputs.parameters.foo": "3",
    "item": 3,
    "steps.flip-coin.outputs.result": "heads",
    "steps.heads.outputs.result": "it was heads",
    "steps.tails.outputs.result": None,
    "tasks.flip-coin.outputs.result": "tails",
    "tasks.heads.outputs.result": None,
    "tasks.tails.outputs.result": "it was tails",
    "tasks.producer.outputs.parameters.msg": None,
}

# Every expression of Argo's examples and what it gives over SCOPE. A new upstream expression
# fails ``test_every_expression_in_argos_examples`` until it is added here.
EXPECTED: dict[str, Any] = {
    "inputs.parameters[\"should-print\"] == 'true'": True,
    "jsonpath(workflow.parameters.json, '$[0].value') == 'true'": True,
    "jsonpath(workflow.parameters.config, '$.employees[?(@.name==\"Baris\")].age')": [43],
    "jsonpath(workflow.parameters.config, '$.employees[?(@.age>42 && @.age<44)].age')": [43],
    "jsonpath(workflow.parameters.config, '$.employees[0:1]')": [
        {"name": "Baris", "age": 43, "salary": 10000}
    ],
    "jsonpath(workflow.parameters.config, '$.employees[*].name')": ["Baris", "Mo", "Jo"],
    "item": 3,
    "toJson(filter([1, 3], {# > 1}))": "[3]",
    "asInt(inputs.parameters.foo) * 10": 30,
    "sprig.date('2006', workflow.creationTimestamp)": re.compile(r"^\d{4}$"),
    'workflow.status == "Running"': True,
    "steps['flip-coin'].outputs.result == 'heads' ? steps.heads.outputs.result "
    ": steps.tails.outputs.result": "it was heads",
    "tasks['flip-coin'].outputs.result == 'heads' ? tasks.heads.outputs.result "
    ": tasks.tails.outputs.result": "it was tails",
    "workflow.parameters.foo": "bar",
    "tasks.producer.outputs.parameters.msg ?? 'expr-fallback'": "expr-fallback",
}


def _strings(value: Any, key: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, str(k))
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v, key)
    elif isinstance(value, str):
        yield key, value


def example_expressions() -> list[tuple[str, str]]:
    """(file, expression) for every ``{{= ...}}`` tag and every ``expression:`` field."""
    found: dict[tuple[str, str], None] = {}
    for name, _i, doc in example_documents():
        for key, text in _strings(doc):
            if key == "expression":
                found[(name, text.strip())] = None
            for m in expression.EXPRESSION_TAG.finditer(text):
                found[(name, m.group(1).strip())] = None
    return list(found)


def test_the_examples_have_expressions() -> None:
    need_reference()
    files = {name for name, _ in example_expressions()}
    assert {"conditionals.yaml", "expression-tag-template-workflow.yaml"} <= files, files


@pytest.mark.parametrize(("name", "source"), example_expressions())
def test_every_expression_in_argos_examples(name: str, source: str) -> None:
    assert source in EXPECTED, f"{name}: {source!r} has no expected value here"
    want = EXPECTED[source]
    got = evaluate(source, SCOPE)
    if isinstance(want, re.Pattern):
        assert want.match(str(got)), got
    else:
        assert got == want


def test_tags_in_text_are_filled_as_argo_renders_them() -> None:
    text = "hello {{=asInt(inputs.parameters.foo) * 10}} @ {{=sprig.date('2006', 0)}}"
    assert fill_expressions(text, SCOPE) == "hello 30 @ 1970"
    # Lists and maps are JSON (Go's encoding: compact, keys sorted); strings lose their quotes.
    # (A tag ends at the first "}}", as Argo's template lexer reads it: hence the space.)
    assert fill_expressions("{{={'b': [1, 2.5], 'a': 'x'} }}", {}) == '{"a":"x","b":[1,2.5]}'
    assert fill_expressions("{{= 'a' + \"b\" }}", {}) == "ab"
    assert fill_expressions("{{=6 / 3}}", {}) == "2"


@pytest.mark.parametrize(
    ("source", "value"),
    [
        ("1 + 2 * 3", 7),
        ("2 ** 3 ** 2", 512.0),  # right-associative
        ("-2 ** 2", -4.0),  # ** binds tighter than unary minus, as in expr-lang
        ("7 % 3 == 1 and 7 / 2 == 3.5", True),
        ("-7 % 3", -1),  # Go's remainder keeps the dividend's sign
        ("'1' == 1", False),  # no coercion between strings and numbers
        ("1 == 1.0", True),
        ("[1, 'a'] == [1, 'a']", True),
        ("'a' in ['a', 'b'] && 'k' in {k: 1} && 3 not in [1]", True),
        ("'foobar' contains 'oba' && 'foo' startsWith 'f' && 'foo' endsWith 'oo'", True),
        ("'abc' matches '^a.c$'", True),
        ("not false or false", True),
        ("true ? 'y' : 'n'", "y"),
        ("missing ?? 'fallback'", "fallback"),
        ("missing?.deeper", None),
        ("len([1, 2, 3]) + len('ab') + len({a: 1})", 6),
        ("map(filter(1..6, # % 2 == 0), # * 10)", [20, 40, 60]),
        ("all([2, 4], {# % 2 == 0}) && any([1, 2], # > 1) && none([1], # > 5)", True),
        ("count([1, 2, 3], # > 1)", 2),
        ("[1, 2, 3][-1] + [1, 2, 3][0:2][1]", 5),
        ("upper('a') + lower('B') + trim('  c ')", "Abc"),
        ("join(split('a,b', ','), '-')", "a-b"),
        ("int('42') + float('0.5')", 42.5),
        ("string(1.0) + string(true)", "1true"),
        ("fromJSON('{\"a\": [1]}').a[0]", 1),
        ("sprig.trim('  x ') + sprig.upper('y') + sprig.default('d', '')", "xYd"),
    ],
)
def test_expr_lang_semantics(source: str, value: Any) -> None:
    assert evaluate(source, {}) == value


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("1 && true", "invalid operation"),  # && wants booleans
        ("!'x'", "invalid operation"),
        ("'a' < 1", "invalid operation"),
        ("nothing.deeper", "from nil"),
        ("[1][5]", "out of range"),
        ("1 +", "unexpected"),
        ("(1", "expected ')'"),
        ("'a' matches '(a)\\\\1'", "bad regular expression"),  # RE2: no backreferences
        ("'a' % 2", "invalid operation"),
        ("asInt('x')", "invalid syntax"),
        ("jsonpath('{', '$')", "fromJSON"),
        ("jsonpath('{\"a\": 1}', '$.b')", "found nothing"),
        ("7 % 0", "divide by zero"),
        ("9223372036854775807 + 1", "overflow"),
    ],
)
def test_errors_say_why(source: str, why: str) -> None:
    with pytest.raises(ExprError, match=re.escape(why)):
        evaluate(source, {})


def test_a_tag_reading_what_the_scope_lacks_is_left_for_argo() -> None:
    told: list[tuple[str, list[str]]] = []
    text = "{{=pod.name + 'x'}} and {{=inputs.parameters.foo}}"
    out = fill_expressions(text, SCOPE, unresolved=lambda s, names: told.append((s, names)))
    assert out == "{{=pod.name + 'x'}} and 3"
    assert told == [("pod.name + 'x'", ["pod.name"])]
    # A name under ?? or ?. is guarded: its absence is the point.
    assert missing_variables("tasks.x.outputs.result ?? 'd'", {}) == []
    assert missing_variables("tasks.x?.outputs", {}) == []
    assert missing_variables("len(tasks.x.outputs.result) > 1", {}) == ["tasks.x.outputs.result"]


def test_a_broken_tag_names_itself() -> None:
    with pytest.raises(ExprError, match=re.escape("{{=1 +}}")):
        fill_expressions("a {{=1 +}} b", {})


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("1" + " + 1" * 3000, "tokens"),
        ("(" * 40 + "1" + ")" * 40, "nests deeper"),
        ("-" * 40 + "1", "nests deeper"),
        ("x" * (expression.MAX_EXPR_CHARS + 1), "characters"),
        ("repeat('ab', 10000000)", "characters"),
        ("len(1..1000000000)", "range of more than"),
        ("map(1..100000, map(1..100000, 1))", "steps"),
        ("2 ** 100000", "exponent too large"),
    ],
)
def test_every_expression_is_bounded(source: str, why: str) -> None:
    with pytest.raises(ExprError, match=why):
        evaluate(source, {})


def test_a_catastrophic_pattern_is_linear_under_re2() -> None:
    # Backtracking engines take exponential time here; RE2 answers at once.
    subject = "a" * 5000 + "!"
    assert evaluate(f"'{subject}' matches '^(a+)+$'", {}) is False


def test_jsonpath_unions_recursion_and_filters() -> None:
    doc = json.dumps({"a": [{"b": 1, "c": {"b": 2}}, {"b": 3}], "k": "v"})
    assert evaluate(f"jsonpath('{doc}', '$..b')", {}) == [1, 3, 2]
    assert evaluate(f"jsonpath('{doc}', '$.a[0,1].b')", {}) == [1, 3]
    assert evaluate(f"jsonpath('{doc}', \"$['k']\")", {}) == "v"
    assert evaluate(f"jsonpath('{doc}', '$.a[?(@.b >= 3 || @.c.b == 2)].b')", {}) == [1, 3]
    assert evaluate(f"jsonpath('{doc}', '$.a[-1].b')", {}) == 3


def test_deep_documents_end_in_an_error_not_a_crash() -> None:
    # Values come from the scope (an upstream output), not the expression's bounded text.
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ExprError):
        evaluate("toJson(fromJSON(tasks.a.outputs.result))", {"tasks.a.outputs.result": deep})
    wide = json.dumps({"a": [{"b": i} for i in range(20_000)]})
    found = evaluate("jsonpath(tasks.a.outputs.result, '$..b')", {"tasks.a.outputs.result": wide})
    assert len(found) == 20_000
