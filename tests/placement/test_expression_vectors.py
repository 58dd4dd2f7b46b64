"""`placement.expression` (Argo's expression language, shared by the sandbox and the portal)
against upstream's own test vectors, each block citing the file it is ported from."""

from __future__ import annotations

from typing import Any

import pytest

from placement.expression import ExprError, evaluate
from placement.manifests.conditions import evaluate_when

# expr-lang/expr expr_test.go `TestExpr` (operators and builtins Argo enables: Argo compiles
# with expr's defaults, util/expr/argoexpr/eval.go), the cases over literals only.
EXPR_LANG: list[tuple[str, Any]] = [
    ("1", 1),
    ("-.5", -0.5),
    ("true && false || false", False),
    ('"a" != "b"', True),
    ('"a" != "b" || 1 == 2', True),
    ("2 + 2 == 4", True),
    ("8 % 3", 2),
    ("2 ** 8", 256.0),
    ("2 ^ 8", 256.0),
    ("-(2-5)**3-2/(+4-3)+-2", 23.0),
    ('"hello" + " " + "world"', "hello world"),
    ("0 in -1..1 and 1 in 1..1", True),
    ("1 in [1.5] || 1 not in [1]", False),
    ("-1 not in [1]", True),
    ("'foo' + 'bar' not matches 'foobar'", False),
    ('"foobar" contains "bar"', True),
    ('"foobar" startsWith "foo"', True),
    ('"foobar" endsWith "bar"', True),
    ("(0..10)[5]", 5),
    ("len([1, 2, 3])", 3),
    ('len(["hello", "world"])', 2),
    ('len("hello, world")', 12),
    ("len('北京')", 2),
    ("len({a: 1, b: 2, c: 2})", 3),
    ("max([1, 2, 3])", 3),
    ("max(1, 2, 3)", 3),
    ("min([1, 2, 3])", 1),
    ("min(1, 2, 3)", 1),
    ("{foo: 0, bar: 1}", {"foo": 0, "bar": 1}),
    ("(true ? 0+1 : 2+3) + (false ? -1 : -2)", -1),
    ("filter(1..9, {# > 7})", [8, 9]),
    ("map(1..3, {# * #})", [1, 4, 9]),
    ("all(1..3, {# > 0})", True),
    ("count(1..30, {# % 3 == 0})", 10),
    ("count([true, true, false])", 2),
    ('"a" < "b"', True),
    ("1 + 1", 2),
    ("4 in 5..1", False),
    ("4..0", []),
    ('0 == nil || "str" == nil || true == nil', False),
    ("1 /* one */ + 2 // two", 3),
    ("let x = 1; x + 2", 3),
    ("map(1..3, let x = #; let y = x * x; y * y)", [1, 16, 81]),
    ("map(1..2, let x = #; map(2..3, let y = #; x + y))", [[3, 4], [4, 5]]),
    ("len(filter(1..99, # % 7 == 0))", 14),
    ("findLast(1..9, # % 2 == 0)", 8),
    ("findLastIndex(1..9, # % 2 == 0)", 7),
    ("filter(1..9, # % 2 == 0)[-1]", 8),
    ("last(filter(1..9, # % 2 == 0))", 8),
    ("map(filter(1..9, # % 2 == 0), # * 2)", [4, 8, 12, 16]),
    ("map(map(filter(1..9, # % 2 == 0), # * 2), # * 2)", [8, 16, 24, 32]),
    ("first(map(filter(1..9, # % 2 == 0), # * 2))", 4),
    ("map(filter(1..9, # % 2 == 0), # * 2)[-1]", 16),
    ("len(map(filter(1..9, # % 2 == 0), # * 2))", 4),
    ("len(filter(map(1..9, # * 2), # % 2 == 0))", 9),
    ("first(filter(map(1..9, # * 2), # % 2 == 0))", 2),
]

# expr-lang/expr expr_test.go `TestIssue785_get_nil` (pipes, `get` of nil) and parser/parser.go
# `parsePipe` (`x | f(a)` is `f(x, a)`).
EXPR_LANG_PIPES: list[tuple[str, Any]] = [
    ('get(nil, "a")', None),
    ('get({}, "a")', None),
    ('({} | get("a") | get("b"))', None),
    ("1..3 | filter(# > 1) | map(# * 2)", [4, 6]),
    ('\'["a", "b"]\' | fromJSON() | join(\'","\')', 'a","b'),
]

