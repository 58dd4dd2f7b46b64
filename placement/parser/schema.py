"""Structure: the document against the trimmed copy of Argo's JSON schema."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import tempfile
import threading
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import fastjsonschema
from jsonschema import Draft7Validator
from jsonschema.exceptions import ValidationError

from placement.parser.errors import FieldError, json_path, type_name

# The schema stays in ``placement/schemas`` beside the script that builds it.
SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "argo-workflow.json"


@cache
def _schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())
    return data


@cache
def full_validator(kind: str) -> Draft7Validator:
    schema = dict(_schema())
    schema["$ref"] = f"#/definitions/io.argoproj.workflow.v1alpha1.{kind}"
    return Draft7Validator(schema)


def _schema_message(err: ValidationError) -> str:
    # At run time ``validator`` is the failed keyword's name; the stubs type it as a validator.
    keyword: object = err.validator
    if keyword == "required":
        return f"required: {err.message}"
    if keyword == "type":
        expected = err.validator_value
        want = " or ".join(expected) if isinstance(expected, list) else expected
        return f"must be of type {want}, found {type_name(err.instance)}"
    if keyword == "const":
        return f"must be {json.dumps(err.validator_value)}"
    if keyword == "enum":
        values: Any = err.validator_value
        return f"must be one of {', '.join(map(str, values))}"
    return str(err.message)[:300]


def _formats(node: Any, out: set[str]) -> set[str]:
    if isinstance(node, dict):
        if isinstance(node.get("format"), str):
            out.add(node["format"])
        for value in node.values():
            _formats(value, out)
    elif isinstance(node, list):
        for value in node:
            _formats(value, out)
    return out


_fast: dict[str, Callable[[Any], Any]] = {}
_fast_lock = threading.Lock()
_fast_started: set[tuple[str, int]] = set()


def _compile_fast(kind: str) -> None:
    schema = dict(_schema())
    schema["$ref"] = f"#/definitions/io.argoproj.workflow.v1alpha1.{kind}"
    # Like Draft7Validator without a format checker: formats are annotations, not checks.
    formats = {name: (lambda _value: True) for name in _formats(schema, set())}
    code = fastjsonschema.compile_to_code(schema, formats=formats)
    # The generated module is about 1 MB of Python: compiling it costs seconds, so it is kept
    # in a cache folder (keyed by its content) where Python keeps its bytecode too, and every
    # later process loads it in a fraction of that.
    digest = hashlib.sha256(code.encode()).hexdigest()[:16]
    folder = Path(os.environ.get("PORTAL_SCHEMA_CACHE") or tempfile.gettempdir())
    folder = folder / "portal-schema-cache"
    name = f"argo_{kind.lower()}_{digest}"
    path = folder / f"{name}.py"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            partial = folder / f".{name}.{os.getpid()}.tmp"
            partial.write_text(code)
            partial.replace(path)
        spec = importlib.util.spec_from_file_location(f"_portal_{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        validate = module.validate
    except OSError:  # no writable cache: compile in memory
        validate = fastjsonschema.compile(schema, formats=formats)
        _fast[kind] = validate
        return
    _fast[kind] = lambda data: validate(data, formats)


def fast_validator(kind: str, wait: bool = False) -> Callable[[Any], Any] | None:
    """The schema compiled to Python (about 7x faster than ``jsonschema`` on a valid document).
    Compiling takes a second or two, so it happens once per process in the background; until it
    is ready, callers use the full validator."""
    validator = _fast.get(kind)
    # Keyed by process: a thread started before a fork does not run in the child.
    started = (kind, os.getpid())
    if validator is not None or (not wait and started in _fast_started):
        return validator
    with _fast_lock:
        if started not in _fast_started:
            _fast_started.add(started)
            if wait:
                _compile_fast(kind)
            else:
                threading.Thread(target=_compile_fast, args=(kind,), daemon=True).start()
    return _fast.get(kind)


def schema_errors(
    doc: Mapping[str, Any], kind: str = "Workflow", limit: int = 200
) -> list[FieldError]:
    """Structural problems of a Workflow/WorkflowTemplate against Argo's schema.

    A valid document (the common case) is confirmed by the compiled validator; only an
    invalid one pays for ``jsonschema``, which reports every problem with its path."""
    fast = fast_validator(kind)
    if fast is not None:
        try:
            fast(doc)
            return []
        except Exception:  # noqa: BLE001 - any doubt: let the full validator speak
            pass
    out: list[FieldError] = []
    try:
        for err in full_validator(kind).iter_errors(doc):
            out.append(FieldError(json_path(err.absolute_path), _schema_message(err)))
            if len(out) >= limit:
                break
    except RecursionError:
        out.append(FieldError("", "document nested too deeply"))
    out = [e for e in out if not _image_from_defaults(doc, e)]
    return sorted(set(out), key=lambda e: (e.path, e.message))


_TEMPLATE_IMAGE = re.compile(r"spec\.templates\[\d+\]\.(container|script)")


def _image_from_defaults(doc: Mapping[str, Any], err: FieldError) -> bool:
    """A template's missing ``image`` that ``spec.templateDefaults`` gives: Argo's validation
    takes the default's (workflow/validate/validate.go, ``image may not be empty`` only when
    ``templateDefaults.<type>.image`` is empty too)."""
    m = _TEMPLATE_IMAGE.fullmatch(err.path)
    if m is None or "'image' is a required property" not in err.message:
        return False
    spec = doc.get("spec")
    defaults = spec.get("templateDefaults") if isinstance(spec, Mapping) else None
    kind = defaults.get(m.group(1)) if isinstance(defaults, Mapping) else None
    return isinstance(kind, Mapping) and bool(kind.get("image"))
