"""The placement configuration as one plain document: validation, canonical form and diff.

A configuration is what a revision holds and what ``rules export`` writes::

    schema: 1
    rules:    [{name, order, enabled, description, selector, timing, effect, parameters, weight}]
    sites:    [{name, cordoned, labels, capabilities, overrides}]
    datasets: [{name, residency}]
    links:    [{source, target, bandwidth_mbps, cost_per_gb, latency_ms, artifacts_reachable}]

Sites and datasets are the inventory's own rows: a configuration sets their operator fields
(cordons, labels, capabilities, overrides, residency), it does not create or remove them.
Plain data in, plain data out: no query here (the caller passes the inventory's names).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import partial
from typing import Any

from placement.models import EFFECT_PARAMETERS, validate_rule_fields

SCHEMA_VERSION = 1
SECTIONS = ("rules", "sites", "datasets", "links")
TIMINGS = ("submit", "runtime")

RULE_FIELDS = (
    "name",
    "order",
    "enabled",
    "description",
    "selector",
    "timing",
    "effect",
    "parameters",
    "weight",
)
SITE_FIELDS = ("name", "cordoned", "labels", "capabilities", "overrides")
DATASET_FIELDS = ("name", "residency")
LINK_FIELDS = (
    "source",
    "target",
    "bandwidth_mbps",
    "cost_per_gb",
    "latency_ms",
    "artifacts_reachable",
)
FIELDS = {
    "rules": RULE_FIELDS,
    "sites": SITE_FIELDS,
    "datasets": DATASET_FIELDS,
    "links": LINK_FIELDS,
}
RULE_DEFAULTS: dict[str, Any] = {
    "order": 100,
    "enabled": True,
    "description": "",
    "selector": {},
    "timing": "submit",
    "parameters": {},
    "weight": 1.0,
}
LINK_DEFAULTS: dict[str, Any] = {"cost_per_gb": 0.0, "latency_ms": 0.0, "artifacts_reachable": True}

Problem = tuple[str, str]  # (YAML path, message)


def key_of(section: str, item: Mapping[str, Any]) -> str:
    """The identity of an item within its section (links are directed pairs)."""
    if section == "links":
        return f"{item.get('source')}->{item.get('target')}"
    return str(item.get("name"))


def canonical(config: Mapping[str, Any]) -> dict[str, Any]:
    """Every section sorted by identity (rules by order, then name: the evaluation order), every
    item with every field, defaults filled: two equal configurations have equal canonical forms."""
    out: dict[str, Any] = {"schema": SCHEMA_VERSION}
    for section in SECTIONS:
        items = []
        for raw in config.get(section) or ():
            item = {f: raw.get(f) for f in FIELDS[section] if f in raw}
            if section == "rules":
                item = {**RULE_DEFAULTS, **item}
                item["weight"] = float(item["weight"])
            elif section == "links":
                item = {**LINK_DEFAULTS, **item}
                for f in ("bandwidth_mbps", "cost_per_gb", "latency_ms"):
                    item[f] = float(item[f])
            elif section == "sites":
                item = {
                    "cordoned": False,
                    "labels": {},
                    "capabilities": [],
                    "overrides": {},
                    **item,
                }
                item["capabilities"] = sorted(item["capabilities"] or [])
            elif section == "datasets":
                item = {"residency": [], **item}
                item["residency"] = sorted(item["residency"] or [])
            items.append({f: item[f] for f in FIELDS[section] if f in item})
        if section == "rules":
            items.sort(key=lambda r: (r["order"], r["name"]))
        else:
            items.sort(key=lambda i: key_of(section, i))
        out[section] = items
    return out


def validate(doc: Any, *, sites: set[str], datasets: set[str]) -> list[Problem]:
    """Problems of a configuration document, each with its YAML path (``rules[2].effect``).
    ``sites`` and ``datasets`` are the inventory's names: a document may only refer to them."""
    if not isinstance(doc, Mapping):
        return [("", "The document must be a mapping with 'schema' and its sections.")]
    problems: list[Problem] = []
    if doc.get("schema") != SCHEMA_VERSION:
        problems.append(("schema", f"Must be {SCHEMA_VERSION}."))
    for key in doc:
        if key != "schema" and key not in SECTIONS:
            problems.append((str(key), f"Unknown section; allowed: {', '.join(SECTIONS)}."))
    for section in SECTIONS:
        items = doc.get(section, [])
        if items is None:
            items = []
        if not isinstance(items, list):
            problems.append((section, "Must be a list."))
            continue
        seen: set[str] = set()
        for i, item in enumerate(items):
            path = f"{section}[{i}]"
            if not isinstance(item, Mapping):
                problems.append((path, "Must be a mapping."))
                continue
            for f in item:
                if f not in FIELDS[section]:
                    problems.append(
                        (f"{path}.{f}", f"Unknown field; allowed: {', '.join(FIELDS[section])}.")
                    )
            problems += _item_problems(section, path, item, sites, datasets)
            ident = key_of(section, item)
            if ident in seen:
                problems.append((path, f"Duplicate {section[:-1]} '{ident}'."))
            seen.add(ident)
    return problems


