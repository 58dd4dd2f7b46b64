"""JSON merge patch (RFC 7386) and the changes it made, as plain data.

A PATCH of a site's ``overrides`` is merged into the stored object, as ``kubectl patch
--type merge`` merges into a Kubernetes object: an object merges key by key, ``null`` deletes
the key, anything else (a string, a list) replaces the value whole."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class Change(TypedDict):
    """One changed leaf: ``op`` is add, remove or replace; ``old`` is absent for an add and
    ``new`` for a remove."""

    path: str
    op: str
    old: NotRequired[Any]
    new: NotRequired[Any]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 section 2, ``MergePatch(Target, Patch)``: a new value, neither input changed."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def changes(before: Any, after: Any, path: str) -> list[Change]:
    """What differs between ``before`` and ``after``, leaf by leaf under objects (a list is a
    leaf), with dotted paths under ``path`` (empty: from the top), in key order."""
    if isinstance(before, dict) and isinstance(after, dict):
        out: list[Change] = []
        for key in sorted(set(before) | set(after), key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in after:
                out.append({"path": where, "op": "remove", "old": before[key]})
            elif key not in before:
                out.append({"path": where, "op": "add", "new": after[key]})
            else:
                out.extend(changes(before[key], after[key], where))
        return out
    if before == after and type(before) is type(after):
        return []
    return [{"path": path, "op": "replace", "old": before, "new": after}]
