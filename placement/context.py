"""The placement context: what the worker knew when it created a runtime step workflow.

A runtime step workflow carries it in its ``<domain>/placement-context`` annotation (the unit's
needs, its project, where its upstream units ran and the bytes they produced), so the admission
webhook decides without reading the database. The worker writes it (``context_annotation``),
the webhook reads it back (``context_read``). Pure: no Django import; the caller reads the
annotation under its own label domain.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, cast

from placement import planner
from placement.parser import Arguments, Resources, Unit, UnitKind


class UpstreamRow(Protocol):
    """What the context reads of an upstream unit (a ``UnitRun`` row)."""

    name: str
    site: str
    outputs: Any


def upstream_bytes(outputs: Any) -> int | None:
    """Bytes an upstream unit produced: the sum of its output artifacts' ``size`` when every
    artifact states one, 0 when it produced no artifacts, None when unknown (the planner then
    assumes a size, so a fast link still counts)."""
    if not isinstance(outputs, Mapping) or not outputs:
        return None
    artifacts = outputs.get("artifacts")
    if artifacts is None:
        return 0
    if not isinstance(artifacts, list):
        return None
    total = 0
    for a in artifacts:
        size = a.get("size") if isinstance(a, Mapping) else None
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            return None
        total += size
    return total


CONTEXT_VERSION = 1
CONTEXT_MAX_CHARS = 32 * 1024  # well inside the 256 KiB Kubernetes allows all annotations
# What planner.decide reads of a unit (codec names); arguments and items can be large and the
# planner reads neither.
_CONTEXT_UNIT_KEYS = (
    "name",
    "slug",
    "kind",
    "task",
    "template",
    "templates",
    "upstream",
    "depends",
    "labels",
    "images",
    "resources",
    "datasets",
    "data_refs",
)


def context_annotation(
    *, project: str | None, unit_spec: Mapping[str, Any], units: Iterable[UpstreamRow]
) -> str | None:
    """The ``<domain>/placement-context`` annotation of a runtime step workflow: the unit's
    needs and where its upstream units ran and what they produced. They have all ended when it
    is created, so this is the newest state of them; capacity and cordons still come from the
    fleet snapshot at admission. None when it would be too large (the webhook then reads the
    database)."""
    needed = set(unit_spec.get("upstream") or ())
    upstream = {
        u.name: [u.site, upstream_bytes(u.outputs)] for u in units if u.name in needed and u.site
    }
    doc = {
        "v": CONTEXT_VERSION,
        "project": project,
        "unit": {k: unit_spec[k] for k in _CONTEXT_UNIT_KEYS if k in unit_spec},
        "upstream": upstream,
    }
    text = json.dumps(doc, separators=(",", ":"), sort_keys=True)
    return text if len(text) <= CONTEXT_MAX_CHARS else None


class _Malformed(Exception):
    """A placement context field of the wrong type."""


def _str(d: Mapping[str, Any], key: str, default: str | None = None) -> str:
    value = d.get(key, default)
    if type(value) is not str:
        raise _Malformed(key)
    return value


def _strs(d: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = d.get(key, [])
    if type(value) is not list or not all(type(v) is str for v in value):
        raise _Malformed(key)
    return tuple(value)


def _context_unit(d: Any) -> Unit:
    """A Unit from the context's codec dict (without arguments: the planner reads none), every
    field the planner reads checked for its type (``_Malformed``): the annotation is text that
    anyone allowed to create Workflows in the namespace could have written."""
    if type(d) is not dict:
        raise _Malformed("unit")
    name, template = _str(d, "name"), _str(d, "template")
    kind = _str(d, "kind", "task")
    if kind not in ("task", "step", "workflow"):
        raise _Malformed("kind")
    unit_labels = d.get("labels", {})
    if type(unit_labels) is not dict or not all(type(v) is str for v in unit_labels.values()):
        raise _Malformed("labels")
    r = d.get("resources", {})
    if type(r) is not dict or not all(type(v) is int and v >= 0 for v in r.values()):
        raise _Malformed("resources")
    return Unit(
        name=name,
        slug=_str(d, "slug"),
        kind=cast(UnitKind, kind),
        task=_str(d, "task", name),
        template=template,
        templates=_strs(d, "templates") or (template,),
        upstream=_strs(d, "upstream"),
        depends=_str(d, "depends", ""),
        when=None,
        arguments=_NO_ARGUMENTS,
        labels=unit_labels,
        images=_strs(d, "images"),
        resources=Resources(
            cpu_millicores=r.get("cpu_millicores", 0),
            memory_bytes=r.get("memory_bytes", 0),
            gpus=r.get("gpus", 0),
        ),
        datasets=_strs(d, "datasets"),
        data_refs=_strs(d, "data_refs"),
    )


_NO_ARGUMENTS = Arguments()


def context_read(
    text: Any, slug: str
) -> tuple[Unit, str | None, dict[str, planner.Upstream]] | None:
    """The unit, project and upstream of a step workflow's placement context (the
    annotation's value); None when it is absent, not well-formed, or about another unit than
    the labels name (the caller then reads the database)."""
    if not isinstance(text, str) or len(text) > CONTEXT_MAX_CHARS:
        return None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("v") != CONTEXT_VERSION:
        return None
    project = doc.get("project")
    if project is not None and not isinstance(project, str):
        return None
    ups = doc.get("upstream")
    if not isinstance(ups, dict):
        return None
    upstream: dict[str, planner.Upstream] = {}
    for up_name, value in ups.items():
        if not (isinstance(value, list) and len(value) == 2):
            return None
        site, nbytes = value
        if not isinstance(site, str) or not site:
            return None
        if nbytes is not None and (type(nbytes) is not int or nbytes < 0):
            return None
        upstream[up_name] = planner.Upstream(site, nbytes)
    try:
        unit = _context_unit(doc.get("unit"))
    except _Malformed:
        return None
    if unit.slug != slug:
        return None
    return unit, project, upstream
