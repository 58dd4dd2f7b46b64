"""Safe decoding of YAML and JSON into plain JSON types, within the intake limits."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import yaml

from placement.parser.errors import (
    DEFAULT_LIMITS,
    FieldError,
    Limits,
    WorkflowInvalid,
    join_path,
    type_name,
)


class YamlTooLarge(Exception):
    """A YAML document over the intake limits (nesting, aliases, expanded size)."""


# libyaml when present (about 20x faster); PyYAML's pure-Python classes otherwise. Both offer
# the same loader interface; the checker is shown the pure-Python one, which the stubs describe.
if TYPE_CHECKING:
    _BaseLoader = yaml.SafeLoader
else:
    _BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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
        # The PyYAML stubs leave this method untyped.
        return super().construct_document(node)  # type: ignore[no-untyped-call]


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
                raise YamlTooLarge(f"nesting deeper than {limits.max_depth} levels")
        elif isinstance(event, _CLOSE):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > limits.max_yaml_aliases:
                raise YamlTooLarge(f"more than {limits.max_yaml_aliases} YAML aliases")


def _check_expansion(root: Any, max_nodes: int, max_depth: int) -> None:
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: Any, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if depth > max_depth:
            raise YamlTooLarge(f"nesting deeper than {max_depth} levels")
        if key in active:
            raise YamlTooLarge("recursive YAML alias")
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
                    raise YamlTooLarge(f"document expands to more than {max_nodes} nodes")
            active.discard(key)
        sizes[key] = total
        return total

    size(root, 0)


_STR_TAG = "tag:yaml.org,2002:str"
NUL = "\x00"
NO_NUL = "must not contain a NUL character (U+0000)"
# What a plain scalar may resolve to without leaving the fast path (merge keys, ``=`` and
# anything else go to the full loader).
_PLAIN_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in ("str", "null", "bool", "int", "float"))


_NO_KEY = object()  # a mapping waiting for its next key


class NeedsFullLoader(Exception):
    """The document uses a YAML feature the single-pass reader leaves to the full loader."""


_plain_reader = threading.local()


def _reader() -> Any:
    # One loader per thread supplies PyYAML's own scalar resolution and construction, so the
    # single pass types every scalar exactly as the full loader would.
    reader = getattr(_plain_reader, "loader", None)
    if reader is None:
        reader = _plain_reader.loader = _BoundedLoader("")
    return reader


def load_plain(text: str, limits: Limits) -> list[Any]:
    """The documents of ``text`` in plain JSON types, in one pass over libyaml's events; raises
    ``NeedsFullLoader`` when the document needs the full loader (anchors, aliases, explicit
    collection tags, merge keys, keys that are not strings, non-finite numbers).

    Most submissions use none of those, and for them this does the work of ``_prescan``,
    the composer, ``_check_expansion``, the constructor and ``_to_json`` at once: the same
    limits, the same messages, the same values (tests/placement compare both on every
    reference example and on generated documents), in about half the time."""
    scalar = _scalar_reader()
    docs: list[Any] = []
    # Open collections: [container, pending mapping key or _NO_KEY]
    stack: list[list[Any]] = []
    nodes = 0
    root: Any = None
    for event in yaml.parse(text, Loader=_BaseLoader):
        kind = type(event)
        if kind is yaml.ScalarEvent:
            value: Any = scalar(event)
            nodes += 1
        elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            _check_open(event, len(stack), limits)
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
            raise NeedsFullLoader
        else:  # stream start and end
            continue
        if nodes > limits.max_expanded_nodes:
            raise YamlTooLarge(f"document expands to more than {limits.max_expanded_nodes} nodes")
        if not stack:
            root = value
            continue
        top = stack[-1]
        container = top[0]
        if type(container) is list:
            container.append(value)
        elif top[1] is _NO_KEY:
            if type(value) is not str:
                raise NeedsFullLoader
            top[1] = value
        else:
            container[top[1]] = value
            top[1] = _NO_KEY
    return docs


def _scalar_reader() -> Callable[[yaml.ScalarEvent], Any]:
    """A scalar event's value, typed by PyYAML's own resolver and constructors as the full
    loader would type it; ``NeedsFullLoader`` for what the single pass leaves to it."""
    reader = _reader()
    resolve, constructors = reader.resolve, reader.yaml_constructors

    def scalar(event: yaml.ScalarEvent) -> Any:
        if event.anchor is not None:
            raise NeedsFullLoader
        tag = event.tag
        if tag is None or tag == "!":
            tag = resolve(yaml.ScalarNode, event.value, event.implicit)
        if NUL in event.value:
            raise NeedsFullLoader  # the full path reports where (_to_json)
        if tag == _STR_TAG:
            return event.value
        if tag not in _PLAIN_TAGS:
            raise NeedsFullLoader
        value = constructors[tag](reader, yaml.ScalarNode(tag, event.value))
        if isinstance(value, float) and not math.isfinite(value):
            raise NeedsFullLoader
        return value

    return scalar


def _check_open(event: yaml.CollectionStartEvent, depth: int, limits: Limits) -> None:
    """A mapping or sequence may open here: no anchor or explicit tag, not too deep."""
    if event.anchor is not None or event.tag not in (None, "!"):
        raise NeedsFullLoader
    if depth >= limits.max_depth:
        raise YamlTooLarge(f"nesting deeper than {limits.max_depth} levels")


def load_yaml(text: str, limits: Limits) -> list[Any]:
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
            if NUL in key:
                errors.append(FieldError(join_path(path, key.replace(NUL, "\\u0000")), NO_NUL))
                continue
            out[key] = _to_json(v, join_path(path, key), errors, depth + 1, limits)
        return out
    if isinstance(value, list):
        return [_to_json(v, f"{path}[{i}]", errors, depth + 1, limits) for i, v in enumerate(value)]
    if isinstance(value, str) and NUL in value:
        # PostgreSQL stores no NUL in text or jsonb, and no Kubernetes object holds one.
        errors.append(FieldError(path, NO_NUL))
        return None
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
        return _plain_copy(dict(raw), limits)
    docs, plain = _read_documents(_text_of(raw, limits), limits)
    doc = _one_mapping(docs)
    if plain:  # already plain JSON types within the limits
        return JsonDocument(doc)
    return _plain_copy(doc, limits)


def _plain_copy(doc: dict[str, Any], limits: Limits) -> JsonDocument:
    errors: list[FieldError] = []
    try:
        out = _to_json(doc, "", errors, 0, limits)
    except RecursionError:
        raise WorkflowInvalid([FieldError("", "document nested too deeply")]) from None
    if errors:
        raise WorkflowInvalid(errors[: limits.max_errors])
    assert isinstance(out, dict)
    return JsonDocument(out)


def _text_of(raw: object, limits: Limits) -> str:
    """The submitted body as text, within the size limit and not blank."""
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
    return text


def _read_documents(text: str, limits: Limits) -> tuple[list[Any], bool]:
    """The documents of ``text``, and whether the single pass read them (so they are plain
    JSON types already)."""
    try:
        try:
            return load_plain(text, limits), True
        except NeedsFullLoader:
            return load_yaml(text, limits), False
    except YamlTooLarge as exc:
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


def _one_mapping(docs: list[Any]) -> dict[str, Any]:
    """The one document of a submission, which must be a mapping."""
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
            [FieldError("", f"expected a mapping (an object), found {type_name(doc)}")]
        )
    return doc