def _need(
    out: list[Problem],
    path: str,
    item: Mapping[str, Any],
    field: str,
    kind: type | tuple[type, ...],
    what: str,
    required: bool = False,
) -> None:
    """A problem in ``out`` when ``item[field]`` is missing though ``required``, or not a
    ``kind`` (a bool is no number), or a number that is not finite."""
    if field not in item:
        if required:
            out.append((f"{path}.{field}", "This field is required."))
        return
    value = item[field]
    if (isinstance(value, bool) and kind in (int, float, (int, float))) or not isinstance(
        value, kind
    ):
        out.append((f"{path}.{field}", f"Must be {what}."))
    elif isinstance(value, float) and not math.isfinite(value):
        out.append((f"{path}.{field}", "Must be a finite number."))


def _item_problems(
    section: str, path: str, item: Mapping[str, Any], sites: set[str], datasets: set[str]
) -> list[Problem]:
    if section == "rules":
        return _rule_problems(path, item, sites)
    if section == "sites":
        return _site_problems(path, item, sites)
    if section == "datasets":
        return _dataset_problems(path, item, datasets)
    if section == "links":
        return _link_problems(path, item, sites)
    return []


def _rule_problems(path: str, item: Mapping[str, Any], sites: set[str]) -> list[Problem]:
    out: list[Problem] = []
    need = partial(_need, out, path, item)
    need("name", str, "a string", required=True)
    need("effect", str, "a string", required=True)
    need("order", int, "an integer")
    need("enabled", bool, "true or false")
    need("description", str, "a string")
    need("timing", str, "a string")
    need("weight", (int, float), "a number")
    if item.get("timing", "submit") not in TIMINGS:
        out.append((f"{path}.timing", f"Must be one of: {', '.join(TIMINGS)}."))
    effect = item.get("effect")
    if isinstance(effect, str) and effect not in EFFECT_PARAMETERS:
        out.append((f"{path}.effect", f"Unknown effect; allowed: {', '.join(EFFECT_PARAMETERS)}."))
    elif isinstance(effect, str):
        fields = validate_rule_fields(item.get("selector", {}), effect, item.get("parameters", {}))
        for field, messages in fields.items():
            out += [(f"{path}.{field}", m) for m in messages]
    params = item.get("parameters")
    if isinstance(params, Mapping) and isinstance(params.get("sites"), list):
        for j, name in enumerate(params["sites"]):
            if isinstance(name, str) and name not in sites:
                out.append((f"{path}.parameters.sites[{j}]", f"Unknown site '{name}'."))
    return out


