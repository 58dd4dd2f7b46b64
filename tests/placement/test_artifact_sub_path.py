"""An artifact argument's ``subPath`` as Argo resolves it (workflow/controller/scope.go
``resolveArtifact``: appended to the named artifact's key; an absent optional in it errors)."""

from __future__ import annotations

import pytest

from placement.manifests import TaskOutputs, Unresolved, resolve_arguments, with_skipped_defaults
from placement.parser import parse_arguments

ART = {"name": "out", "s3": {"bucket": "b", "key": "run/producer/out"}}


def _args(sub: str) -> object:
    return parse_arguments(
        {
            "artifacts": [
                {"name": "data", "from": "{{tasks.a.outputs.artifacts.out}}", "subPath": sub}
            ]
        }
    )


def test_sub_path_is_appended_to_the_key() -> None:
    outputs = {
        "a": TaskOutputs(artifacts={"out": ART}),
        "p": TaskOutputs(parameters={"dir": "sub"}),
    }
    got = resolve_arguments(_args("{{tasks.p.outputs.parameters.dir}}"), {}, outputs)  # type: ignore[arg-type]
    (art,) = got["artifacts"]
    assert art["s3"]["key"] == "run/producer/out/sub"
    assert "subPath" not in art


def test_an_absent_optional_in_the_sub_path_is_unresolved() -> None:
    templates = {
        "produce": {"outputs": {"parameters": [{"name": "dir", "valueFrom": {"path": "/x"}}]}}
    }
    outputs = with_skipped_defaults(
        {
            "a": TaskOutputs(artifacts={"out": ART}),
            "p": TaskOutputs(phase="Skipped", template="produce"),
        },
        templates,
    )
    with pytest.raises(Unresolved):
        resolve_arguments(_args("{{tasks.p.outputs.parameters.dir}}"), {}, outputs)  # type: ignore[arg-type]
