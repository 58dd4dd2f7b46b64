"""Workflow intake: safe decoding, validation, and placement units (DESIGN sections 4 and 9).

Pure module: no Django, no I/O except reading the shipped schema file once.

``parse_workflow(raw, catalogue=...)`` takes YAML/JSON bytes or text (or an already decoded
dict), checks the document for structure (Argo's JSON schema, trimmed copy in
``placement/schemas``) and for meaning (entrypoint, template references, names, cycles,
``depends`` expressions), and returns a ``ParsedWorkflow`` whose ``units`` are in topological
order. Every problem found is reported at once in ``WorkflowInvalid.errors`` as
``FieldError(path, message)`` with paths like ``spec.templates[2].dag.tasks[0].dependencies``.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib.util
import json
import math
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

import fastjsonschema
import yaml
from jsonschema import Draft7Validator
from jsonschema.exceptions import ValidationError

DEFAULT_DOMAIN = "portal.multisite.io"
SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "argo-workflow.json"
API_VERSION = "argoproj.io/v1alpha1"

# Kubernetes and Argo name rules.
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Argo's workflowFieldNameFmt (templates, steps, DAG tasks), at most 128 characters.
ARGO_FIELD_NAME = re.compile(r"^[a-zA-Z0-9][-a-zA-Z0-9]*$")
ARGO_FIELD_MAX = 128
# Argo's parameter / artifact name rule.
PARAM_NAME = re.compile(r"^[-a-zA-Z0-9_]+$")

TEMPLATE_TYPES = (
    "container",
    "containerSet",
    "script",
    "resource",
    "dag",
    "steps",
    "suspend",
    "data",
    "http",
    "plugin",
)
TASK_RESULTS = (
    "Succeeded",
    "Failed",
    "Errored",
    "Skipped",
    "Omitted",
    "Daemoned",
    "AnySucceeded",
    "AllFailed",
)
SLUG_MAX = 40  # leaves room for "<run>-<slug>-<attempt>" in 63 characters before hashing
UnitKind = Literal["task", "step", "workflow"]


# --------------------------------------------------------------------------------------------
# Errors and limits


@dataclass(frozen=True)
class FieldError:
    """One problem with the submitted document; ``path`` is empty for the document itself."""

    path: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


class WorkflowInvalid(Exception):
    """The document was refused; ``errors`` lists every problem found (never empty)."""

    def __init__(self, errors: Sequence[FieldError]) -> None:
        self.errors: list[FieldError] = list(errors) or [FieldError("", "invalid document")]
        super().__init__(
            "; ".join(f"{e.path or '<document>'}: {e.message}" for e in self.errors[:5])
        )

    def as_dicts(self) -> list[dict[str, str]]:
        return [e.as_dict() for e in self.errors]


@dataclass(frozen=True)
class Limits:
    """Bounds on what intake accepts. Defaults suit the REST API; tests shrink them."""

    max_body_bytes: int = 1024 * 1024
    max_units: int = 5000
    # Alias *uses* are cheap for PyYAML (it shares the node), but every consumer that walks the
    # result pays for the expansion: bound both the number of aliases and the expanded size.
    max_yaml_aliases: int = 1000
    max_expanded_nodes: int = 500_000
    max_depth: int = 64
    max_errors: int = 200


DEFAULT_LIMITS = Limits()


# --------------------------------------------------------------------------------------------
# Result types


@dataclass(frozen=True)
class Parameter:
    """A workflow argument or a task argument parameter, with its raw (unresolved) value."""

    name: str
    value: str | None = None
    default: str | None = None
    enum: tuple[str, ...] = ()
    description: str | None = None
    value_from: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Artifact:
    """An argument artifact: ``from_`` is a ``{{...}}`` reference, ``locations`` the URIs of an
    inline location (``s3://bucket/key``, ``gs://...``, ``https://...``), ``raw`` the source."""

    name: str
    from_: str | None
    locations: tuple[str, ...]
    raw: Mapping[str, Any]


@dataclass(frozen=True)
class Arguments:
    parameters: tuple[Parameter, ...] = ()
    artifacts: tuple[Artifact, ...] = ()


@dataclass(frozen=True)
class Resources:
    """What one pod of the unit asks for at most. CPU in millicores, memory in bytes."""

    cpu_millicores: int = 0
    memory_bytes: int = 0
    gpus: int = 0


@dataclass(frozen=True)
class Unit:
    """A placement unit (DESIGN section 4): one DAG task, one step, or the whole entrypoint.

    ``template`` and ``templates`` are keys into ``ParsedWorkflow.templates``: a local template
    name, ``"ref:<workflowtemplate>/<template>"`` or ``"cref:<clusterworkflowtemplate>/<template>"``
    for a ``templateRef``, or ``"inline:<task>"`` for an inline template. ``upstream`` names
    units of this workflow; ``depends`` is the Argo expression over *task* names (for
    ``dependencies`` lists it is the equivalent ``A && B``); ``with_param`` is set when the unit
    must be expanded at run time (see ``expand_with_param``).
    """

    name: str
    slug: str
    kind: UnitKind
    task: str
    template: str
    templates: tuple[str, ...]
    upstream: tuple[str, ...]
    depends: str
    when: str | None
    arguments: Arguments
    labels: Mapping[str, str]
    images: tuple[str, ...]
    resources: Resources
    datasets: tuple[str, ...]
    data_refs: tuple[str, ...]
    item: Any = None
    item_index: int | None = None
    with_param: str | None = None
    continue_on_failed: bool = False

    @property
    def runtime_expansion(self) -> bool:
        return self.with_param is not None


@dataclass(frozen=True)
class ParsedWorkflow:
    """A validated Workflow. ``spec`` is the (merged, for workflowTemplateRef) spec as given."""

    name: str | None
    generate_name: str | None
    namespace: str | None
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    arguments: Arguments
    entrypoint: str
    on_exit: str | None
    templates: Mapping[str, Mapping[str, Any]]
    template_scopes: Mapping[str, str]
    units: tuple[Unit, ...]
    spec: Mapping[str, Any]
    document: Mapping[str, Any] = field(repr=False)

    @property
    def display_name(self) -> str:
        return self.name or (self.generate_name or "workflow").rstrip("-")

    def workflow_parameters(self) -> dict[str, str]:
        """Workflow parameter values as submitted (value, else default; missing → "")."""
        out: dict[str, str] = {}
        for p in self.arguments.parameters:
            v = p.value if p.value is not None else p.default
            out[p.name] = v if v is not None else ""
        return out


@dataclass(frozen=True)
class CatalogueEntry:
    """A WorkflowTemplate (or ClusterWorkflowTemplate) as stored in the portal's catalogue."""

    name: str
    kind: str
    document: Mapping[str, Any]


# --------------------------------------------------------------------------------------------
# Safe YAML


class _YamlTooLarge(Exception):
    pass


# libyaml when present (about 20x faster); PyYAML's pure-Python classes otherwise.
_BaseLoader: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _BoundedLoader(_BaseLoader):
    """Safe loader that refuses documents whose alias expansion would be large.

    PyYAML composes an alias as a reference to the anchored node, so the composed graph stays the
    size of the input; the danger (billion laughs) is the *expanded* tree every later walk sees.
    ``construct_document`` measures the expanded size with memoisation (linear in the graph) and
    refuses before any Python object is built. Nesting depth and alias count are checked on the
    event stream first (``_prescan``): libyaml's composer recurses in C and would crash the
    process on a document nested a hundred thousand levels deep.
    Timestamps stay strings, as in Kubernetes' YAML decoding.
    """

    max_nodes = DEFAULT_LIMITS.max_expanded_nodes
    max_depth = DEFAULT_LIMITS.max_depth

    def construct_document(self, node: Any) -> Any:
        _check_expansion(node, self.max_nodes, self.max_depth)
        return super().construct_document(node)


_BoundedLoader.yaml_implicit_resolvers = {
    key: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_OPEN = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSE = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


def _prescan(text: str, limits: Limits) -> None:
    """Refuse deep nesting and too many aliases from the event stream (flat, no recursion)."""
    depth = aliases = 0
    for event in yaml.parse(text, Loader=_BaseLoader):
        if isinstance(event, _OPEN):
            depth += 1
            if depth > limits.max_depth:
                raise _YamlTooLarge(f"nesting deeper than {limits.max_depth} levels")
        elif isinstance(event, _CLOSE):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > limits.max_yaml_aliases:
                raise _YamlTooLarge(f"more than {limits.max_yaml_aliases} YAML aliases")


def _check_expansion(root: Any, max_nodes: int, max_depth: int) -> None:
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: Any, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if depth > max_depth:
            raise _YamlTooLarge(f"nesting deeper than {max_depth} levels")
        if key in active:
            raise _YamlTooLarge("recursive YAML alias")
        total = 1
        if isinstance(node, yaml.SequenceNode | yaml.MappingNode):
            active.add(key)
            children: Iterable[Any] = (
                node.value
                if isinstance(node, yaml.SequenceNode)
                else (n for pair in node.value for n in pair)
            )
            for child in children:
                total += size(child, depth + 1)
                if total > max_nodes:
                    raise _YamlTooLarge(f"document expands to more than {max_nodes} nodes")
            active.discard(key)
        sizes[key] = total
        return total

    size(root, 0)


_STR_TAG = "tag:yaml.org,2002:str"
# What a plain scalar may resolve to without leaving the fast path (merge keys, ``=`` and
# anything else go to the full loader).
_PLAIN_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in ("str", "null", "bool", "int", "float"))


_NO_KEY = object()  # a mapping waiting for its next key


class _NeedsFullLoader(Exception):
    """The document uses a YAML feature the single-pass reader leaves to the full loader."""


_plain_reader = threading.local()


def _reader() -> Any:
    # One loader per thread supplies PyYAML's own scalar resolution and construction, so the
    # single pass types every scalar exactly as the full loader would.
    reader = getattr(_plain_reader, "loader", None)
    if reader is None:
        reader = _plain_reader.loader = _BoundedLoader("")
    return reader


def _load_plain(text: str, limits: Limits) -> list[Any]:
    """The documents of ``text`` in plain JSON types, in one pass over libyaml's events; raises
    ``_NeedsFullLoader`` when the document needs the full loader (anchors, aliases, explicit
    collection tags, merge keys, keys that are not strings, non-finite numbers).

    Most submissions use none of those, and for them this does the work of ``_prescan``,
    the composer, ``_check_expansion``, the constructor and ``_to_json`` at once: the same
    limits, the same messages, the same values (tests/placement compare both on every
    reference example and on generated documents), in about half the time."""
    reader = _reader()
    resolve, constructors = reader.resolve, reader.yaml_constructors
    docs: list[Any] = []
    # Open collections: [container, pending mapping key or _NO_KEY]
    stack: list[list[Any]] = []
    nodes = 0
    root: Any = None
    for event in yaml.parse(text, Loader=_BaseLoader):
        kind = type(event)
        if kind is yaml.ScalarEvent:
            if event.anchor is not None:
                raise _NeedsFullLoader
            tag = event.tag
            if tag is None or tag == "!":
                tag = resolve(yaml.ScalarNode, event.value, event.implicit)
            if tag == _STR_TAG:
                value: Any = event.value
            elif tag in _PLAIN_TAGS:
                value = constructors[tag](reader, yaml.ScalarNode(tag, event.value))
                if isinstance(value, float) and not math.isfinite(value):
                    raise _NeedsFullLoader
            else:
                raise _NeedsFullLoader
            nodes += 1
        elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            if event.anchor is not None or event.tag not in (None, "!"):
                raise _NeedsFullLoader
            if len(stack) >= limits.max_depth:
                raise _YamlTooLarge(f"nesting deeper than {limits.max_depth} levels")
            nodes += 1
            stack.append([{} if kind is yaml.MappingStartEvent else [], _NO_KEY])
            continue
        elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
            value = stack.pop()[0]
        elif kind is yaml.DocumentStartEvent:
            nodes = 0
            continue
        elif kind is yaml.DocumentEndEvent:
            docs.append(root)
            continue
        elif kind is yaml.AliasEvent:
            raise _NeedsFullLoader
        else:  # stream start and end
            continue
        if nodes > limits.max_expanded_nodes:
            raise _YamlTooLarge(f"document expands to more than {limits.max_expanded_nodes} nodes")
        if not stack:
            root = value
            continue
        top = stack[-1]
        container = top[0]
        if type(container) is list:
            container.append(value)
        elif top[1] is _NO_KEY:
            if type(value) is not str:
                raise _NeedsFullLoader
            top[1] = value
        else:
            container[top[1]] = value
            top[1] = _NO_KEY
    return docs


def _load_yaml(text: str, limits: Limits) -> list[Any]:
    _prescan(text, limits)
    loader_cls = type(
        "_Loader",
        (_BoundedLoader,),
        {"max_nodes": limits.max_expanded_nodes, "max_depth": limits.max_depth},
    )
    loader = loader_cls(text)
    try:
        docs = []
        while loader.check_data():
            docs.append(loader.get_data())
        return docs
    finally:
        loader.dispose()


def _to_json(value: Any, path: str, errors: list[FieldError], depth: int, limits: Limits) -> Any:
    """Copy into plain JSON types (keys to strings like sigs.k8s.io/yaml); report the rest."""
    if depth > limits.max_depth:
        errors.append(FieldError(path, f"nested deeper than {limits.max_depth} levels"))
        return None
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            key = k if isinstance(k, str) else json.dumps(k) if isinstance(k, bool) else str(k)
            out[key] = _to_json(v, _join(path, key), errors, depth + 1, limits)
        return out
    if isinstance(value, list):
        return [_to_json(v, f"{path}[{i}]", errors, depth + 1, limits) for i, v in enumerate(value)]
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        errors.append(FieldError(path, "number must be finite"))
        return None
    errors.append(FieldError(path, f"unsupported YAML value of type {type(value).__name__}"))
    return None


class JsonDocument(dict[str, Any]):
    """A document ``decode_document`` already turned into plain JSON types within the limits:
    handed back to it (as ``parse_workflow`` does), it is not walked and copied again."""


def decode_document(
    raw: bytes | str | Mapping[str, Any], limits: Limits = DEFAULT_LIMITS
) -> dict[str, Any]:
    """Decode one YAML or JSON document into plain JSON types, or raise ``WorkflowInvalid``."""
    if isinstance(raw, JsonDocument):
        return raw
    if isinstance(raw, Mapping):
        errors: list[FieldError] = []
        try:
            doc = _to_json(dict(raw), "", errors, 0, limits)
        except RecursionError:
            raise WorkflowInvalid([FieldError("", "document nested too deeply")]) from None
        if errors:
            raise WorkflowInvalid(errors[: limits.max_errors])
        assert isinstance(doc, dict)
        return JsonDocument(doc)
    if isinstance(raw, str):
        size = len(raw.encode("utf-8", "surrogatepass"))
    elif isinstance(raw, bytes | bytearray | memoryview):
        size = len(raw)
    else:
        raise WorkflowInvalid([FieldError("", "expected YAML or JSON text")])
    if size > limits.max_body_bytes:
        raise WorkflowInvalid(
            [FieldError("", f"document is {size} bytes; the limit is {limits.max_body_bytes}")]
        )
    if not isinstance(raw, str):
        try:
            text = bytes(raw).decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise WorkflowInvalid(
                [FieldError("", f"not UTF-8 text: {exc.reason} at byte {exc.start}")]
            ) from None
    else:
        text = raw
    if not text.strip():
        raise WorkflowInvalid([FieldError("", "empty document")])
    try:
        try:
            docs, plain = _load_plain(text, limits), True
        except _NeedsFullLoader:
            docs, plain = _load_yaml(text, limits), False
    except _YamlTooLarge as exc:
        raise WorkflowInvalid([FieldError("", f"refused: {exc}")]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise WorkflowInvalid(
            [FieldError("", f"not valid YAML or JSON: {problem}{where}")]
        ) from None
    except (RecursionError, ValueError, TypeError) as exc:
        raise WorkflowInvalid([FieldError("", f"not valid YAML or JSON: {exc}")]) from None
    docs = [d for d in docs if d is not None]
    if not docs:
        raise WorkflowInvalid([FieldError("", "empty document")])
    if len(docs) > 1:
        raise WorkflowInvalid(
            [
                FieldError(
                    "", f"expected one document, found {len(docs)}; submit one Workflow at a time"
                )
            ]
        )
    doc = docs[0]
    if not isinstance(doc, dict):
        raise WorkflowInvalid(
            [FieldError("", f"expected a mapping (an object), found {_type_name(doc)}")]
        )
    if plain:  # already plain JSON types within the limits
        return JsonDocument(doc)
    errors = []
    try:
        out = _to_json(doc, "", errors, 0, limits)
    except RecursionError:
        raise WorkflowInvalid([FieldError("", "document nested too deeply")]) from None
    if errors:
        raise WorkflowInvalid(errors[: limits.max_errors])
    assert isinstance(out, dict)
    return JsonDocument(out)


def _type_name(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return type(value).__name__


# --------------------------------------------------------------------------------------------
# Structure: the trimmed Argo schema


@cache
def _schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())
    return data


@cache
def _validator(kind: str) -> Draft7Validator:
    schema = dict(_schema())
    schema["$ref"] = f"#/definitions/io.argoproj.workflow.v1alpha1.{kind}"
    return Draft7Validator(schema)


def _json_path(parts: Iterable[Any]) -> str:
    out = ""
    for part in parts:
        out = f"{out}[{part}]" if isinstance(part, int) else _join(out, str(part))
    return out


def _join(path: str, key: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_$-]+", key):
        return f"{path}[{json.dumps(key)}]"
    return f"{path}.{key}" if path else key


def _schema_message(err: ValidationError) -> str:
    if err.validator == "required":
        return f"required: {err.message}"
    if err.validator == "type":
        expected = err.validator_value
        want = " or ".join(expected) if isinstance(expected, list) else expected
        return f"must be of type {want}, found {_type_name(err.instance)}"
    if err.validator == "const":
        return f"must be {json.dumps(err.validator_value)}"
    if err.validator == "enum":
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


def _fast_validator(kind: str, wait: bool = False) -> Callable[[Any], Any] | None:
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
    fast = _fast_validator(kind)
    if fast is not None:
        try:
            fast(doc)
            return []
        except Exception:  # noqa: BLE001 - any doubt: let the full validator speak
            pass
    out: list[FieldError] = []
    try:
        for err in _validator(kind).iter_errors(doc):
            out.append(FieldError(_json_path(err.absolute_path), _schema_message(err)))
            if len(out) >= limit:
                break
    except RecursionError:
        out.append(FieldError("", "document nested too deeply"))
    return sorted(set(out), key=lambda e: (e.path, e.message))


# --------------------------------------------------------------------------------------------
# `depends` expressions

_DEP_TOKEN = re.compile(r"\s*(?:(\&\&|\|\||!|\(|\))|([A-Za-z0-9_][-A-Za-z0-9_]*(?:\.[A-Za-z]+)?))")


@dataclass(frozen=True)
class DependsExpr:
    """A parsed ``depends`` expression: ``op`` is "name", "and", "or" or "not"."""

    op: str
    task: str = ""
    result: str | None = None
    args: tuple[DependsExpr, ...] = ()

    def tasks(self) -> set[str]:
        if self.op == "name":
            return {self.task}
        out: set[str] = set()
        for a in self.args:
            out |= a.tasks()
        return out


class DependsSyntaxError(ValueError):
    pass


def _tokenise_depends(expr: str) -> list[str]:
    tokens: list[str] = []
    pos = 0
    while pos < len(expr):
        if expr[pos:].strip() == "":
            break
        m = _DEP_TOKEN.match(expr, pos)
        if not m:
            raise DependsSyntaxError(
                f"unexpected {expr[pos:].strip()[:20]!r} at character {pos + 1}"
            )
        tokens.append(m.group(1) or m.group(2))
        pos = m.end()
    return tokens


@cache
def parse_depends(expr: str) -> DependsExpr:
    """Parse Argo's ``depends`` grammar: names, ``name.Result``, ``&&``, ``||``, ``!``, parens."""
    tokens = _tokenise_depends(expr)
    if not tokens:
        raise DependsSyntaxError("empty expression")
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        return tok

    def parse_or() -> DependsExpr:
        args = [parse_and()]
        while peek() == "||":
            take()
            args.append(parse_and())
        return args[0] if len(args) == 1 else DependsExpr("or", args=tuple(args))

    def parse_and() -> DependsExpr:
        args = [parse_not()]
        while peek() == "&&":
            take()
            args.append(parse_not())
        return args[0] if len(args) == 1 else DependsExpr("and", args=tuple(args))

    def parse_not() -> DependsExpr:
        tok = peek()
        if tok is None:
            raise DependsSyntaxError("expression ends too early")
        if tok == "!":
            take()
            return DependsExpr("not", args=(parse_not(),))
        if tok == "(":
            take()
            inner = parse_or()
            if peek() != ")":
                raise DependsSyntaxError("missing ')'")
            take()
            return inner
        if tok in ("&&", "||", ")"):
            raise DependsSyntaxError(f"unexpected {tok!r}")
        take()
        name, _, result = tok.partition(".")
        if result and result not in TASK_RESULTS:
            raise DependsSyntaxError(
                f"unknown task result {result!r}; use one of {', '.join(TASK_RESULTS)}"
            )
        return DependsExpr("name", task=name, result=result or None)

    if len(tokens) > 2000:
        raise DependsSyntaxError("expression too long")
    tree = parse_or()
    if pos != len(tokens):
        raise DependsSyntaxError(f"unexpected {tokens[pos]!r}")
    return tree


# --------------------------------------------------------------------------------------------
# Quantities


_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$"
)
_SUFFIX = {
    "": 1.0,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}


def parse_quantity(value: Any) -> float | None:
    """A Kubernetes quantity as a float in base units; None for templated or invalid values."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        return None
    m = _QUANTITY.match(value.strip())
    if not m:
        return None
    return float(m.group(1)) * _SUFFIX[m.group(2) or ""]


def _container_resources(container: Mapping[str, Any]) -> Resources:
    res = container.get("resources")
    if not isinstance(res, Mapping):
        return Resources()
    requests = res.get("requests") if isinstance(res.get("requests"), Mapping) else {}
    limits = res.get("limits") if isinstance(res.get("limits"), Mapping) else {}
    assert isinstance(requests, Mapping) and isinstance(limits, Mapping)

    def pick(key: str) -> float:
        # Kubernetes defaults a missing request to the limit; GPUs are usually only in limits.
        q = parse_quantity(requests.get(key)) if key in requests else None
        if q is None and key in limits:
            q = parse_quantity(limits.get(key))
        return max(q or 0.0, 0.0)

    return Resources(
        cpu_millicores=math.ceil(pick("cpu") * 1000 - 1e-9),
        memory_bytes=math.ceil(pick("memory") - 1e-9),
        gpus=math.ceil(pick("nvidia.com/gpu") - 1e-9),
    )


def _sum(rs: Iterable[Resources]) -> Resources:
    cpu = mem = gpu = 0
    for r in rs:
        cpu += r.cpu_millicores
        mem += r.memory_bytes
        gpu += r.gpus
    return Resources(cpu, mem, gpu)


def _max(rs: Iterable[Resources]) -> Resources:
    cpu = mem = gpu = 0
    for r in rs:
        cpu = max(cpu, r.cpu_millicores)
        mem = max(mem, r.memory_bytes)
        gpu = max(gpu, r.gpus)
    return Resources(cpu, mem, gpu)


def _pod_spec_patch_containers(patch: Any) -> dict[str, Mapping[str, Any]]:
    """Containers of a podSpecPatch string (YAML or JSON), by name; {} if templated/invalid."""
    if not isinstance(patch, str) or "{{" in patch or len(patch) > 65536:
        return {}
    try:
        doc = _load_yaml(patch, Limits(max_yaml_aliases=0, max_expanded_nodes=10_000, max_depth=20))
    except (yaml.YAMLError, _YamlTooLarge, RecursionError, ValueError, TypeError):
        return {}
    if len(doc) != 1 or not isinstance(doc[0], dict):
        return {}
    out: dict[str, Mapping[str, Any]] = {}
    for c in doc[0].get("containers") or []:
        if isinstance(c, dict) and isinstance(c.get("name"), str):
            out[c["name"]] = c
    return out


def template_pod_resources(
    template: Mapping[str, Any], wf_pod_spec_patch: Any = None, wf_pod_resources: Any = None
) -> Resources:
    """Requests of the pod one leaf template runs: its containers summed (main, sidecars,
    containerSet), init containers maxed (they run one at a time before the others), and a
    podSpecPatch's container resources replacing those of the container it names."""
    containers: dict[str, Mapping[str, Any]] = {}
    for key in ("container", "script"):
        c = template.get(key)
        if isinstance(c, Mapping):
            containers["main"] = c
    cs = template.get("containerSet")
    if isinstance(cs, Mapping):
        for i, c in enumerate(cs.get("containers") or []):
            if isinstance(c, Mapping):
                containers[str(c.get("name") or f"#{i}")] = c
    for i, c in enumerate(template.get("sidecars") or []):
        if isinstance(c, Mapping):
            containers[f"sidecar:{c.get('name') or i}"] = c
    for patch in (wf_pod_spec_patch, template.get("podSpecPatch")):
        for name, c in _pod_spec_patch_containers(patch).items():
            if isinstance(c.get("resources"), Mapping):
                containers[name] = c
    main = _sum(_container_resources(c) for c in containers.values())
    init = _max(
        _container_resources(c)
        for c in template.get("initContainers") or []
        if isinstance(c, Mapping)
    )
    pod = _max((main, init))
    # Pod-level resources (template, else workflow) set the pod's budget as a whole.
    for budget in (template.get("podResources"), wf_pod_resources):
        if isinstance(budget, Mapping):
            level = _container_resources({"resources": budget})
            return Resources(
                level.cpu_millicores or pod.cpu_millicores,
                level.memory_bytes or pod.memory_bytes,
                max(level.gpus, pod.gpus),
            )
    return pod


def template_images(template: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for key in ("container", "script"):
        c = template.get(key)
        if isinstance(c, Mapping) and isinstance(c.get("image"), str):
            out.append(c["image"])
    cs = template.get("containerSet")
    if isinstance(cs, Mapping):
        out += [
            c["image"]
            for c in cs.get("containers") or []
            if isinstance(c, Mapping) and isinstance(c.get("image"), str)
        ]
    for key in ("initContainers", "sidecars"):
        out += [
            c["image"]
            for c in template.get(key) or []
            if isinstance(c, Mapping) and isinstance(c.get("image"), str)
        ]
    return out


# --------------------------------------------------------------------------------------------
# Arguments and data references


def _scalar_str(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return json.dumps(value)
    return json.dumps(value, sort_keys=True)


def artifact_locations(art: Mapping[str, Any]) -> list[str]:
    """URIs of an artifact location (inline, not ``from``), for matching against datasets."""
    out: list[str] = []
    s3 = art.get("s3")
    if isinstance(s3, Mapping):
        bucket, key = s3.get("bucket"), s3.get("key")
        if isinstance(key, str):
            out.append(f"s3://{bucket}/{key.lstrip('/')}" if isinstance(bucket, str) else key)
    for kind, scheme in (("gcs", "gs"), ("oss", "oss")):
        loc = art.get(kind)
        if isinstance(loc, Mapping) and isinstance(loc.get("key"), str):
            bucket = loc.get("bucket")
            out.append(
                f"{scheme}://{bucket}/{loc['key'].lstrip('/')}"
                if isinstance(bucket, str)
                else loc["key"]
            )
    az = art.get("azure")
    if isinstance(az, Mapping) and isinstance(az.get("blob"), str):
        out.append(f"azure://{az.get('container', '')}/{az['blob'].lstrip('/')}")
    for kind in ("http", "artifactory"):
        loc = art.get(kind)
        if isinstance(loc, Mapping) and isinstance(loc.get("url"), str):
            out.append(loc["url"])
    git = art.get("git")
    if isinstance(git, Mapping) and isinstance(git.get("repo"), str):
        out.append(git["repo"])
    hdfs = art.get("hdfs")
    if isinstance(hdfs, Mapping) and isinstance(hdfs.get("path"), str):
        out.append(f"hdfs://{hdfs['path'].lstrip('/')}")
    return out


def _parse_parameters(items: Any) -> tuple[Parameter, ...]:
    out: list[Parameter] = []
    for p in items or []:
        if not isinstance(p, Mapping) or not isinstance(p.get("name"), str):
            continue
        enum = p.get("enum")
        out.append(
            Parameter(
                name=p["name"],
                value=_scalar_str(p.get("value")),
                default=_scalar_str(p.get("default")),
                enum=tuple(s for s in (_scalar_str(e) for e in enum) if s is not None)
                if isinstance(enum, list)
                else (),
                description=p.get("description") if isinstance(p.get("description"), str) else None,
                value_from=p.get("valueFrom") if isinstance(p.get("valueFrom"), Mapping) else None,
            )
        )
    return tuple(out)


def parse_arguments(args: Any) -> Arguments:
    if not isinstance(args, Mapping):
        return Arguments()
    arts: list[Artifact] = []
    for a in args.get("artifacts") or []:
        if isinstance(a, Mapping) and isinstance(a.get("name"), str):
            arts.append(
                Artifact(
                    name=a["name"],
                    from_=a.get("from") if isinstance(a.get("from"), str) else None,
                    locations=tuple(artifact_locations(a)),
                    raw=a,
                )
            )
    return Arguments(parameters=_parse_parameters(args.get("parameters")), artifacts=tuple(arts))


_WF_PARAM = re.compile(r"\{\{\s*workflow\.parameters\.([-\w.]+)\s*\}\}")


def _substitute_wf_params(value: str, params: Mapping[str, str]) -> str:
    return _WF_PARAM.sub(lambda m: params.get(m.group(1), m.group(0)), value)


# --------------------------------------------------------------------------------------------
# Names


def slugify(name: str, max_len: int = SLUG_MAX) -> str:
    """A stable DNS-1123 label for ``name``: lower-case, [-a-z0-9], a hash suffix when the
    readable form had to change beyond case or got too long (so distinct names stay distinct)."""
    base = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unit"
    if base == name and len(base) <= max_len:
        return base
    # Any change (even only case: "A" and "a" are different Argo tasks) gets a hash suffix.
    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    keep = max_len - len(digest) - 1
    return f"{base[:keep].rstrip('-')}-{digest}"


def item_label(item: Any) -> str:
    """How Argo shows an item in an expanded node name: ``task(0:foo)``."""
    if isinstance(item, Mapping):
        return ",".join(f"{k}:{_scalar_str(v)}" for k, v in sorted(item.items()))
    return _scalar_str(item) or ""


# --------------------------------------------------------------------------------------------
# The parser proper


class _Catalogue:
    def __init__(
        self,
        catalogue: Mapping[str, Mapping[str, Any] | CatalogueEntry] | None,
        cluster_catalogue: Mapping[str, Mapping[str, Any] | CatalogueEntry] | None,
    ) -> None:
        self.namespaced = {k: _doc_of(v) for k, v in (catalogue or {}).items()}
        self.cluster = {k: _doc_of(v) for k, v in (cluster_catalogue or {}).items()}

    def templates_of(self, name: str, cluster: bool) -> dict[str, Mapping[str, Any]] | None:
        doc = (self.cluster if cluster else self.namespaced).get(name)
        if doc is None:
            return None
        spec = doc.get("spec") if isinstance(doc, Mapping) else None
        out: dict[str, Mapping[str, Any]] = {}
        for t in (spec or {}).get("templates") or [] if isinstance(spec, Mapping) else []:
            if isinstance(t, Mapping) and isinstance(t.get("name"), str):
                out[t["name"]] = t
        return out


def _doc_of(entry: Mapping[str, Any] | CatalogueEntry) -> Mapping[str, Any]:
    return entry.document if isinstance(entry, CatalogueEntry) else entry


def parse_workflow_template(
    raw: bytes | str | Mapping[str, Any], limits: Limits = DEFAULT_LIMITS
) -> CatalogueEntry:
    """Validate a WorkflowTemplate or ClusterWorkflowTemplate for the catalogue."""
    doc = decode_document(raw, limits)
    kind = doc.get("kind")
    errors: list[FieldError] = []
    if kind not in ("WorkflowTemplate", "ClusterWorkflowTemplate"):
        raise WorkflowInvalid(
            [
                FieldError(
                    "kind",
                    "expected WorkflowTemplate or ClusterWorkflowTemplate, "
                    f"found {json.dumps(kind)}",
                )
            ]
        )
    check = dict(doc)
    check["kind"] = "WorkflowTemplate"  # same schema; the trimmed file carries only one of them
    errors += schema_errors(check, "WorkflowTemplate", limits.max_errors)
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not DNS1123_SUBDOMAIN.match(name) or len(name) > 253:
        errors.append(FieldError("metadata.name", "a WorkflowTemplate needs a DNS-1123 name"))
    if not errors:
        spec = doc["spec"]
        seen: set[str] = set()
        for i, t in enumerate(spec.get("templates") or []):
            errors += _check_template(t, f"spec.templates[{i}]", seen)
    if errors:
        raise WorkflowInvalid(errors[: limits.max_errors])
    assert isinstance(name, str)
    return CatalogueEntry(name=name, kind=str(kind), document=doc)


_REF_KEYS = frozenset({"templateRef", "workflowTemplateRef"})


def uses_catalogue(doc: Any) -> bool:
    """Whether a document can reach the catalogue at all (a ``templateRef`` or
    ``workflowTemplateRef`` anywhere): callers skip loading the catalogue when it cannot."""
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            if not _REF_KEYS.isdisjoint(node.keys()):
                return True
            stack.extend(v for v in node.values() if isinstance(v, (Mapping, list)))
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, (Mapping, list)))
    return False


def parse_workflow(
    raw: bytes | str | Mapping[str, Any],
    catalogue: Mapping[str, Mapping[str, Any] | CatalogueEntry] | None = None,
    *,
    cluster_catalogue: Mapping[str, Mapping[str, Any] | CatalogueEntry] | None = None,
    limits: Limits = DEFAULT_LIMITS,
    domain: str = DEFAULT_DOMAIN,
) -> ParsedWorkflow:
    """Decode, validate and split a Workflow into placement units.

    ``catalogue`` maps WorkflowTemplate names to their documents (as stored by the portal);
    ``cluster_catalogue`` does the same for ClusterWorkflowTemplates. Raises ``WorkflowInvalid``
    with every problem found; never anything else for bad input.
    """
    doc = decode_document(raw, limits)
    try:
        return _Parser(doc, _Catalogue(catalogue, cluster_catalogue), limits, domain).run()
    except RecursionError:
        raise WorkflowInvalid([FieldError("", "document nested too deeply")]) from None


def _check_template(t: Any, path: str, seen: set[str]) -> list[FieldError]:
    errors: list[FieldError] = []
    if not isinstance(t, Mapping):
        return [FieldError(path, "must be an object")]
    name = t.get("name")
    if not isinstance(name, str) or not name:
        errors.append(FieldError(_join(path, "name"), "a template needs a name"))
    else:
        if not ARGO_FIELD_NAME.match(name) or len(name) > ARGO_FIELD_MAX:
            errors.append(
                FieldError(
                    _join(path, "name"),
                    f"{name!r} is not a valid template name "
                    f"(letters, digits and '-', at most {ARGO_FIELD_MAX})",
                )
            )
        if name in seen:
            errors.append(
                FieldError(_join(path, "name"), f"template {name!r} is defined more than once")
            )
        seen.add(name)
    types = [k for k in TEMPLATE_TYPES if t.get(k) is not None]
    if len(types) > 1:
        errors.append(
            FieldError(path, f"a template has exactly one type; found {', '.join(types)}")
        )
    return errors


class _Parser:
    def __init__(
        self, doc: dict[str, Any], catalogue: _Catalogue, limits: Limits, domain: str
    ) -> None:
        self.doc = doc
        self.catalogue = catalogue
        self.limits = limits
        self.domain = domain
        self.errors: list[FieldError] = []
        # template key -> template dict, and key -> scope ("" local, "ref:<wft>", "cref:<cwft>")
        self.templates: dict[str, Mapping[str, Any]] = {}
        self.scopes: dict[str, str] = {}
        self.template_paths: dict[str, str] = {}
        self._reach_cache: dict[str, tuple[str, ...]] = {}
        self._walked: set[str] = set()

    def err(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))

    def fail_if_errors(self) -> None:
        if self.errors:
            unique = list(dict.fromkeys(self.errors))
            raise WorkflowInvalid(unique[: self.limits.max_errors])

    # -- top level ----------------------------------------------------------------------------

    def run(self) -> ParsedWorkflow:
        doc = self.doc
        kind = doc.get("kind")
        if kind != "Workflow":
            hint = (
                " (store WorkflowTemplates in the catalogue instead)"
                if kind in ("WorkflowTemplate", "ClusterWorkflowTemplate")
                else ""
            )
            self.err("kind", f"expected Workflow, found {json.dumps(kind)}{hint}")
            self.fail_if_errors()
        self.errors += schema_errors(doc, "Workflow", self.limits.max_errors)
        self.fail_if_errors()

        meta: Mapping[str, Any] = doc["metadata"]
        spec: dict[str, Any] = dict(doc["spec"])
        name = meta.get("name")
        generate_name = meta.get("generateName")
        if not name and not generate_name:
            self.err("metadata", "needs a name or a generateName")
        if name and (len(name) > 253 or not DNS1123_SUBDOMAIN.match(name)):
            self.err(
                "metadata.name",
                f"{name!r} is not a valid name (lower-case letters, digits, '-' and '.')",
            )
        if generate_name and (
            len(generate_name) > 248
            or not DNS1123_SUBDOMAIN.match(generate_name.rstrip("-") or "-")
        ):
            self.err("metadata.generateName", f"{generate_name!r} is not a valid name prefix")
        namespace = meta.get("namespace")
        if namespace is not None and not DNS1123_LABEL.match(namespace):
            self.err("metadata.namespace", f"{namespace!r} is not a valid namespace")
        labels = {k: v for k, v in (meta.get("labels") or {}).items() if isinstance(v, str)}
        annotations = {
            k: v for k, v in (meta.get("annotations") or {}).items() if isinstance(v, str)
        }
        for k, v in (meta.get("labels") or {}).items():
            if not isinstance(v, str):
                self.err(_join("metadata.labels", k), "label values must be strings")

        spec = self._merge_workflow_template_ref(spec)
        local_seen: set[str] = set()
        for i, t in enumerate(spec.get("templates") or []):
            path = f"spec.templates[{i}]"
            problems = _check_template(t, path, local_seen)
            self.errors += problems
            if (
                isinstance(t, Mapping)
                and isinstance(t.get("name"), str)
                and t["name"] not in self.templates
            ):
                self.templates[t["name"]] = t
                self.scopes[t["name"]] = ""
                self.template_paths[t["name"]] = path

        arguments = parse_arguments(spec.get("arguments"))
        self._check_parameter_names(spec.get("arguments"), "spec.arguments")

        entrypoint = spec.get("entrypoint")
        ref_failed = bool(spec.get("workflowTemplateRef"))  # error already reported
        if not entrypoint and ref_failed:
            pass
        elif not entrypoint:
            self.err("spec.entrypoint", "required: the template to start from")
        elif entrypoint not in self.templates:
            self.err("spec.entrypoint", f"no template named {entrypoint!r}")
        on_exit = spec.get("onExit")
        if on_exit and on_exit not in self.templates:
            self.err("spec.onExit", f"no template named {on_exit!r}")
        for hook_name, hook in (spec.get("hooks") or {}).items():
            self._resolve_call(hook, "", _join("spec.hooks", hook_name), optional=False)

        # Resolve every reference in every local template, pulling in catalogue templates.
        for key in list(self.templates):
            self._walk_template(key, self.template_paths[key])
        self.fail_if_errors()

        assert isinstance(entrypoint, str)
        wf_params = {
            p.name: (p.value if p.value is not None else p.default) or ""
            for p in arguments.parameters
        }
        units = self._units(entrypoint, spec, labels, annotations, wf_params)
        self.fail_if_errors()
        return ParsedWorkflow(
            name=name,
            generate_name=generate_name,
            namespace=namespace,
            labels=labels,
            annotations=annotations,
            arguments=arguments,
            entrypoint=entrypoint,
            on_exit=on_exit or None,
            templates=self.templates,
            template_scopes=self.scopes,
            units=units,
            spec=spec,
            document=doc,
        )

    def _merge_workflow_template_ref(self, spec: dict[str, Any]) -> dict[str, Any]:
        ref = spec.get("workflowTemplateRef")
        if not isinstance(ref, Mapping):
            return spec
        name = ref.get("name")
        cluster = bool(ref.get("clusterScope"))
        source = self.catalogue.cluster if cluster else self.catalogue.namespaced
        wft = source.get(name) if isinstance(name, str) else None
        if wft is None:
            what = "ClusterWorkflowTemplate" if cluster else "WorkflowTemplate"
            self.err("spec.workflowTemplateRef.name", f"no {what} named {name!r} in the catalogue")
            return spec
        base = wft.get("spec") if isinstance(wft.get("spec"), Mapping) else {}
        assert isinstance(base, Mapping)
        # Argo merges the workflow over the referenced template's spec; arguments by name.
        merged: dict[str, Any] = {
            **copy.deepcopy(dict(base)),
            **{k: v for k, v in spec.items() if k != "workflowTemplateRef"},
        }
        base_args = base.get("arguments") if isinstance(base.get("arguments"), Mapping) else {}
        own_args = spec.get("arguments") if isinstance(spec.get("arguments"), Mapping) else {}
        assert isinstance(base_args, Mapping) and isinstance(own_args, Mapping)
        args: dict[str, Any] = {}
        for kind in ("parameters", "artifacts"):
            by_name: dict[str, Any] = {}
            for item in list(base_args.get(kind) or []) + list(own_args.get(kind) or []):
                if isinstance(item, Mapping) and isinstance(item.get("name"), str):
                    by_name[item["name"]] = {**by_name.get(item["name"], {}), **item}
            if by_name:
                args[kind] = list(by_name.values())
        if args:
            merged["arguments"] = args
        return merged

    def _check_parameter_names(self, args: Any, path: str) -> None:
        if not isinstance(args, Mapping):
            return
        for kind in ("parameters", "artifacts"):
            names: set[str] = set()
            for i, p in enumerate(args.get(kind) or []):
                n = p.get("name") if isinstance(p, Mapping) else None
                if isinstance(n, str):
                    if not PARAM_NAME.match(n):
                        self.err(
                            f"{path}.{kind}[{i}].name",
                            f"{n!r} is not a valid name (letters, digits, '-' and '_')",
                        )
                    if n in names:
                        self.err(f"{path}.{kind}[{i}].name", f"{n!r} is given more than once")
                    names.add(n)

    # -- references ---------------------------------------------------------------------------

    def _resolve_call(self, call: Any, scope: str, path: str, optional: bool = True) -> str | None:
        """Template key a step / task / hook calls, or None (error recorded)."""
        if not isinstance(call, Mapping):
            return None
        tmpl, ref, inline = call.get("template"), call.get("templateRef"), call.get("inline")
        given = [k for k, v in (("template", tmpl), ("templateRef", ref), ("inline", inline)) if v]
        if len(given) != 1:
            if given or not optional:
                self.err(
                    path,
                    "give exactly one of template, templateRef and inline"
                    if given
                    else "needs a template, templateRef or inline",
                )
            else:
                self.err(path, "needs a template, templateRef or inline")
            return None
        if tmpl:
            return self._resolve_local(tmpl, scope, _join(path, "template"))
        if ref:
            return self._resolve_ref(ref, _join(path, "templateRef"))
        key = f"inline:{path}"
        if isinstance(inline, Mapping):
            problems = _check_template(
                {**inline, "name": inline.get("name") or "inline"}, _join(path, "inline"), set()
            )
            self.errors += problems
            self.templates[key] = inline
            self.scopes[key] = scope
            self.template_paths[key] = _join(path, "inline")
        return key

    def _resolve_local(self, name: str, scope: str, path: str) -> str | None:
        if not scope:
            if name in self.templates and not self.scopes.get(name):
                return name
            self.err(path, f"no template named {name!r}")
            return None
        kind, _, wft = scope.partition(":")
        return self._resolve_ref(
            {"name": wft, "template": name, "clusterScope": kind == "cref"}, path
        )

    def _resolve_ref(self, ref: Any, path: str) -> str | None:
        if not isinstance(ref, Mapping):
            return None
        name, tmpl, cluster = ref.get("name"), ref.get("template"), bool(ref.get("clusterScope"))
        what = "ClusterWorkflowTemplate" if cluster else "WorkflowTemplate"
        if not isinstance(name, str) or not name:
            self.err(_join(path, "name"), f"required: the {what} to use")
            return None
        if not isinstance(tmpl, str) or not tmpl:
            self.err(_join(path, "template"), "required: the template to use")
            return None
        templates = self.catalogue.templates_of(name, cluster)
        if templates is None:
            self.err(_join(path, "name"), f"no {what} named {name!r} in the catalogue")
            return None
        if tmpl not in templates:
            self.err(_join(path, "template"), f"{what} {name!r} has no template named {tmpl!r}")
            return None
        scope = f"{'cref' if cluster else 'ref'}:{name}"
        key = f"{scope}/{tmpl}"
        if key not in self.templates:
            self.templates[key] = templates[tmpl]
            self.scopes[key] = scope
            self.template_paths[key] = f"{what}({name}).templates[{tmpl}]"
            self._walk_template(key, self.template_paths[key])
        return key

    def calls(self, key: str) -> Iterator[tuple[str, Mapping[str, Any], str]]:
        """(kind, call, path) for every step/task/hook/onExit call in a template."""
        t = self.templates[key]
        path = self.template_paths[key]
        steps = t.get("steps")
        if isinstance(steps, list):
            for g, group in enumerate(steps):
                for s, step in enumerate(group if isinstance(group, list) else []):
                    if isinstance(step, Mapping):
                        yield "step", step, f"{path}.steps[{g}][{s}]"
        dag = t.get("dag")
        if isinstance(dag, Mapping):
            for i, task in enumerate(dag.get("tasks") or []):
                if isinstance(task, Mapping):
                    yield "task", task, f"{path}.dag.tasks[{i}]"

    def _walk_template(self, key: str, path: str) -> None:
        if key in self._walked:
            return
        self._walked.add(key)
        t = self.templates[key]
        scope = self.scopes[key]
        self._check_parameter_names(t.get("inputs"), _join(path, "inputs"))
        for kind, call, cpath in list(self.calls(key)):
            self._check_call(kind, call, cpath, scope)
        dag = t.get("dag")
        if isinstance(dag, Mapping):
            self._check_dag(dag, _join(path, "dag"))
        steps = t.get("steps")
        if isinstance(steps, list):
            names: set[str] = set()
            for g, group in enumerate(steps):
                for s, step in enumerate(group if isinstance(group, list) else []):
                    n = step.get("name") if isinstance(step, Mapping) else None
                    if isinstance(n, str):
                        if n in names:
                            self.err(
                                f"{path}.steps[{g}][{s}].name",
                                f"step name {n!r} is used more than once",
                            )
                        names.add(n)
        for hook_name, hook in (
            (t.get("hooks") or {}).items() if isinstance(t.get("hooks"), Mapping) else []
        ):
            self._resolve_call(hook, scope, _join(_join(path, "hooks"), hook_name), optional=False)

    def _check_call(self, kind: str, call: Mapping[str, Any], path: str, scope: str) -> None:
        name = call.get("name")
        if (
            not isinstance(name, str)
            or not ARGO_FIELD_NAME.match(name)
            or len(name) > ARGO_FIELD_MAX
        ):
            self.err(
                _join(path, "name"),
                f"{name!r} is not a valid {kind} name "
                f"(letters, digits and '-', at most {ARGO_FIELD_MAX})",
            )
        key = self._resolve_call(call, scope, path, optional=False)
        if key is not None and key.startswith("inline:"):
            self._walk_template(key, self.template_paths[key])
        on_exit = call.get("onExit")
        if isinstance(on_exit, str) and on_exit:
            self._resolve_local(on_exit, scope, _join(path, "onExit"))
        hooks = call.get("hooks")
        if isinstance(hooks, Mapping):
            for hook_name, hook in hooks.items():
                self._resolve_call(
                    hook, scope, _join(_join(path, "hooks"), hook_name), optional=False
                )
        self._check_parameter_names(call.get("arguments"), _join(path, "arguments"))
        items = [k for k in ("withItems", "withParam", "withSequence") if call.get(k) is not None]
        if len(items) > 1:
            self.err(path, f"use only one of {', '.join(items)}")

    def _check_dag(self, dag: Mapping[str, Any], path: str) -> None:
        tasks = [t for t in dag.get("tasks") or [] if isinstance(t, Mapping)]
        index: dict[str, int] = {}
        for i, t in enumerate(tasks):
            n = t.get("name")
            if isinstance(n, str):
                if n in index:
                    self.err(f"{path}.tasks[{i}].name", f"task name {n!r} is used more than once")
                else:
                    index[n] = i
        uses_depends = any(t.get("depends") for t in tasks) or bool(dag.get("target"))
        edges: dict[str, list[str]] = {n: [] for n in index}
        for i, t in enumerate(tasks):
            n = t.get("name")
            tpath = f"{path}.tasks[{i}]"
            deps = t.get("dependencies")
            depends = t.get("depends")
            if deps and depends:
                self.err(tpath, "use either depends or dependencies, not both")
            upstream: list[str] = []
            if isinstance(deps, list):
                for j, d in enumerate(deps):
                    if d not in index:
                        self.err(f"{tpath}.dependencies[{j}]", f"no task named {d!r} in this DAG")
                    else:
                        upstream.append(d)
            if isinstance(depends, str) and depends.strip():
                try:
                    tree = parse_depends(depends)
                except DependsSyntaxError as exc:
                    self.err(f"{tpath}.depends", f"cannot parse {depends!r}: {exc}")
                else:
                    for d in sorted(tree.tasks()):
                        if d not in index:
                            self.err(f"{tpath}.depends", f"no task named {d!r} in this DAG")
                        else:
                            upstream.append(d)
            if uses_depends and isinstance(n, str) and n[:1].isdigit():
                self.err(
                    f"{tpath}.name",
                    f"task name {n!r} cannot begin with a digit when depends is used",
                )
            if isinstance(n, str) and n in edges:
                edges[n] = upstream
        target = dag.get("target")
        if isinstance(target, str) and target.strip():
            for tname in re.split(r"[\s,]+", target.strip()):
                if tname and tname not in index and "{{" not in tname:
                    self.err(_join(path, "target"), f"no task named {tname!r} in this DAG")
        cycle = _find_cycle(edges)
        if cycle:
            first = cycle[0]
            self.err(
                f"{path}.tasks[{index[first]}]"
                + (".depends" if tasks[index[first]].get("depends") else ".dependencies"),
                f"dependency cycle: {' -> '.join([*cycle, first])}",
            )

    # -- reachability and unit facts -------------------------------------------------------------

    def reachable(self, key: str) -> tuple[str, ...]:
        """The template itself first, then every template it can call, in discovery order."""
        cached = self._reach_cache.get(key)
        if cached is not None:
            return cached
        order: list[str] = []
        seen: set[str] = set()
        stack = [key]
        while stack:
            k = stack.pop()
            if k in seen or k not in self.templates:
                continue
            seen.add(k)
            order.append(k)
            scope = self.scopes[k]
            found: list[str] = []
            for _kind, call, cpath in self.calls(k):
                for target in self._targets(call, scope, cpath):
                    found.append(target)
            t = self.templates[k]
            hooks = t.get("hooks")
            if isinstance(hooks, Mapping):
                for hook_name, hook in hooks.items():
                    found += self._targets(hook, scope, _join("hooks", hook_name))
            stack.extend(reversed(found))
        result = tuple(order)
        self._reach_cache[key] = result
        return result

    def _targets(self, call: Mapping[str, Any], scope: str, path: str) -> list[str]:
        out: list[str] = []
        # Resolution already succeeded during the walk; errors here would be duplicates.
        saved = len(self.errors)
        k = self._resolve_call(call, scope, path)
        if k:
            out.append(k)
        on_exit = call.get("onExit")
        if isinstance(on_exit, str) and on_exit:
            k2 = self._resolve_local(on_exit, scope, path)
            if k2:
                out.append(k2)
        hooks = call.get("hooks")
        if isinstance(hooks, Mapping):
            for hook in hooks.values():
                k3 = self._resolve_call(hook, scope, path)
                if k3:
                    out.append(k3)
        del self.errors[saved:]
        return out

    def _units(
        self,
        entrypoint: str,
        spec: Mapping[str, Any],
        wf_labels: Mapping[str, str],
        wf_annotations: Mapping[str, str],
        wf_params: Mapping[str, str],
    ) -> tuple[Unit, ...]:
        entry = self.templates[entrypoint]
        builder = _UnitBuilder(self, spec, wf_labels, wf_annotations, wf_params)
        if isinstance(entry.get("dag"), Mapping):
            units = builder.from_dag(entry["dag"], f"{self.template_paths[entrypoint]}.dag")
        elif isinstance(entry.get("steps"), list):
            units = builder.from_steps(entry["steps"], f"{self.template_paths[entrypoint]}.steps")
        else:
            units = [
                builder.make(
                    name=entrypoint,
                    kind="workflow",
                    task=entrypoint,
                    key=entrypoint,
                    call={},
                    upstream=(),
                    depends="",
                )
            ]
        if len(units) > self.limits.max_units:
            self.err(
                "spec",
                f"the workflow expands to {len(units)} placement units; "
                f"the limit is {self.limits.max_units}",
            )
            return ()
        ordered = _topological(units)
        if ordered is None:  # checked per DAG already; a safety net for steps/expansions
            self.err("spec", "dependency cycle between units")
            return ()
        return tuple(_dedupe_slugs(ordered))


