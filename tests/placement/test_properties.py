"""Property tests on random DAGs and random documents (hypothesis)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement.parser import WorkflowInvalid, parse_workflow
from placement.planner import Fleet, Rule, Selector, SiteState, plan
from tests.placement.demo import DATASETS, FLEET, RULES, eo_pipeline

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def dags(draw: st.DrawFn, acyclic: bool = True) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """A DAG workflow with random edges (tasks only depend on earlier ones when acyclic),
    given in a shuffled order, using both ``depends`` and ``dependencies``."""
    n = draw(st.integers(min_value=1, max_value=25))
    names = [f"t{i}" for i in range(n)]
    deps: dict[str, list[str]] = {}
    for i, name in enumerate(names):
        pool = names[:i] if acyclic else [x for x in names if x != name]
        deps[name] = sorted(draw(st.sets(st.sampled_from(pool), max_size=3))) if pool else []
    order = draw(st.permutations(names))
    tasks = []
    for name in order:
        task: dict[str, Any] = {
            "name": name,
            "template": draw(st.sampled_from(["cpu", "gpu", "io"])),
        }
        if deps[name]:
            if draw(st.booleans()):
                task["dependencies"] = deps[name]
            else:
                joiner = draw(st.sampled_from([" && ", " || "]))
                task["depends"] = joiner.join(deps[name])
        if draw(st.integers(0, 9)) == 0:
            task["withItems"] = draw(
                st.lists(st.integers(0, 99), min_size=1, max_size=3, unique=True)
            )
        tasks.append(task)
    doc = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "prop-"},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {"name": "main", "dag": {"tasks": tasks}},
                {
                    "name": "cpu",
                    "container": {"image": "x/cpu", "resources": {"requests": {"cpu": "1"}}},
                },
                {
                    "name": "gpu",
                    "container": {
                        "image": "x/gpu",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    },
                },
                {"name": "io", "script": {"image": "x/io", "source": "true"}},
            ],
        },
    }
    return doc, deps


def _has_cycle(deps: dict[str, list[str]]) -> bool:
    state: dict[str, int] = {}

    def visit(n: str) -> bool:
        if state.get(n) == 1:
            return True
        if state.get(n) == 2:
            return False
        state[n] = 1
        found = any(visit(d) for d in deps[n])
        state[n] = 2
        return found

    return any(visit(n) for n in deps)


@SETTINGS
@given(dags())
def test_units_come_in_dependency_order(case: tuple[dict[str, Any], dict[str, list[str]]]) -> None:
    doc, deps = case
    parsed = parse_workflow(doc)
    position = {u.name: i for i, u in enumerate(parsed.units)}
    tasks_seen = {u.task for u in parsed.units}
    assert tasks_seen == set(deps)
    for u in parsed.units:
        assert set(u.upstream) <= set(position)
        for up in u.upstream:
            assert position[up] < position[u.name]
        # Every declared dependency is honoured, through all units of an expanded task.
        upstream_tasks = {parsed.units[position[n]].task for n in u.upstream}
        assert upstream_tasks == set(deps[u.task])
    assert len({u.slug for u in parsed.units}) == len(parsed.units)


@SETTINGS
@given(dags(acyclic=False))
def test_cycles_are_refused(case: tuple[dict[str, Any], dict[str, list[str]]]) -> None:
    doc, deps = case
    if _has_cycle(deps):
        try:
            parse_workflow(doc)
        except WorkflowInvalid as exc:
            assert any("cycle" in e.message for e in exc.errors)
        else:
            raise AssertionError("a cyclic DAG was accepted")
    else:
        parse_workflow(doc)


SITES = Fleet(
    sites=tuple(
        SiteState(
            f"s{i:02d}",
            region=["eu", "us"][i % 2],
            capabilities=frozenset({"gpu"}) if i % 3 == 0 else frozenset(),
            cpu_allocatable=32_000,
            cpu_allocated=(i * 3_000) % 32_000,
            memory_allocatable=2**36,
            gpu_allocatable=4 if i % 3 == 0 else 0,
            gpu_allocated=i % 4 if i % 3 == 0 else 0,
        )
        for i in range(12)
    )
)
PROP_RULES = (
    Rule(
        1, "gpu", "require_capabilities", Selector(template="gpu"), params={"capabilities": ["gpu"]}
    ),
    Rule(2, "spread", "prefer_free_capacity", Selector(template="cpu"), weight=2),
    Rule(3, "io-late", "prefer_data_locality", Selector(template="io"), timing="runtime"),
)


@SETTINGS
@given(dags())
def test_the_same_input_gives_the_same_plan(
    case: tuple[dict[str, Any], dict[str, list[str]]],
) -> None:
    doc, _ = case
    first = plan(parse_workflow(doc), SITES, PROP_RULES, ()).as_dict()
    again = plan(
        parse_workflow(json.loads(json.dumps(doc))), SITES, list(reversed(PROP_RULES)), ()
    ).as_dict()
    assert first == again
    for unit in first["units"]:
        if unit["timing"] == "submit" and unit["site"] is not None:
            chosen = next(c for c in unit["candidates"] if c["site"] == unit["site"])
            assert chosen["eligible"]
            best = max(c["score"] for c in unit["candidates"] if c["eligible"])
            assert chosen["score"] == best


def _mangle(value: Any, data: st.DataObject) -> Any:
    """Randomly replace, drop or retype one node deep inside a document."""
    if isinstance(value, dict) and value and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(sorted(value)))
        out = dict(value)
        action = data.draw(st.sampled_from(["drop", "descend", "replace"]))
        if action == "drop":
            del out[key]
        elif action == "descend":
            out[key] = _mangle(value[key], data)
        else:
            out[key] = data.draw(JUNK)
        return out
    if isinstance(value, list) and value and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(value) - 1))
        out_list = list(value)
        out_list[i] = _mangle(value[i], data) if data.draw(st.booleans()) else data.draw(JUNK)
        return out_list
    return data.draw(JUNK)


JUNK = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=6,
)
BASE = json.loads(json.dumps(dict(eo_pipeline().document)))


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_mangled_documents_only_ever_raise_workflow_invalid(data: st.DataObject) -> None:
    doc = _mangle(BASE, data)
    try:
        parsed = parse_workflow(doc if isinstance(doc, dict) else json.dumps(doc))
    except WorkflowInvalid as exc:
        assert exc.errors and all(isinstance(e.path, str) and e.message for e in exc.errors)
        return
    plan(parsed, FLEET, RULES, DATASETS)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=300))
def test_random_bytes_only_ever_raise_workflow_invalid(raw: bytes | str) -> None:
    try:
        parse_workflow(raw)
    except WorkflowInvalid as exc:
        assert exc.errors
