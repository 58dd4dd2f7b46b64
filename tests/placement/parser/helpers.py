"""Workflow bodies for the parser tests, and what parsing them gives or refuses."""

from __future__ import annotations

import textwrap

import pytest

from placement.parser import (
    FieldError,
    ParsedWorkflow,
    WorkflowInvalid,
    parse_workflow,
)

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