def _find_cycle(edges: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A dependency cycle (list of task names) or None. Iterative DFS: no recursion limits."""
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(edges, white)
    for start in edges:
        if colour[start] != white:
            continue
        stack: list[tuple[str, int]] = [(start, 0)]
        colour[start] = grey
        trail = [start]
        while stack:
            node, i = stack[-1]
            deps = edges.get(node, ())
            if i < len(deps):
                stack[-1] = (node, i + 1)
                nxt = deps[i]
                if colour.get(nxt, black) == grey:
                    return list(reversed(trail[trail.index(nxt) :]))
                if colour.get(nxt) == white:
                    colour[nxt] = grey
                    stack.append((nxt, 0))
                    trail.append(nxt)
            else:
                colour[node] = black
                stack.pop()
                trail.pop()
    return None


def _topological(units: Sequence[Unit]) -> list[Unit] | None:
    """Kahn's algorithm, stable: among ready units the one given first goes first."""
    by_name = {u.name: u for u in units}
    position = {u.name: i for i, u in enumerate(units)}
    pending = {u.name: sum(1 for d in set(u.upstream) if d in by_name) for u in units}
    children: dict[str, list[str]] = {u.name: [] for u in units}
    for u in units:
        for d in set(u.upstream):
            if d in children:
                children[d].append(u.name)
    import heapq

    ready = [(position[n], n) for n, c in pending.items() if c == 0]
    heapq.heapify(ready)
    out: list[Unit] = []
    while ready:
        _, n = heapq.heappop(ready)
        out.append(by_name[n])
        for c in children[n]:
            pending[c] -= 1
            if pending[c] == 0:
                heapq.heappush(ready, (position[c], c))
    return out if len(out) == len(units) else None


def _dedupe_slugs(units: list[Unit]) -> list[Unit]:
    seen: set[str] = set()
    out: list[Unit] = []
    for u in units:
        slug = u.slug
        if slug in seen:
            digest = hashlib.sha256(u.name.encode()).hexdigest()[:6]
            slug = f"{slug[: SLUG_MAX - 7].rstrip('-')}-{digest}"
            n = 0
            while slug in seen:
                n += 1
                slug = f"{slug[: SLUG_MAX - 7 - len(str(n))].rstrip('-')}-{digest}{n}"
            u = _replace(u, slug=slug)
        seen.add(slug)
        out.append(u)
    return out


def _replace(u: Unit, **changes: Any) -> Unit:
    from dataclasses import replace

    return replace(u, **changes)


class _UnitBuilder:
    def __init__(
        self,
        parser: _Parser,
        spec: Mapping[str, Any],
        wf_labels: Mapping[str, str],
        wf_annotations: Mapping[str, str],
        wf_params: Mapping[str, str],
    ) -> None:
        self.p = parser
        self.spec = spec
        self.wf_labels = wf_labels
        self.wf_params = wf_params
        self.annotation_key = f"{parser.domain}/datasets"
        # Workflow-level annotation: "name" applies to root units, "task=name" to that task.
        self.root_datasets: list[str] = []
        self.task_datasets: dict[str, list[str]] = {}
        for item in (wf_annotations.get(self.annotation_key) or "").split(","):
            item = item.strip()
            if not item:
                continue
            if "=" in item:
                task, _, ds = item.partition("=")
                self.task_datasets.setdefault(task.strip(), []).append(ds.strip())
            else:
                self.root_datasets.append(item)
        self._facts_cache: dict[
            str, tuple[Resources, tuple[str, ...], tuple[str, ...], tuple[str, ...]]
        ] = {}

    def template_facts(
        self, key: str
    ) -> tuple[Resources, tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        """(resources, images, dataset names, data refs) of everything a template can run."""
        cached = self._facts_cache.get(key)
        if cached is not None:
            return cached
        pods: list[Resources] = []
        images: list[str] = []
        datasets: list[str] = []
        refs: list[str] = []
        wf_patch = self.spec.get("podSpecPatch")
        for k in self.p.reachable(key):
            t = self.p.templates[k]
            pods.append(template_pod_resources(t, wf_patch, self.spec.get("podResources")))
            images += template_images(t)
            meta = t.get("metadata")
            ann = meta.get("annotations") if isinstance(meta, Mapping) else None
            if isinstance(ann, Mapping) and isinstance(ann.get(self.annotation_key), str):
                datasets += [d.strip() for d in ann[self.annotation_key].split(",") if d.strip()]
            inputs = t.get("inputs")
            if isinstance(inputs, Mapping):
                for a in inputs.get("artifacts") or []:
                    if isinstance(a, Mapping):
                        refs += artifact_locations(a)
                for prm in inputs.get("parameters") or []:
                    if isinstance(prm, Mapping):
                        for fld in ("value", "default"):
                            v = _scalar_str(prm.get(fld))
                            if v:
                                refs.append(_substitute_wf_params(v, self.wf_params))
        facts = (
            _max(pods),
            tuple(dict.fromkeys(images)),
            tuple(dict.fromkeys(datasets)),
            tuple(dict.fromkeys(refs)),
        )
        self._facts_cache[key] = facts
        return facts

    def make(
        self,
        *,
        name: str,
        kind: UnitKind,
        task: str,
        key: str,
        call: Mapping[str, Any],
        upstream: tuple[str, ...],
        depends: str,
        item: Any = None,
        item_index: int | None = None,
        with_param: str | None = None,
        root: bool = False,
    ) -> Unit:
        resources, images, datasets, refs = self.template_facts(key)
        arguments = parse_arguments(call.get("arguments"))
        if item_index is not None:
            arguments = substitute_item(arguments, item)
        data_refs = list(refs)
        for prm in arguments.parameters:
            if prm.value:
                data_refs.append(_substitute_wf_params(prm.value, self.wf_params))
        for art in arguments.artifacts:
            data_refs += art.locations
        if kind == "workflow":
            # The whole workflow is one unit: its own arguments are what it reads.
            data_refs += [v for v in self.wf_params.values() if v]
        ds = list(datasets) + self.task_datasets.get(task, [])
        if root or kind == "workflow":
            ds += self.root_datasets
        t = self.p.templates.get(key, {})
        meta = t.get("metadata")
        labels = dict(self.wf_labels)
        if isinstance(meta, Mapping) and isinstance(meta.get("labels"), Mapping):
            labels.update({k: v for k, v in meta["labels"].items() if isinstance(v, str)})
        when = call.get("when")
        continue_on = call.get("continueOn")
        return Unit(
            name=name,
            slug=slugify(name),
            kind=kind,
            task=task,
            template=key,
            templates=self.p.reachable(key),
            upstream=upstream,
            depends=depends,
            when=when if isinstance(when, str) and when.strip() else None,
            arguments=arguments,
            labels=labels,
            images=images,
            resources=resources,
            datasets=tuple(dict.fromkeys(ds)),
            # Still-templated values ({{tasks...}}) cannot name a dataset before run time.
            data_refs=tuple(dict.fromkeys(r for r in data_refs if r and "{{" not in r)),
            item=item,
            item_index=item_index,
            with_param=with_param,
            continue_on_failed=bool(isinstance(continue_on, Mapping) and continue_on.get("failed")),
        )

    def expand(
        self,
        *,
        kind: UnitKind,
        call: Mapping[str, Any],
        key: str,
        upstream: tuple[str, ...],
        depends: str,
        root: bool,
        path: str,
    ) -> list[Unit]:
        task = str(call["name"])
        # Every unit of this call shares these; only name, item and withParam differ.
        make = functools.partial(
            self.make,
            kind=kind,
            task=task,
            key=key,
            call=call,
            upstream=upstream,
            depends=depends,
            root=root,
        )
        items = call.get("withItems")
        seq = call.get("withSequence")
        param = call.get("withParam")
        known = self.known_at_submit(param)
        if known is not None:
            # withParam over the run's own parameters is known now: expand like withItems.
            items, param = known, None
        if isinstance(items, list) or isinstance(seq, Mapping):
            values = items if isinstance(items, list) else _sequence_items(seq or {})
            if values is None:
                # A templated sequence: only known at run time, like withParam.
                return [make(name=task, with_param=json.dumps(seq))]
            if len(values) > self.p.limits.max_units:
                self.p.err(
                    _join(path, "withItems" if items is not None else "withSequence"),
                    f"{len(values)} items; the limit is {self.p.limits.max_units} units",
                )
                return []
            return [
                make(name=f"{task}({i}:{item_label(v)})", item=v, item_index=i)
                for i, v in enumerate(values)
            ]
        if isinstance(param, str) and param.strip():
            return [make(name=task, with_param=param)]
        return [make(name=task)]

    def known_at_submit(self, param: Any) -> list[Any] | None:
        """The list a ``withParam`` names when it only uses workflow parameters (the
        entrypoint's inputs are the workflow's arguments), else None (expanded at run time)."""
        if not isinstance(param, str) or "{{" not in param:
            return None
        entry_inputs = {f"inputs.parameters.{k}": v for k, v in self.wf_params.items()}
        text = _substitute_wf_params(param, self.wf_params)
        text = re.sub(
            r"\{\{\s*(inputs\.parameters\.[-\w.]+)\s*\}\}",
            lambda m: entry_inputs.get(m.group(1), m.group(0)),
            text,
        )
        if "{{" in text:
            return None
        try:
            return parse_with_param_value(text)
        except ValueError:
            return None

    def from_dag(self, dag: Mapping[str, Any], path: str) -> list[Unit]:
        tasks = [t for t in dag.get("tasks") or [] if isinstance(t, Mapping)]
        # Keys resolved during the walk; resolving again is cheap and keeps paths right.
        expanded: dict[str, list[Unit]] = {}
        specs: list[tuple[Mapping[str, Any], str, tuple[str, ...], str, int]] = []
        for i, t in enumerate(tasks):
            tpath = f"{path}.tasks[{i}]"
            key = self.p._resolve_call(t, "", tpath)
            deps = t.get("dependencies")
            depends = t.get("depends")
            if isinstance(depends, str) and depends.strip():
                expr = depends.strip()
                up = tuple(sorted(parse_depends(expr).tasks()))
            elif isinstance(deps, list) and deps:
                up = tuple(str(d) for d in deps)
                expr = " && ".join(up)
            else:
                up, expr = (), ""
            if key is not None:
                specs.append((t, key, up, expr, i))
        for t, key, up, expr, i in specs:
            expanded[str(t["name"])] = self.expand(
                kind="task",
                call=t,
                key=key,
                upstream=up,
                depends=expr,
                root=not up,
                path=f"{path}.tasks[{i}]",
            )
        out: list[Unit] = []
        for units in expanded.values():
            for u in units:
                names = tuple(n.name for d in u.upstream for n in expanded.get(d, ()))
                out.append(_replace(u, upstream=names))
        return out

    def from_steps(self, steps: Sequence[Any], path: str) -> list[Unit]:
        out: list[Unit] = []
        previous: list[Unit] = []
        previous_tasks: list[str] = []
        for g, group in enumerate(steps):
            current: list[Unit] = []
            for s, step in enumerate(group if isinstance(group, list) else []):
                if not isinstance(step, Mapping):
                    continue
                spath = f"{path}[{g}][{s}]"
                key = self.p._resolve_call(step, "", spath)
                if key is None:
                    continue
                # Each group starts when the previous group is complete (any outcome that lets
                # Argo go on: a failed step stops the workflow unless continueOn says otherwise).
                depends = " && ".join(dict.fromkeys(previous_tasks))
                units = self.expand(
                    kind="step",
                    call=step,
                    key=key,
                    upstream=tuple(u.name for u in previous),
                    depends=depends,
                    root=not previous,
                    path=spath,
                )
                current += units
            if current:
                out += current
                previous = current
                previous_tasks = [u.task for u in current]
        return out


def _sequence_items(seq: Mapping[str, Any]) -> list[Any] | None:
    def num(v: Any) -> int | None:
        if isinstance(v, bool):
            return None
        if isinstance(v, int):
            return v
        if isinstance(v, str) and re.fullmatch(r"[+-]?\d+", v.strip()):
            return int(v)
        return None

    count, start, end = seq.get("count"), seq.get("start"), seq.get("end")
    s = num(start) if start is not None else 0
    if s is None:
        return None
    if count is not None:
        c = num(count)
        if c is None:
            return None
        rng = list(range(s, s + max(c, 0)))
    elif end is not None:
        e = num(end)
        if e is None:
            return None
        rng = list(range(s, e + 1)) if e >= s else list(range(s, e - 1, -1))
    else:
        return None
    fmt = seq.get("format")
    if isinstance(fmt, str) and fmt:
        try:
            return [fmt % i for i in rng]
        except (TypeError, ValueError):
            return [str(i) for i in rng]
    return [str(i) for i in rng]


_ITEM = re.compile(r"\{\{\s*item(?:\.([-\w.]+))?\s*\}\}")


def substitute_item(arguments: Arguments, item: Any) -> Arguments:
    """Replace ``{{item}}`` / ``{{item.key}}`` in argument values (Argo's loop variables)."""

    def sub(value: str | None) -> str | None:
        if value is None or "{{" not in value:
            return value

        def one(m: re.Match[str]) -> str:
            v: Any = item
            for part in (m.group(1) or "").split(".") if m.group(1) else []:
                if isinstance(v, Mapping) and part in v:
                    v = v[part]
                else:
                    return m.group(0)
            return _scalar_str(v) or ""

        return _ITEM.sub(one, value)

    params = tuple(
        Parameter(p.name, sub(p.value), p.default, p.enum, p.description, p.value_from)
        for p in arguments.parameters
    )
    arts = []
    for a in arguments.artifacts:
        raw = json.loads(
            _ITEM.sub(lambda m: _json_escape(_item_value(item, m.group(1))), json.dumps(a.raw))
        )
        arts.append(Artifact(a.name, sub(a.from_), tuple(artifact_locations(raw)), raw))
    return Arguments(params, tuple(arts))


def _item_value(item: Any, path: str | None) -> str:
    v: Any = item
    for part in path.split(".") if path else []:
        if isinstance(v, Mapping) and part in v:
            v = v[part]
        else:
            return "{{item." + (path or "") + "}}"
    return _scalar_str(v) or ""


def _json_escape(s: str) -> str:
    return json.dumps(s)[1:-1]


def expand_with_param(unit: Unit, items: Sequence[Any]) -> tuple[Unit, ...]:
    """Expand a runtime (``withParam``) unit once its JSON list is known, like ``withItems``.

    The expanded units keep the upstream of the original; units downstream of ``unit.name``
    should now wait for all of them (see ``Unit.task``: they share it)."""
    out = []
    for i, v in enumerate(items):
        name = f"{unit.task}({i}:{item_label(v)})"
        out.append(
            _replace(
                unit,
                name=name,
                slug=slugify(name),
                arguments=substitute_item(unit.arguments, v),
                item=v,
                item_index=i,
                with_param=None,
            )
        )
    return tuple(_dedupe_slugs(out))


def parse_with_param_value(value: str) -> list[Any]:
    """Argo's withParam input: a JSON list (from an output parameter). Raises ValueError."""
    data = json.loads(value)
    if not isinstance(data, list):
        raise ValueError("withParam must evaluate to a JSON list")
    return data