# expr-lang/expr builtin/builtin_test.go `TestBuiltin` (literal cases).
EXPR_LANG_BUILTINS: list[tuple[str, Any]] = [
    ("len([1, 2, 3])", 3),
    ("len('abc')", 3),
    ("abs(-5)", 5),
    ("abs(.5)", 0.5),
    ("abs(-.5)", 0.5),
    ("ceil(5.5)", 6.0),
    ("floor(5.5)", 5.0),
    ("round(5.5)", 6.0),
    ("int(5.5)", 5),
    ("int('5')", 5),
    ("float(5)", 5.0),
    ("float('5.5')", 5.5),
    ("string(5)", "5"),
    ("string(5.5)", "5.5"),
    ("string('5.5')", "5.5"),
    ("trim('  foo  ')", "foo"),
    ("trim('__foo___', '_')", "foo"),
    ("trimPrefix('prefix_foo', 'prefix_')", "foo"),
    ("trimSuffix('foo_suffix', '_suffix')", "foo"),
    ("upper('foo')", "FOO"),
    ("lower('FOO')", "foo"),
    ("split('foo,bar,baz', ',')", ["foo", "bar", "baz"]),
    ("splitAfter('foo,bar,baz', ',')", ["foo,", "bar,", "baz"]),
    ("replace('foo,bar,baz', ',', ';')", "foo;bar;baz"),
    ("repeat('foo', 3)", "foofoofoo"),
    ("indexOf('foo,bar,baz', ',')", 3),
    ("lastIndexOf('foo,bar,baz', ',')", 7),
    ("hasPrefix('foo,bar,baz', 'foo')", True),
    ("hasSuffix('foo,bar,baz', 'baz')", True),
    ("max(1, 2, 3)", 3),
    ("max(1.5, 2.5, 3.5)", 3.5),
    ("min(1, 2, 3)", 1),
    ("min(1.5, 2.5, 3.5)", 1.5),
    ("sum(1..9)", 45),
    ("sum([.5, 1.5, 2.5])", 4.5),
    ("sum([])", 0),
    ("mean(1..9)", 5.0),
    ("median(1..9)", 5.0),
    ("median([.1, .2, .3, .4])", 0.25),
    ("toJSON({foo: 1, bar: 2})", '{\n  "bar": 2,\n  "foo": 1\n}'),
    ("fromJSON('[1, 2, 3]')", [1, 2, 3]),
    ("toBase64('hello')", "aGVsbG8="),
    ("fromBase64('aGVsbG8=')", "hello"),
    ("first([1, 2, 3])", 1),
    ("last([1, 2, 3])", 3),
    ("get([1, 2, 3], 1)", 2),
    ("get({foo: 1}, 'foo')", 1),
    ("get({foo: 1}, 'bar')", None),
    ("take([1, 2, 3], 2)", [1, 2]),
    ("keys({foo: 1})", ["foo"]),
    ("values({foo: 1})", [1]),
    ("join(['a', 'b', 'c'], ',')", "a,b,c"),
    ("reverse([1, 2, 3])", [3, 2, 1]),
    ("uniq([1, 1, 2])", [1, 2]),
    ("concat([1], [2, 3])", [1, 2, 3]),
    ("flatten([1, [2, [3]]])", [1, 2, 3]),
    ("sort([3, 1, 2])", [1, 2, 3]),
    ("sort([3, 1, 2], 'desc')", [3, 2, 1]),
    ("bitand(10, 16)", 0),
    ("bitor(10, 16)", 26),
    ("bitxor(10, 16)", 26),
    ("bitnand(10, 16)", 10),
    ("bitshl(7, 2)", 28),
    ("bitshr(-28, 2)", -7),
    ("bitnot(10)", -11),
]