def _site_problems(path: str, item: Mapping[str, Any], sites: set[str]) -> list[Problem]:
    out: list[Problem] = []
    need = partial(_need, out, path, item)
    need("name", str, "a string", required=True)
    need("cordoned", bool, "true or false")
    need("labels", dict, "a mapping of label: value")
    need("capabilities", list, "a list of strings")
    need("overrides", dict, "a mapping")
    if isinstance(item.get("name"), str) and item["name"] not in sites:
        out.append((f"{path}.name", f"Unknown site '{item['name']}'."))
    labels = item.get("labels")
    if isinstance(labels, Mapping) and not all(isinstance(v, str) for v in labels.values()):
        out.append((f"{path}.labels", "Label values must be strings."))
    caps = item.get("capabilities")
    if isinstance(caps, list) and not all(isinstance(c, str) for c in caps):
        out.append((f"{path}.capabilities", "Must be a list of strings."))
    return out


def _dataset_problems(path: str, item: Mapping[str, Any], datasets: set[str]) -> list[Problem]:
    out: list[Problem] = []
    need = partial(_need, out, path, item)
    need("name", str, "a string", required=True)
    need("residency", list, "a list of regions")
    if isinstance(item.get("name"), str) and item["name"] not in datasets:
        out.append((f"{path}.name", f"Unknown dataset '{item['name']}'."))
    res = item.get("residency")
    if isinstance(res, list) and not all(isinstance(r, str) for r in res):
        out.append((f"{path}.residency", "Must be a list of strings."))
    return out


def _link_problems(path: str, item: Mapping[str, Any], sites: set[str]) -> list[Problem]:
    out: list[Problem] = []
    need = partial(_need, out, path, item)
    need("source", str, "a string", required=True)
    need("target", str, "a string", required=True)
    need("bandwidth_mbps", (int, float), "a number", required=True)
    need("cost_per_gb", (int, float), "a number")
    need("latency_ms", (int, float), "a number")
    need("artifacts_reachable", bool, "true or false")
    for end in ("source", "target"):
        if isinstance(item.get(end), str) and item[end] not in sites:
            out.append((f"{path}.{end}", f"Unknown site '{item[end]}'."))
    bw = item.get("bandwidth_mbps")
    if isinstance(bw, (int, float)) and not isinstance(bw, bool) and bw <= 0:
        out.append((f"{path}.bandwidth_mbps", "Must be greater than 0."))
    return out


def diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """What changed from ``old`` to ``new``, by section: ``{"rules": {"added": [names],
    "removed": [names], "changed": [{"name", "fields": {field: {"from", "to"}}}]}, ...}``;
    sections without a change are left out, so ``{}`` means no change."""
    a, b = canonical(old), canonical(new)
    out: dict[str, Any] = {}
    for section in SECTIONS:
        before = {key_of(section, i): i for i in a[section]}
        after = {key_of(section, i): i for i in b[section]}
        added = sorted(set(after) - set(before))
        removed = sorted(set(before) - set(after))
        changed = []
        for name in sorted(set(before) & set(after)):
            fields = {
                f: {"from": before[name].get(f), "to": after[name].get(f)}
                for f in FIELDS[section]
                if before[name].get(f) != after[name].get(f)
            }
            if fields:
                changed.append({"name": name, "fields": fields})
        if added or removed or changed:
            out[section] = {"added": added, "removed": removed, "changed": changed}
    return out


def diff_lines(d: Mapping[str, Any]) -> list[str]:
    """The diff as lines of text, for the command line and the admin."""
    lines: list[str] = []
    for section in SECTIONS:
        part = d.get(section)
        if not part:
            continue
        lines += [f"+ {section}: {name}" for name in part["added"]]
        lines += [f"- {section}: {name}" for name in part["removed"]]
        for change in part["changed"]:
            for field, values in change["fields"].items():
                lines.append(
                    f"~ {section}: {change['name']}.{field}: {values['from']!r} -> {values['to']!r}"
                )
    return lines


__all__ = [
    "SCHEMA_VERSION",
    "SECTIONS",
    "canonical",
    "diff",
    "diff_lines",
    "key_of",
    "validate",
]
