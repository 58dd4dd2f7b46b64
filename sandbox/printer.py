"""``kubectl get`` tables: the ``meta.k8s.io/v1`` Table kube-apiserver answers to
``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``.

For a custom resource kube-apiserver builds the table from the CRD's
``additionalPrinterColumns`` (apiextensions-apiserver
``pkg/registry/customresource/tableconvertor/tableconvertor.go``): a ``Name`` column, then one
column per printer column with the CRD's name, type and format; a CRD that declares none gets
one ``Age`` column on ``.metadata.creationTimestamp`` (``serveDefaultColumnsIfEmpty`` in
``pkg/apiserver/customresource_handler.go``). Each cell is the first value the column's
JSONPath finds ("as we only support simple JSON path, we can assume to have only one
result"), nothing (``<none>`` in kubectl) when it finds none; a ``string`` column prints the
value as JSONPath text, a ``date`` column as its age (``ConvertToHumanReadableDateType``), and
a value of another type than the column's is nothing (``cellForJSONValue``). Built-in kinds
list here the columns of kube-apiserver's own printers, with the same cells."""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

Column = tuple[str, str, str]  # (name, jsonPath, type) as in additionalPrinterColumns
AGE: Column = ("Age", ".metadata.creationTimestamp", "date")

_STEP = re.compile(r'\.([A-Za-z0-9_-]+)|\[\?\(@\.(\w+)=="([^"]*)"\)\]|\[(\*|\d+)\]')


def columns_of(declared: tuple[Column, ...]) -> tuple[Column, ...]:
    return declared or (AGE,)


def find(obj: Any, path: str) -> tuple[bool, Any]:
    """The first value ``path`` finds in ``obj`` (missing keys allowed), and whether it found
    one: the simple JSONPath of printer columns (fields, ``[n]``, ``[*]``, ``[?(@.k=="v")]``)."""
    nodes: list[Any] = [obj]
    pos = 0
    for match in _STEP.finditer(path):
        if match.start() != pos:
            return False, None
        pos = match.end()
        key, fkey, fval, index = match.groups()
        out: list[Any] = []
        for node in nodes:
            if key is not None:
                if isinstance(node, dict) and key in node:
                    out.append(node[key])
            elif fkey is not None:
                if isinstance(node, list):
                    out.extend(x for x in node if isinstance(x, dict) and x.get(fkey) == fval)
            elif isinstance(node, list):
                if index == "*":
                    out.extend(node)
                elif int(str(index)) < len(node):
                    out.append(node[int(str(index))])
        nodes = out
    if pos != len(path) or not nodes:
        return False, None
    return True, nodes[0]


def human_duration(seconds: float) -> str:
    """Kubernetes' ``duration.HumanDuration``, which ``ConvertToHumanReadableDateType`` uses:
    more precision while a thing is young, less as it ages."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def _text(value: Any) -> str:
    """How JSONPath prints a value: strings bare, other values as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def cell(value: Any, typ: str, now: dt.datetime) -> Any:
    if value is None:
        return None
    if typ == "string":
        return _text(value)
    if typ == "integer" and isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    if typ == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if typ == "boolean" and isinstance(value, bool):
        return value
    if typ == "date" and isinstance(value, str):
        try:
            then = dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
        except ValueError:
            return "<invalid>"
        return human_duration((now - then).total_seconds())
    return None


def table(
    columns: tuple[Column, ...], items: list[dict[str, Any]], resource_version: str
) -> dict[str, Any]:
    """The Table of ``items``, each row with the object (kubectl reads its name from it)."""
    definitions: list[dict[str, Any]] = [
        {
            "name": "Name",
            "type": "string",
            "format": "name",
            "description": "Name must be unique within a namespace.",
            "priority": 0,
        }
    ]
    for name, path, typ in columns:
        definitions.append(
            {
                "name": name,
                "type": typ,
                "format": "",
                "description": f"Custom resource definition column (in JSONPath format): {path}",
                "priority": 0,
            }
        )
    now = dt.datetime.now(dt.UTC)
    rows = []
    for obj in items:
        cells: list[Any] = [obj.get("metadata", {}).get("name", "")]
        for _name, path, typ in columns:
            found, value = find(obj, path)
            cells.append(cell(value, typ, now) if found else None)
        rows.append({"cells": cells, "object": obj})
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": definitions,
        "rows": rows,
    }
