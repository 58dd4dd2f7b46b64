"""Intake: template references resolved against the catalogue of WorkflowTemplates."""

from __future__ import annotations

import pytest

from placement.parser import (
    WorkflowInvalid,
    parse_workflow_template,
)
from tests.placement.parser.helpers import HEAD, errors, paths, wf

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
