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
from typing import Any, NamedTuple, Protocol, cast

from placement import codec, planner
from placement.parser import Arguments, Resources, Unit, UnitKind


class UpstreamRow(Protocol):
    """What the context reads of a unit of the run (a ``UnitRun`` row)."""

    name: str
    site: str
    outputs: Any
    upstream: Any
    spec: Any


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


def output_size(outputs: Any, declared: Any) -> tuple[int | None, bool]:
    """``(bytes, declared)`` of what an ended unit passes on: the sizes its member reported
    when every artifact states one (real Argo states none), else what its template declared
    (the ``output-sizes`` annotation, ``Unit.output_bytes``), else ``(None, False)``: unknown,
    and the decision says so."""
    reported = upstream_bytes(outputs)
    if reported is not None:
        return reported, False
    if isinstance(declared, int) and not isinstance(declared, bool) and declared >= 0:
        return declared, True
    return None, False


def upstream_location(site: str, outputs: Any, spec: Any) -> planner.Upstream:
    """Where an ended unit's outputs are and how big they are, for the planner."""
    declared = spec.get("output_bytes") if isinstance(spec, Mapping) else None
    nbytes, is_declared = output_size(outputs, declared)
    return planner.Upstream(site, nbytes, declared=is_declared)


def ancestor_names(upstream: Iterable[str], upstream_of: Mapping[str, Any]) -> list[str]:
    """Every unit whose outputs a unit reads, directly or through others (``upstream``: its
    own upstream; ``upstream_of``: each unit's upstream names). Residency binds through them
    all: outputs computed from a residency-bound dataset are bound too."""
    seen: set[str] = set()
    todo = list(upstream)
    out: list[str] = []
    while todo:
        name = todo.pop()
        if name in seen or name not in upstream_of:
            continue
        seen.add(name)
        out.append(name)
        todo.extend(upstream_of[name] or ())
    return out


