"""Label and field selectors, in both the query-string form and the LabelSelector object form."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from sandbox.errors import ApiError

LabelMatcher = Callable[[Mapping[str, str]], bool]

_SET_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s*(?:(in|notin)\s*\(([^)]*)\))?\s*$")
_EQ_RE = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|=|!=)\s*([A-Za-z0-9_./-]*)\s*$")


def _split_terms(selector: str) -> list[str]:
    # Commas inside "in (a,b)" belong to the term, so split only at depth zero.
    terms: list[str] = []
    depth = 0
    current = ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        terms.append(current)
    return [t for t in terms if t.strip()]


def _eq(k: str, v: str) -> LabelMatcher:
    return lambda lb: lb.get(k) == v


def _ne(k: str, v: str) -> LabelMatcher:
    return lambda lb: lb.get(k) != v


def _in(k: str, vs: set[str]) -> LabelMatcher:
    return lambda lb: lb.get(k) in vs


def _notin(k: str, vs: set[str]) -> LabelMatcher:
    return lambda lb: lb.get(k) not in vs


def _present(k: str) -> LabelMatcher:
    return lambda lb: k in lb


def _absent(k: str) -> LabelMatcher:
    return lambda lb: k not in lb


def parse_label_selector(selector: str | None) -> LabelMatcher:
    if not selector:
        return lambda labels: True
    checks: list[LabelMatcher] = []
    for term in _split_terms(selector):
        eq = _EQ_RE.match(term)
        if eq:
            key, op, value = eq.groups()
            checks.append(_ne(key, value) if op == "!=" else _eq(key, value))
            continue
        st = _SET_RE.match(term)
        if not st:
            raise ApiError.bad_request(f"unable to parse requirement: {term.strip()!r}")
        neg, key, op, values = st.groups()
        if op:
            if neg:
                raise ApiError.bad_request(f"unable to parse requirement: {term.strip()!r}")
            vals = {v.strip() for v in values.split(",") if v.strip()}
            checks.append(_in(key, vals) if op == "in" else _notin(key, vals))
        else:
            checks.append(_absent(key) if neg else _present(key))
    return lambda labels: all(c(labels) for c in checks)


def parse_field_selector(selector: str | None) -> Callable[[Mapping[str, Any]], bool]:
    if not selector:
        return lambda obj: True
    checks: list[Callable[[Mapping[str, Any]], bool]] = []
    for term in _split_terms(selector):
        m = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*$", term)
        if not m:
            raise ApiError.bad_request(f"invalid field selector: {term.strip()!r}")
        path, op, value = m.groups()
        if path not in ("metadata.name", "metadata.namespace"):
            raise ApiError.bad_request(f"field label not supported: {path}", reason="BadRequest")
        field = path.split(".", 1)[1]

        def check(obj: Mapping[str, Any], f: str = field, v: str = value, o: str = op) -> bool:
            actual = (obj.get("metadata") or {}).get(f, "")
            return bool(actual != v) if o == "!=" else bool(actual == v)

        checks.append(check)
    return lambda obj: all(c(obj) for c in checks)


def match_label_selector(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector; None matches nothing is not the Kubernetes rule: None matches all."""
    if selector is None:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key = expr.get("key", "")
        op = expr.get("operator", "")
        values = expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def match_field_selector(selector: Mapping[str, Any] | None, fields: Mapping[str, str]) -> bool:
    """Karmada's FieldSelector: matchExpressions on provider, region, zone."""
    if not selector:
        return True
    for expr in selector.get("matchExpressions") or []:
        key = expr.get("key", "")
        op = expr.get("operator", "")
        values = expr.get("values") or []
        actual = fields.get(key)
        if op == "In" and actual not in values:
            return False
        if op == "NotIn" and actual in values:
            return False
    return True
