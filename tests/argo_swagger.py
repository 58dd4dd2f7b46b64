"""Argo Server's swagger (read from the shared reference at test time, never copied here) as
jsonschema validators: an answer of the portal's Argo face must be one a client generated
from that swagger accepts."""

from __future__ import annotations

import functools
import json
from typing import Any

import jsonschema

from tests.stack import REFERENCE

SWAGGER = REFERENCE / "argo" / "swagger.json"
PREFIX = "io.argoproj.workflow.v1alpha1."


@functools.cache
def swagger() -> dict[str, Any]:
    return json.loads(SWAGGER.read_text())


@functools.cache
def validator(definition: str) -> jsonschema.Draft4Validator:
    name = definition if "." in definition else PREFIX + definition
    schema = {"$ref": f"#/definitions/{name}", "definitions": swagger()["definitions"]}
    return jsonschema.Draft4Validator(schema)


def check(definition: str, instance: Any) -> None:
    """Raise with every violation listed when ``instance`` is not a ``definition``."""
    errors = sorted(validator(definition).iter_errors(instance), key=lambda e: list(e.path))
    if errors:
        raise AssertionError(
            f"not a {definition}: "
            + "; ".join(f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors[:10])
        )


def validator_for(schema: dict[str, Any]) -> jsonschema.Draft4Validator:
    """A validator of an inline schema (a stream's ``{"result", "error"}`` wrapper)."""
    return jsonschema.Draft4Validator(schema)