# 2: upstream entries may say their size was declared; the ancestors' data is carried.
CONTEXT_VERSION = 2
CONTEXT_MAX_CHARS = 32 * 1024  # well inside the 256 KiB Kubernetes allows all annotations
# What planner.decide reads of a unit (codec names) besides its name; arguments and items can
# be large and the planner reads neither. The quota admission keys its per-spec cache on these.
PLANNED_UNIT_KEYS = (
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
_CONTEXT_UNIT_KEYS = ("name", "slug", *PLANNED_UNIT_KEYS)


def context_annotation(
    *,
    project: str | None,
    unit_spec: Mapping[str, Any],
    units: Iterable[UpstreamRow],
    sites: Iterable[str] | None = None,
) -> str | None:
    """The ``<domain>/placement-context`` annotation of a runtime step workflow: the unit's
    needs, where its upstream units ran and what they produced, and what its ancestors read
    (the webhook binds it by their datasets' residency, as the worker's own planning does).
    Its upstream units have all ended when it is created, so this is the newest state of them;
    capacity, cordons and residency still come from the fleet snapshot at admission. None when
    it would be too large (the webhook then reads the database). ``sites``: the only sites
    the unit may go to (those its project's quotas admitted it for); None: any."""
    rows = {u.name: u for u in units}
    needed = set(unit_spec.get("upstream") or ())
    upstream: dict[str, list[Any]] = {}
    for name in sorted(needed):
        u = rows.get(name)
        if u is None or not u.site:
            continue
        where = upstream_location(u.site, u.outputs, u.spec)
        upstream[name] = [where.site, where.bytes, *(["declared"] if where.declared else [])]
    upstream_of = {n: r.upstream for n, r in rows.items()}
    names = ancestor_names(unit_spec.get("upstream") or (), upstream_of)
    ancestors = []
    for name in sorted(names):
        spec = rows[name].spec if isinstance(rows[name].spec, Mapping) else {}
        datasets, refs = list(spec.get("datasets") or ()), list(spec.get("data_refs") or ())
        if datasets or refs:
            ancestors.append({"name": name, "datasets": datasets, "data_refs": refs})
    doc: dict[str, Any] = {
        "v": CONTEXT_VERSION,
        "project": project,
        "unit": {k: unit_spec[k] for k in _CONTEXT_UNIT_KEYS if k in unit_spec},
        "upstream": upstream,
        "ancestors": ancestors,
    }
    if sites is not None:
        doc["sites"] = sorted(sites)
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


class Context(NamedTuple):
    """What a placement context says: the unit, its project, where its upstream units' outputs
    are, and its ancestors (only what they read: the planner binds by their residency)."""

    unit: Unit
    project: str | None
    upstream: dict[str, planner.Upstream]
    ancestors: tuple[Unit, ...]
    # The only sites the unit may go to (its quotas admitted it there); None: any.
    sites: tuple[str, ...] | None = None


def ancestor_unit(name: str, datasets: Iterable[str], data_refs: Iterable[str]) -> Unit:
    """An ancestor as the planner reads one: only what it read."""
    return Unit(
        name=name,
        slug=name,
        kind="task",
        task=name,
        template=name,
        templates=(name,),
        upstream=(),
        depends="",
        when=None,
        arguments=_NO_ARGUMENTS,
        labels={},
        images=(),
        resources=Resources(),
        datasets=tuple(datasets),
        data_refs=tuple(data_refs),
    )


def _upstream_entry(value: Any) -> planner.Upstream:
    if not (isinstance(value, list) and len(value) in (2, 3)):
        raise _Malformed("upstream")
    site, nbytes, *how = value
    if not isinstance(site, str) or not site:
        raise _Malformed("upstream")
    if nbytes is not None and (type(nbytes) is not int or nbytes < 0):
        raise _Malformed("upstream")
    if how not in ([], ["declared"]) or (how and nbytes is None):
        raise _Malformed("upstream")
    return planner.Upstream(site, nbytes, declared=bool(how))


def _ancestors(value: Any) -> tuple[Unit, ...]:
    if type(value) is not list:
        raise _Malformed("ancestors")
    out = []
    for a in value:
        if type(a) is not dict:
            raise _Malformed("ancestors")
        out.append(ancestor_unit(_str(a, "name"), _strs(a, "datasets"), _strs(a, "data_refs")))
    return tuple(out)


def context_doc(ctx: Context) -> dict[str, Any]:
    """``ctx`` as the annotation's document (``context_from_doc`` reads it back): what a
    runtime decision was made from, recorded for replay."""
    unit = codec.unit_to_dict(ctx.unit)
    return {
        "v": CONTEXT_VERSION,
        "project": ctx.project,
        "unit": {k: unit[k] for k in _CONTEXT_UNIT_KEYS if k in unit},
        "upstream": {
            name: [u.site, u.bytes, *(["declared"] if u.declared else [])]
            for name, u in sorted(ctx.upstream.items())
        },
        "ancestors": [
            {"name": a.name, "datasets": list(a.datasets), "data_refs": list(a.data_refs)}
            for a in ctx.ancestors
        ],
        **({"sites": list(ctx.sites)} if ctx.sites is not None else {}),
    }


def context_read(text: Any, slug: str) -> Context | None:
    """The unit, project, upstream and ancestors of a step workflow's placement context (the
    annotation's value); None when it is absent, not well-formed, of another version, or about
    another unit than the labels name (the caller then reads the database)."""
    if not isinstance(text, str) or len(text) > CONTEXT_MAX_CHARS:
        return None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    found = context_from_doc(doc)
    if found is None or found.unit.slug != slug:
        return None
    return found


def context_from_doc(doc: Any) -> Context | None:
    """A context document (``context_doc``, or the annotation parsed); None when not
    well-formed or of another version."""
    if not isinstance(doc, dict) or doc.get("v") != CONTEXT_VERSION:
        return None
    project = doc.get("project")
    if project is not None and not isinstance(project, str):
        return None
    ups = doc.get("upstream")
    if not isinstance(ups, dict):
        return None
    try:
        upstream = {name: _upstream_entry(value) for name, value in ups.items()}
        ancestors = _ancestors(doc.get("ancestors"))
        unit = _context_unit(doc.get("unit"))
        sites = _strs(doc, "sites") if "sites" in doc else None
    except _Malformed:
        return None
    return Context(unit, project, upstream, ancestors, sites)
