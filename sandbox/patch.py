"""RFC 7386 merge patch and RFC 6902 JSON patch on JSON-shaped data."""

from __future__ import annotations

from typing import Any

from sandbox.errors import ApiError
from sandbox.store import clone


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return clone(patch)
    out = clone(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _tokens(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise ApiError.bad_request(f"invalid JSON pointer {pointer!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _parent(doc: Any, tokens: list[str], pointer: str) -> Any:
    node = doc
    for t in tokens[:-1]:
        try:
            node = node[int(t)] if isinstance(node, list) else node[t]
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ApiError(422, "Invalid", f"jsonpatch: path {pointer!r} does not exist") from exc
    return node


def json_patch(doc: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise ApiError.bad_request("json patch must be a list of operations")
    doc = clone(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise ApiError.bad_request(f"invalid json patch operation: {op!r}")
        kind = op["op"]
        if kind in ("move", "copy"):
            value = get_pointer(doc, op.get("from", ""))
            if kind == "move":
                doc = _apply(doc, "remove", op["from"], None)
            doc = _apply(doc, "add", op["path"], clone(value))
        elif kind == "test":
            if get_pointer(doc, op["path"]) != op.get("value"):
                raise ApiError(422, "Invalid", f"jsonpatch test failed at {op['path']}")
        else:
            doc = _apply(doc, kind, op["path"], clone(op.get("value")))
    return doc


def get_pointer(doc: Any, pointer: str) -> Any:
    node = doc
    for t in _tokens(pointer):
        try:
            node = node[int(t)] if isinstance(node, list) else node[t]
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ApiError(422, "Invalid", f"jsonpatch: path {pointer!r} does not exist") from exc
    return node


def _apply(doc: Any, kind: str, pointer: str, value: Any) -> Any:
    tokens = _tokens(pointer)
    if not tokens:
        if kind in ("add", "replace"):
            return value
        raise ApiError.bad_request("cannot remove the document root")
    parent = _parent(doc, tokens, pointer)
    last = tokens[-1]
    try:
        if isinstance(parent, list):
            if kind == "add":
                if last == "-":
                    parent.append(value)
                else:
                    parent.insert(int(last), value)
            elif kind == "replace":
                parent[int(last)] = value
            elif kind == "remove":
                del parent[int(last)]
            else:
                raise ApiError.bad_request(f"unknown json patch op {kind!r}")
        elif isinstance(parent, dict):
            if kind == "add":
                parent[last] = value
            elif kind == "replace":
                if last not in parent:
                    raise KeyError(last)
                parent[last] = value
            elif kind == "remove":
                del parent[last]
            else:
                raise ApiError.bad_request(f"unknown json patch op {kind!r}")
        else:
            raise TypeError(pointer)
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise ApiError(422, "Invalid", f"jsonpatch: path {pointer!r} does not exist") from exc
    return doc
