"""Declared output sizes: the ``<domain>/output-sizes`` annotation on a template.

Argo records no size for an output artifact (only its key), so the planner cannot weigh moving a
step's outputs to the next step's site unless someone says how big they are. The template that
produces them says so in its ``metadata.annotations``::

    portal.multisite.io/output-sizes: "tiles=2Gi,patches=500Mi"

one ``name=quantity`` per output artifact of that template (Kubernetes quantities: ``500Mi``,
``2Gi``, ``1.5G``, ``0``). Partial declarations are refused: a total that silently left an
artifact out would be a guess presented as a figure. A template that declares no output
artifacts passes nothing on (0 bytes) and needs no annotation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from placement.parser.resources import parse_quantity

EXAMPLE = "tiles=2Gi,patches=500Mi"


def output_artifact_names(template: Mapping[str, Any]) -> list[str]:
    """The names of the output artifacts a template declares, in order."""
    outputs = template.get("outputs")
    if not isinstance(outputs, Mapping):
        return []
    return [
        a["name"]
        for a in outputs.get("artifacts") or []
        if isinstance(a, Mapping) and isinstance(a.get("name"), str)
    ]


def declared_output_bytes(
    template: Mapping[str, Any], annotation_key: str
) -> tuple[int | None, list[str]]:
    """``(bytes, problems)``: the total size of the template's output artifacts as its
    annotation declares them (None when it declares none, 0 when it has no output artifacts),
    and what is wrong with the annotation (messages; the caller names the field)."""
    names = output_artifact_names(template)
    meta = template.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    raw = annotations.get(annotation_key) if isinstance(annotations, Mapping) else None
    if raw is None:
        return (None if names else 0), []
    if not isinstance(raw, str):
        return None, [f"must be a string such as {EXAMPLE!r}"]
    sizes: dict[str, int] = {}
    problems: list[str] = []
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        name, eq, quantity = (s.strip() for s in item.partition("="))
        if not eq or not name:
            problems.append(f"{item!r} is not name=size (for example {EXAMPLE!r})")
            continue
        if name not in names:
            have = ", ".join(names) if names else "none"
            problems.append(
                f"{name!r} is not an output artifact of this template (it declares: {have})"
            )
            continue
        if name in sizes:
            problems.append(f"{name!r} is given more than once")
            continue
        value = parse_quantity(quantity)
        if value is None or value < 0 or not math.isfinite(value):
            problems.append(
                f"{quantity!r} for {name!r} is not a size (a quantity such as 500Mi or 2Gi)"
            )
            continue
        sizes[name] = math.ceil(value)
    missing = [n for n in names if n not in sizes]
    if not problems and missing:
        problems.append(
            f"no size for output artifact {', '.join(map(repr, missing))}: declare every output "
            "artifact of the template (0 for small ones), so the total is not a guess"
        )
    if problems:
        return None, problems
    return sum(sizes.values()), []
