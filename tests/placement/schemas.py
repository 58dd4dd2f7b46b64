"""Upstream schemas from ../shared/reference, loaded once per test session (read-only)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator, Draft202012Validator

from placement.schemas.build import build
from tests.placement.demo import REFERENCE

ARGO_SCHEMA = REFERENCE / "argo" / "schema.json"
ARGO_CRD = REFERENCE / "argo" / "argoproj.io_workflows.yaml"
KARMADA_CRDS = REFERENCE / "karmada" / "crds"
EXAMPLES = REFERENCE / "argo" / "examples"

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def need_reference() -> None:
    if not REFERENCE.is_dir():
        pytest.skip(f"upstream reference data not found at {REFERENCE} (../shared/reference)")


@cache
def argo_crd_validator() -> Draft7Validator:
    """Argo's Workflow CRD openAPIV3Schema: what the API server enforces."""
    crd = yaml.load(ARGO_CRD.read_text(), Loader=_LOADER)
    return Draft7Validator(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


@cache
def argo_json_validator() -> Draft202012Validator:
    """Argo's JSON schema, with the widening placement/schemas/build.py documents
    (IntOrString, Quantity and AnyString accept what Argo's decoder accepts)."""
    schema = build(ARGO_SCHEMA)
    schema["$ref"] = "#/definitions/io.argoproj.workflow.v1alpha1.Workflow"
    return Draft202012Validator(schema)


@cache
def karmada_validators() -> dict[tuple[str, str], Draft7Validator]:
    out: dict[tuple[str, str], Draft7Validator] = {}
    for path in sorted(KARMADA_CRDS.glob("*.yaml")):
        crd = yaml.load(path.read_text(), Loader=_LOADER)
        group = crd["spec"]["group"]
        kind = crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            out[(f"{group}/{version['name']}", kind)] = Draft7Validator(
                version["schema"]["openAPIV3Schema"]
            )
    return out


def problems(
    validator: Draft7Validator | Draft202012Validator, obj: Mapping[str, Any]
) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}"
        for e in validator.iter_errors(obj)
    ]


def argo_problems(workflow: Mapping[str, Any]) -> list[str]:
    return problems(argo_crd_validator(), workflow) + problems(argo_json_validator(), workflow)


def karmada_problems(obj: Mapping[str, Any]) -> list[str]:
    validator = karmada_validators().get((obj["apiVersion"], obj["kind"]))
    if validator is None:
        return [f"no upstream CRD for {obj['apiVersion']} {obj['kind']}"]
    return problems(validator, obj)


def example_documents() -> Iterator[tuple[str, int, Any]]:
    """(file name, index, document) for every YAML document of every example file."""
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for i, doc in enumerate(yaml.load_all(path.read_text(), Loader=_LOADER)):
            yield path.name, i, doc


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=True)[:2000]
