"""Every Argo example in ../shared/reference/argo/examples: previewed or refused with paths,
never anything else; step workflows of every previewed unit validate against Argo's schemas."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from placement.manifests import TaskOutputs, step_workflow
from placement.parser import (
    CatalogueEntry,
    ParsedWorkflow,
    Unit,
    WorkflowInvalid,
    expand_with_param,
    parse_workflow,
    parse_workflow_template,
)
from placement.planner import plan
from tests.placement.demo import DATASETS, FLEET, RULES
from tests.placement.schemas import EXAMPLES, argo_problems, example_documents, need_reference


class _Anything(Mapping[str, Any]):
    """Stands in for any upstream output: every name is present."""

    def __init__(self, make: Any) -> None:
        self.make = make

    def __getitem__(self, key: str) -> Any:
        return self.make(key)

    def __contains__(self, key: object) -> bool:
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


ANY_OUTPUT = TaskOutputs(
    parameters=_Anything(lambda k: f"value-of-{k}"),
    result="result",
    artifacts=_Anything(lambda k: {"name": k, "s3": {"key": f"runs/1/{k}.tgz"}}),
    exit_code="0",
    extra=_Anything(lambda k: f"{k}-value"),
)
ANY_OUTPUTS = _Anything(lambda _task: ANY_OUTPUT)


def catalogues() -> tuple[dict[str, CatalogueEntry], dict[str, CatalogueEntry]]:
    """The examples' WorkflowTemplates and ClusterWorkflowTemplates, as the portal stores them."""
    namespaced: dict[str, CatalogueEntry] = {}
    cluster: dict[str, CatalogueEntry] = {}
    for _name, _i, doc in example_documents():
        if isinstance(doc, dict) and doc.get("kind") in (
            "WorkflowTemplate",
            "ClusterWorkflowTemplate",
        ):
            entry = parse_workflow_template(doc)
            (namespaced if entry.kind == "WorkflowTemplate" else cluster)[entry.name] = entry
    return namespaced, cluster


def runtime_items(unit: Unit) -> list[Any]:
    """Items shaped like the ones the unit's arguments use ({{item}} or {{item.key}})."""
    keys = sorted(
        set(
            re.findall(
                r"\{\{\s*item\.([-\w]+)",
                json.dumps([a.__dict__ for a in unit.arguments.parameters]),
            )
        )
    )
    if keys:
        return [{k: f"{k}-{i}" for k in keys} for i in range(2)]
    return ["one", "two"]


def compile_all(parsed: ParsedWorkflow) -> list[dict[str, Any]]:
    decisions = plan(parsed, FLEET, RULES, DATASETS).by_unit()
    out = []
    for unit in parsed.units:
        expanded = (
            expand_with_param(unit, runtime_items(unit)) if unit.runtime_expansion else (unit,)
        )
        for u in expanded:
            d = decisions[unit.name]
            out.append(
                step_workflow(
                    parsed,
                    u,
                    run_name="example-run",
                    run_id=1,
                    namespace="portal",
                    site=d.site,
                    reason=d.reason,
                    outputs=ANY_OUTPUTS,
                )
            )
    return out


def test_every_example_previews_or_is_refused_with_paths(
    capsys: pytest.CaptureFixture[str],
) -> None:
    need_reference()
    if not EXAMPLES.is_dir():
        pytest.skip(f"no examples at {EXAMPLES}")
    namespaced, cluster = catalogues()
    previewed: list[str] = []
    refused: dict[str, list[str]] = {}
    other_kinds = 0
    step_workflows = 0
    for name, i, doc in example_documents():
        if not isinstance(doc, dict) or doc.get("kind") != "Workflow":
            other_kinds += 1
            continue
        label = f"{name}#{i}"
        try:
            parsed = parse_workflow(doc, namespaced, cluster_catalogue=cluster)
        except WorkflowInvalid as exc:
            assert all(isinstance(e.path, str) and e.message for e in exc.errors)
            refused[label] = [f"{e.path}: {e.message}" for e in exc.errors]
            continue
        body = plan(parsed, FLEET, RULES, DATASETS).as_dict()
        assert [u["name"] for u in body["units"]] == [u.name for u in parsed.units]
        for wf in compile_all(parsed):
            assert argo_problems(wf) == [], f"{label}: {wf['metadata']['name']}"
            step_workflows += 1
        previewed.append(label)
    summary = (
        f"examples: {len(previewed)} previewed, {len(refused)} refused, "
        f"{other_kinds} other kinds skipped, {step_workflows} step workflows validated"
    )
    with capsys.disabled():  # the counts show without -s
        print(f"\n{summary}")
        for label, errs in sorted(refused.items()):
            print(f"  refused {label}: {errs[0]}")
    assert previewed, summary
    # The refusals are the examples whose WorkflowTemplates are not in this half of the examples.
    assert all("in the catalogue" in errs[0] for errs in refused.values()), refused
    assert len(previewed) >= 90, summary


def test_every_example_file_as_submitted_bytes_never_crashes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Whole files (some hold several documents) go through the byte path: accepted or
    refused, never another exception."""
    need_reference()
    namespaced, cluster = catalogues()
    outcomes = {"accepted": 0, "refused": 0}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        try:
            parse_workflow(path.read_bytes(), namespaced, cluster_catalogue=cluster)
            outcomes["accepted"] += 1
        except WorkflowInvalid as exc:
            assert exc.errors
            outcomes["refused"] += 1
    with capsys.disabled():
        print(f"\nexample files as bytes: {outcomes}")
    assert outcomes["accepted"] > 0 and outcomes["refused"] > 0
