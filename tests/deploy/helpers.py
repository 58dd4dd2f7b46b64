"""The manifests in deploy/ and the checks they pass: upstream CRD schemas made strict, and the
kubernetes client's models for built-in objects."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes.client as k8s_models
import pytest
import yaml
from jsonschema import Draft7Validator

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO.parent / "shared" / "reference"
DEPLOY = REPO / "deploy"
COMPOSE = REPO / "docker-compose.yml"
COMPOSE_KARMADA = DEPLOY / "compose.karmada.yml"
INTERPRETER = DEPLOY / "karmada" / "workflow-interpreter.yaml"
EXAMPLE = DEPLOY / "examples" / "karmada-manifests.demo.yaml"
NOT_MANIFESTS = {"kustomization.yaml", "compose.karmada.yml"}
CRD_GROUPS = ("policy.karmada.io/", "work.karmada.io/", "config.karmada.io/", "argoproj.io/")
DOMAIN = "portal.multisite.io"
# libyaml when present: the Argo CRD is several megabytes.
YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def need_tool(name: str, install: str) -> str:
    path = shutil.which(name)
    if path:
        return path
    message = f"{name} not found ({install})"
    if os.environ.get("CI"):
        pytest.fail(message + ": CI must check this, see .ci/run")
    pytest.skip(message)


def need_reference() -> None:
    if not REFERENCE.is_dir():
        pytest.fail(f"upstream reference data not found at {REFERENCE}")


# Structural-schema validation of CRD objects


def strict(schema: Any) -> Any:
    """An OpenAPI v3 structural schema as the API server applies it, for jsonschema:

    * objects with ``properties`` refuse other keys (the server would prune them), unless
      ``x-kubernetes-preserve-unknown-fields`` or ``additionalProperties`` says otherwise;
    * ``x-kubernetes-int-or-string`` accepts an integer or a string;
    * ``x-kubernetes-embedded-resource`` objects may carry apiVersion, kind and metadata;
    * ``nullable: true`` accepts null; the other ``x-kubernetes-*`` keys (list and map types)
      only guide server-side apply merges, not validation.
    """
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items() if k != "description"}
    if out.get("x-kubernetes-int-or-string") and "type" not in out and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.get("x-kubernetes-embedded-resource"):
        props = out.setdefault("properties", {})
        for key in ("apiVersion", "kind"):
            props.setdefault(key, {"type": "string"})
        props.setdefault("metadata", {"type": "object"})
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if out.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


@cache
def crd_validators() -> dict[tuple[str, str], Draft7Validator]:
    need_reference()
    files = sorted((REFERENCE / "karmada" / "crds").glob("*.yaml"))
    files.append(REFERENCE / "argo" / "argoproj.io_workflows.yaml")
    out: dict[tuple[str, str], Draft7Validator] = {}
    for path in files:
        crd = yaml.load(path.read_text(), Loader=YAML_LOADER)
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = strict(version["schema"]["openAPIV3Schema"])
            out[(f"{group}/{version['name']}", kind)] = Draft7Validator(schema)
    return out


def crd_schema(api_version: str, kind: str) -> dict[str, Any]:
    return crd_validators()[(api_version, kind)].schema


def schema_problems(validator: Draft7Validator, obj: Any) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '.'}: {e.message[:240]}"
        for e in validator.iter_errors(obj)
    ]


def crd_problems(obj: Mapping[str, Any]) -> list[str]:
    validator = crd_validators().get((obj["apiVersion"], obj["kind"]))
    if validator is None:
        return [f"no upstream CRD for {obj['apiVersion']} {obj['kind']}"]
    return schema_problems(validator, obj) + model_problems(
        obj.get("metadata", {}), "V1ObjectMeta", "metadata"
    )


# --------------------------------------------------------------------------------------------
# Built-in objects against the kubernetes client's generated models

_PRIMITIVES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "datetime": (str,),
    "date": (str,),
}


def model_problems(value: Any, type_name: str, path: str) -> list[str]:
    """Unknown fields and wrong types, walking the model classes' ``openapi_types``."""
    if value is None:
        return []
    if type_name == "object":  # int-or-string, raw extensions: anything
        return []
    if type_name in _PRIMITIVES:
        ok = isinstance(value, _PRIMITIVES[type_name]) and not (
            type_name in ("int", "float") and isinstance(value, bool)
        )
        return [] if ok else [f"{path}: expected {type_name}, got {value!r}"]
    if m := re.fullmatch(r"list\[(.+)\]", type_name):
        if not isinstance(value, list):
            return [f"{path}: expected a list, got {value!r}"]
        return [p for i, v in enumerate(value) for p in model_problems(v, m[1], f"{path}[{i}]")]
    if m := re.fullmatch(r"dict\(str, (.+)\)", type_name):
        if not isinstance(value, dict):
            return [f"{path}: expected a map, got {value!r}"]
        return [p for k, v in value.items() for p in model_problems(v, m[1], f"{path}.{k}")]
    model = getattr(k8s_models, type_name)
    if not isinstance(value, dict):
        return [f"{path}: expected a {type_name} object, got {value!r}"]
    by_json = {json_name: attr for attr, json_name in model.attribute_map.items()}
    problems = []
    for key, item in value.items():
        if key not in by_json:
            problems.append(f"{path}.{key}: unknown field of {type_name}")
            continue
        problems += model_problems(item, model.openapi_types[by_json[key]], f"{path}.{key}")
    return problems


class _Response:
    def __init__(self, obj: Any) -> None:
        self.data = json.dumps(obj)


def builtin_problems(obj: Mapping[str, Any]) -> list[str]:
    api_version, kind = obj["apiVersion"], obj["kind"]
    _group, _, version = api_version.rpartition("/")
    model_name = version.capitalize() + kind
    if not hasattr(k8s_models, model_name):
        return [f"no Kubernetes model for {api_version} {kind}"]
    problems = model_problems(dict(obj), model_name, kind)
    if problems:
        return problems
    try:  # required fields and enum-like checks the models do on construction
        k8s_models.ApiClient().deserialize(_Response(obj), model_name)
    except ValueError as exc:
        return [f"{kind}: {exc}"]
    return []


def manifest_problems(obj: Mapping[str, Any]) -> list[str]:
    if str(obj.get("apiVersion", "")).startswith(CRD_GROUPS):
        return crd_problems(obj)
    return builtin_problems(obj)


# The manifests in deploy/


def manifest_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*.y*ml") if p.name not in NOT_MANIFESTS and p.is_file())


def documents() -> Iterator[tuple[str, int, dict[str, Any]]]:
    for path in manifest_files():
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc is not None:
                yield str(path.relative_to(REPO)), i, doc


DOCUMENTS = list(documents())


def rules_of(kind: str, name: str = "multisite-portal", folder: str = "karmada") -> list[Any]:
    path = f"deploy/{folder}/rbac.yaml" if folder == "karmada" else "deploy/member/portal-rbac.yaml"
    docs = [
        d
        for p, _, d in DOCUMENTS
        if p == path and d["kind"] == kind and d["metadata"]["name"] == name
    ]
    assert len(docs) == 1
    return list(docs[0]["rules"])


def grants(rules: list[dict[str, Any]]) -> dict[tuple[str, str, str], set[str]]:
    """(group, resource, resourceName or '*') -> verbs."""
    out: dict[tuple[str, str, str], set[str]] = {}
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for name in rule.get("resourceNames", ["*"]):
                    out.setdefault((group, resource, name), set()).update(rule["verbs"])
    return out
