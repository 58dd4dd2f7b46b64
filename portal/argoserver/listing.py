"""What Argo Server's list and watch take: ``listOptions.labelSelector`` and
``listOptions.fieldSelector`` (Kubernetes' selector syntax), and ``fields``, which keeps (or,
with a leading ``-``, drops) dotted paths of the answer (util/fields/fields.go, ``Cleaner``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from portal.argoserver.errors import INVALID_ARGUMENT, ArgoError

Requirement = Callable[[Mapping[str, str]], bool]

SET_OP = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
EQ_OP = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|=|!=)\s*([A-Za-z0-9_.-]*)\s*$")
EXISTS = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s*$")


def _split(selector: str) -> list[str]:
    """Commas split requirements except inside ``in (...)`` sets."""
    parts, depth, current = [], 0, ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current)
    return [p for p in parts if p.strip()]


def _requirement(key: str, op: str, values: frozenset[str]) -> Requirement:
    def check(labels: Mapping[str, str]) -> bool:
        if op == "in":
            return labels.get(key) in values
        if op == "notin":
            return labels.get(key) not in values
        if op == "exists":
            return key in labels
        if op == "!exists":
            return key not in labels
        if op == "!=":
            return labels.get(key) not in values
        return labels.get(key) in values

    return check


def label_selector(selector: str, field: str = "listOptions.labelSelector") -> Requirement:
    """A predicate over a label map (=, ==, !=, in, notin, exists, !exists)."""
    checks: list[Requirement] = []
    for part in _split(selector or ""):
        if m := SET_OP.match(part):
            _neg, key, op, values = m.groups()
            allowed = frozenset(v.strip() for v in values.split(",") if v.strip())
            checks.append(_requirement(key, op, allowed))
        elif m := EQ_OP.match(part):
            key, op, value = m.groups()
            checks.append(_requirement(key, "!=" if op == "!=" else "=", frozenset([value])))
        elif m := EXISTS.match(part):
            neg, key = m.groups()
            checks.append(_requirement(key, "!exists" if neg else "exists", frozenset()))
        else:
            raise ArgoError(INVALID_ARGUMENT, f"{field}: unable to parse requirement {part!r}")
    return lambda labels: all(check(labels) for check in checks)


FIELDS = ("metadata.name", "metadata.namespace")


def field_selector(selector: str) -> dict[str, tuple[str, str]]:
    """``metadata.name=x,metadata.namespace!=y`` as {field: (op, value)}; the fields a
    Workflow list or watch can select on."""
    out: dict[str, tuple[str, str]] = {}
    for part in _split(selector or ""):
        m = EQ_OP.match(part)
        if not m or m.group(1) not in FIELDS:
            raise ArgoError(
                INVALID_ARGUMENT,
                f"listOptions.fieldSelector: {part.strip()!r} is not supported "
                f"(only {' and '.join(FIELDS)} with =, == or !=)",
            )
        out[m.group(1)] = ("!=" if m.group(2) == "!=" else "=", m.group(3))
    return out


def field_matches(wanted: dict[str, tuple[str, str]], values: Mapping[str, str]) -> bool:
    return all((values.get(f) == value) == (op == "=") for f, (op, value) in wanted.items())


class Cleaner:
    """Argo's ``fields.Cleaner``: ``fields=a.b,c`` keeps those paths, ``-a.b`` drops them."""

    def __init__(self, spec: str) -> None:
        self.exclude = spec.startswith("-")
        text = spec[1:] if self.exclude else spec
        self.fields = {f for f in text.split(",") if f} if spec else set()

    def without_prefix(self, prefix: str) -> Cleaner:
        other = Cleaner("")
        other.exclude = self.exclude
        other.fields = {f.removeprefix(prefix) for f in self.fields}
        return other

    def clean(self, data: Any) -> Any:
        if self.fields:
            self._clean([], data)
        return data

    def _clean(self, path: list[str], item: Any) -> None:
        if isinstance(item, dict):
            for key in list(item):
                field = ".".join([*path, key])
                exact = field in self.fields
                parent = exact or any(f.startswith(field) for f in self.fields)
                if (self.exclude and not exact) or (not self.exclude and parent):
                    if not exact:
                        self._clean([*path, key], item[key])
                else:
                    del item[key]
        elif isinstance(item, list):
            for value in item:
                self._clean(path, value)
