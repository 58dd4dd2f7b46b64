"""A template's image may come from ``spec.templateDefaults``, as Argo's validation has it
(workflow/validate/validate.go; test/e2e/functional/template-default-image.yaml)."""

from __future__ import annotations

from typing import Any

import pytest

from placement.parser import WorkflowInvalid
from placement.parser.workflow import parse_workflow


def _wf(defaults: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "entrypoint": "main",
        "templates": [{"name": "main", "container": {"command": ["echo", "hi"]}}],
    }
    if defaults is not None:
        spec["templateDefaults"] = defaults
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "d-"},
        "spec": spec,
    }


def test_image_from_template_defaults_is_accepted() -> None:
    parsed = parse_workflow(_wf({"container": {"image": "alpine:3.23"}}))
    assert len(parsed.units) == 1


@pytest.mark.parametrize("defaults", [None, {"script": {"image": "alpine:3.23"}}])
def test_image_missing_everywhere_is_refused(defaults: dict[str, Any] | None) -> None:
    with pytest.raises(WorkflowInvalid) as exc:
        parse_workflow(_wf(defaults))
    assert "spec.templates[0].container" in str(exc.value)
