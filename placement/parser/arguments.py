"""Arguments, and the data references (artifact locations, parameter values) in them."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from placement.parser.results import Arguments, Artifact, Parameter


def scalar_str(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return json.dumps(value)
    return json.dumps(value, sort_keys=True)


def artifact_locations(art: Mapping[str, Any]) -> list[str]:
    """URIs of an artifact location (inline, not ``from``), for matching against datasets."""
    out: list[str] = []
    s3 = art.get("s3")
    if isinstance(s3, Mapping):
        bucket, key = s3.get("bucket"), s3.get("key")
        if isinstance(key, str):
            out.append(f"s3://{bucket}/{key.lstrip('/')}" if isinstance(bucket, str) else key)
    for kind, scheme in (("gcs", "gs"), ("oss", "oss")):
        loc = art.get(kind)
        if isinstance(loc, Mapping) and isinstance(loc.get("key"), str):
            bucket = loc.get("bucket")
            out.append(
                f"{scheme}://{bucket}/{loc['key'].lstrip('/')}"
                if isinstance(bucket, str)
                else loc["key"]
            )
    az = art.get("azure")
    if isinstance(az, Mapping) and isinstance(az.get("blob"), str):
        out.append(f"azure://{az.get('container', '')}/{az['blob'].lstrip('/')}")
    for kind in ("http", "artifactory"):
        loc = art.get(kind)
        if isinstance(loc, Mapping) and isinstance(loc.get("url"), str):
            out.append(loc["url"])
    git = art.get("git")
    if isinstance(git, Mapping) and isinstance(git.get("repo"), str):
        out.append(git["repo"])
    hdfs = art.get("hdfs")
    if isinstance(hdfs, Mapping) and isinstance(hdfs.get("path"), str):
        out.append(f"hdfs://{hdfs['path'].lstrip('/')}")
    return out


def _parse_parameters(items: Any) -> tuple[Parameter, ...]:
    out: list[Parameter] = []
    for p in items or []:
        if not isinstance(p, Mapping) or not isinstance(p.get("name"), str):
            continue
        enum = p.get("enum")
        out.append(
            Parameter(
                name=p["name"],
                value=scalar_str(p.get("value")),
                default=scalar_str(p.get("default")),
                enum=tuple(s for s in (scalar_str(e) for e in enum) if s is not None)
                if isinstance(enum, list)
                else (),
                description=p.get("description") if isinstance(p.get("description"), str) else None,
                value_from=p.get("valueFrom") if isinstance(p.get("valueFrom"), Mapping) else None,
            )
        )
    return tuple(out)


def parse_arguments(args: Any) -> Arguments:
    if not isinstance(args, Mapping):
        return Arguments()
    arts: list[Artifact] = []
    for a in args.get("artifacts") or []:
        if isinstance(a, Mapping) and isinstance(a.get("name"), str):
            arts.append(
                Artifact(
                    name=a["name"],
                    from_=a.get("from") if isinstance(a.get("from"), str) else None,
                    locations=tuple(artifact_locations(a)),
                    raw=a,
                )
            )
    return Arguments(parameters=_parse_parameters(args.get("parameters")), artifacts=tuple(arts))


_WF_PARAM = re.compile(r"\{\{\s*workflow\.parameters\.([-\w.]+)\s*\}\}")


def substitute_wf_params(value: str, params: Mapping[str, str]) -> str:
    return _WF_PARAM.sub(lambda m: params.get(m.group(1), m.group(0)), value)
