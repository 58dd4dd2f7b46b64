"""Template tags of the dashboard: the DAG and the timeline (drawn by ``portal.drawing``),
and the formatting filters the pages share."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django import template
from django.utils.safestring import SafeString, mark_safe

from portal.dag import UNPLACED
from portal.drawing import DagDrawing, Timeline, format_offset, size_text

register = template.Library()


@register.simple_tag
def dag_svg(
    units: Sequence[Any],
    colours: Mapping[str, str],
    label: str = "",
    link: str = "",
    expand: Sequence[str] = (),
    ended: Mapping[str, Sequence[Any]] | None = None,
    group_link: str = "",
) -> SafeString:
    """The DAG of ``units`` coloured by site and outlined by phase (``DagDrawing``)."""
    drawing = DagDrawing(
        units, colours, label=label, link=link, expand=expand, ended=ended, group_link=group_link
    )
    return mark_safe(drawing.render())  # every interpolated string is escaped


@register.simple_tag
def timeline_svg(
    units: Sequence[Any],
    colours: Mapping[str, str],
    now: datetime | None = None,
    ended: Mapping[str, Sequence[Any]] | None = None,
) -> SafeString:
    """One lane per site; each started unit is a bar from its start to its end (or now)."""
    return mark_safe(Timeline(units, colours, now=now, ended=ended).render())  # escaped inside


@register.filter
def human_bytes(value: Any) -> str:
    # The planner's reasons use the same function: one size reads the same across a page.
    return size_text(value)


@register.filter
def human_seconds(value: Any) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, timedelta):
        value = value.total_seconds()
    s = float(value)
    if s < 1:
        return "< 1 s" if s > 0 else "0 s"
    return format_offset(s).replace("s", " s").replace("m", " min ").replace("h", " h ").strip()


@register.filter
def duration_to(start: datetime | None, end: datetime | None) -> timedelta | None:
    """From ``start`` to ``end`` (or to now, for what still runs)."""
    if start is None:
        return None
    from django.utils import timezone

    return (end or timezone.now()) - start


ARTIFACT_KINDS = ("s3", "gcs", "azure", "oss", "hdfs", "http", "git", "artifactory", "hf")


@register.filter
def artifact_location(artifact: Any) -> str:
    """Where an Argo artifact lives, in full (``s3://bucket/key``, a URL, a path)."""
    if not isinstance(artifact, Mapping):
        return ""
    if artifact.get("locations"):
        return ", ".join(str(x) for x in artifact["locations"])
    raw = artifact.get("raw") if isinstance(artifact.get("raw"), Mapping) else {}
    for kind in ARTIFACT_KINDS:
        loc = artifact.get(kind) or (raw or {}).get(kind)
        if not isinstance(loc, Mapping):
            continue
        if kind in ("s3", "oss", "gcs"):
            scheme = {"s3": "s3", "oss": "oss", "gcs": "gs"}[kind]
            bucket = loc.get("bucket") or "(the site's default bucket)"
            where = f"{scheme}://{bucket}/{loc.get('key', '')}"
            return where + (f" at {loc['endpoint']}" if loc.get("endpoint") else "")
        if kind == "azure":
            return f"azure://{loc.get('container', '')}/{loc.get('blob', '')}"
        if kind == "hdfs":
            return f"hdfs://{loc.get('path', '')}"
        if kind == "git":
            return f"{loc.get('repo', '')}@{loc.get('revision', 'HEAD')}"
        return str(loc.get("url") or loc.get("path") or kind)
    return str(artifact.get("path") or "")


@register.filter
def millicores(value: Any) -> str:
    return f"{int(value) / 1000:g}" if value is not None else "—"


@register.filter
def colour_of(colours: Mapping[str, str], name: str) -> str:
    return colours.get(name, UNPLACED) if name else UNPLACED