# argoproj/argo-workflows util/expr/argoexpr/eval_test.go `TestEvalBool`.
ARGO_EVAL_BOOL: list[tuple[str, dict[str, Any], bool | None]] = [
    ("invalid expression", {}, None),  # None: an error
    (" FOO == 1 ", {"FOO": 2}, False),
    (" FOO == 1 ", {"FOO": 1}, True),
    ("split == 1", {"split": 1}, True),
    ("join == 1", {"join": 1}, True),
]

# argoproj/argo-workflows util/expr/env/env.go `GetFuncMap`: `asInt` and `asFloat` are expr's
# `int` and `float`, `jsonpath` is evilmonkeyinc/jsonpath's Query, `toJson` is Go's
# json.Marshal, `sprig` is sprig.GenericFuncMap() without env/expandenv.
ARGO_FUNCS: list[tuple[str, Any]] = [
    ("asInt('3')", 3),
    ("asInt(3.7)", 3),
    ("asFloat('1.5')", 1.5),
    ("asFloat(2)", 2.0),
    ("jsonpath('{\"a\": {\"b\": [1, 2]}}', '$.a.b[1]')", 2),
    ("jsonpath('{\"a\": \"x\"}', '$.a')", "x"),
    ("toJson({a: 1})", '{"a":1}'),
    ("toJson([1, 'x'])", '[1,"x"]'),
    ("sprig.upper('abc')", "ABC"),
    ("sprig.trim('  a ')", "a"),
    ("sprig.replace('a', 'b', 'aXa')", "bXb"),
    ("sprig.add(1, 2)", 3),
    ("sprig.default('x', '')", "x"),
    ("sprig.b64enc('hi')", "aGk="),
    ("sprig.splitList(',', 'a,b')", ["a", "b"]),
    ("sprig.contains('b', 'abc')", True),
]


@pytest.mark.parametrize(("text", "want"), EXPR_LANG + EXPR_LANG_PIPES + EXPR_LANG_BUILTINS)
def test_expr_lang_vectors(text: str, want: Any) -> None:
    assert evaluate(text, {}) == want


@pytest.mark.parametrize(("text", "env", "want"), ARGO_EVAL_BOOL)
def test_argo_eval_bool_vectors(text: str, env: dict[str, Any], want: bool | None) -> None:
    if want is None:
        with pytest.raises(ExprError):
            evaluate(text, env)
    else:
        assert evaluate(text, env) is want


@pytest.mark.parametrize(("text", "want"), ARGO_FUNCS)
def test_argo_function_map_vectors(text: str, want: Any) -> None:
    assert evaluate(text, {}) == want


# Knetic/govaluate (Argo's `when`), evaluationStage.go `inStage`: `x in (a, b)`.
@pytest.mark.parametrize(
    ("text", "want"),
    [
        ('"test" in ("always","test","")', True),
        ('"" in ("always","")', True),
        ('"q" in ("always","test")', False),
        ('1 in (2, 1) && "a" == "a"', True),
    ],
)
def test_govaluate_in(text: str, want: bool) -> None:
    assert evaluate_when(text) is want


# workflow/common/util.go substituteParams: an input's `{{= }}` value is evaluated over the
# inputs before it (test/e2e/functional/steps-when-expr-filter.yaml, TestStepsWhenExprFilter).
def test_entry_inputs_evaluate_expressions_over_earlier_inputs() -> None:
    from placement.parser.entry import entry_inputs

    entry = {
        "inputs": {
            "parameters": [
                {"name": "test", "value": "true"},
                {
                    "name": "list",
                    "value": "{{= concat(['always'], inputs.parameters.test == 'true' ? "
                    "['test'] : []) | toJSON() }}",
                },
            ]
        }
    }
    got = entry_inputs(entry, {})
    assert got["list"] == '[\n  "always",\n  "test"\n]'


def test_a_let_binds_its_name_in_its_body_only() -> None:
    assert evaluate("(let x = 2; x * x) + x", {"x": 10}) == 14
    assert evaluate("let s = 'a'; s + s", {}) == "aa"


@pytest.mark.parametrize("text", ["x = 1", "let x = 1 x", "let = 1; 2", "let x = ; 1", "1; 2"])
def test_a_stray_assignment_or_semicolon_is_an_error(text: str) -> None:
    with pytest.raises(ExprError):
        evaluate(text, {"x": 0})
