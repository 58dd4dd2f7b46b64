"""CRD openAPIV3Schema validation, answering 422 Invalid the way the apiserver does."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from sandbox.errors import ApiError
from sandbox.resources import ResourceType

MAX_CAUSES = 10
log = logging.getLogger("sandbox.schema")


def _to_jsonschema(node: Any) -> Any:
    """OpenAPI v3 is close to draft 4; `nullable` and int-or-string need translating."""
    if isinstance(node, list):
        return [_to_jsonschema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _to_jsonschema(v) for k, v in node.items() if k != "description"}
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


class SchemaRegistry:
    def __init__(self) -> None:
        self._validators: dict[tuple[str, str, str], jsonschema.Draft4Validator] = {}
        self._schemas: dict[tuple[str, str, str], dict[str, Any]] = {}

    def load(self, paths: Iterable[Path]) -> None:
        for path in paths:
            # Folders are searched recursively, so the whole reference folder can be given;
            # files that are not CRDs are skipped.
            files = (
                sorted(path.rglob("*.yaml")) + sorted(path.rglob("*.yml"))
                if path.is_dir()
                else [path]
            )
            for f in files:
                for doc in _crd_documents(f):
                    self._add(doc)

    def _add(self, crd: dict[str, Any]) -> None:
        group = crd["spec"]["group"]
        kind = crd["spec"]["names"]["kind"]
        for version in crd["spec"].get("versions", []):
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            if schema:
                self._schemas[(group, version["name"], kind)] = schema
                self._validators[(group, version["name"], kind)] = jsonschema.Draft4Validator(
                    _to_jsonschema(schema)
                )

    def kinds(self) -> list[tuple[str, str, str]]:
        return sorted(self._validators)

    def has(self, rtype: ResourceType) -> bool:
        return (rtype.group, rtype.version, rtype.kind) in self._schemas

    def default(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        """Fill the CRD's `default:` values in place, as the apiserver's structural defaulting
        does: a default applies where its parent object is present and the field is not."""
        schema = self._schemas.get((rtype.group, rtype.version, rtype.kind))
        if schema is not None:
            apply_defaults(schema, obj)

    def validate(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        validator = self._validators.get((rtype.group, rtype.version, rtype.kind))
        if validator is None:
            return
        causes: list[dict[str, str]] = []
        for error in validator.iter_errors(obj):
            causes.append(_cause(error))
            if len(causes) >= MAX_CAUSES:
                break
        if causes:
            causes.sort(key=lambda c: c["field"])
            name = (obj.get("metadata") or {}).get("name", "")
            raise ApiError.invalid(rtype.group, rtype.kind, name, causes)


def apply_defaults(schema: dict[str, Any], node: Any) -> None:
    if isinstance(node, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key not in node and "default" in sub:
                node[key] = json.loads(json.dumps(sub["default"]))
            if key in node:
                apply_defaults(sub, node[key])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key, value in node.items():
                if key not in (schema.get("properties") or {}):
                    apply_defaults(extra, value)
    elif isinstance(node, list) and isinstance(schema.get("items"), dict):
        for item in node:
            apply_defaults(schema["items"], item)


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "multisite-sandbox"


def _crd_documents(path: Path) -> list[dict[str, Any]]:
    """The CRDs in one file. Parsed YAML is cached as JSON next to nothing of the repo: the
    Argo CRD is 2.8 MB and YAML parsing took most of the sandbox's start-up."""
    raw = path.read_bytes()
    cache = _cache_dir() / f"crd-{hashlib.sha256(raw).hexdigest()[:32]}.json"
    try:
        cached: list[dict[str, Any]] = json.loads(cache.read_text())
        return cached
    except (OSError, ValueError):
        pass
    if b"CustomResourceDefinition" not in raw:
        return []
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        docs = [
            d
            for d in yaml.load_all(raw, Loader=loader)
            if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition"
        ]
    except yaml.YAMLError as exc:
        # A folder may hold templates that are not plain YAML; they hold no CRD we can use.
        log.warning("skipping %s: %s", path, exc)
        return []
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(docs))
        tmp.replace(cache)
    except OSError:
        pass  # a read-only home only costs start-up time
    return docs


def _field_path(parts: Iterable[Any]) -> str:
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
    return out


def _cause(error: jsonschema.ValidationError) -> dict[str, str]:
    path = _field_path(error.absolute_path)
    kind = str(error.validator)
    if kind == "required":
        missing = error.message.split("'")[1] if "'" in error.message else ""
        field = f"{path}.{missing}" if path else missing
        return {"reason": "FieldValueRequired", "field": field, "message": "Required value"}
    value = json.dumps(error.instance)[:80]
    if kind == "enum":
        values: Any = error.validator_value
        allowed = ", ".join(json.dumps(v) for v in values)
        return {
            "reason": "FieldValueNotSupported",
            "field": path,
            "message": f"Unsupported value: {value}: supported values: {allowed}",
        }
    if kind == "type":
        return {
            "reason": "FieldValueTypeInvalid",
            "field": path,
            "message": f"Invalid value: {value}: {path} in body must be of type "
            f"{error.validator_value}",
        }
    return {
        "reason": "FieldValueInvalid",
        "field": path,
        "message": f"Invalid value: {value}: {error.message}",
    }
