"""Units to JSON and back, so a run can store its units and decide them again later (the
webhook, failover) without parsing the manifest again. Pure: no Django import."""

from __future__ import annotations

from typing import Any

from placement.parser import Arguments, Artifact, Parameter, Resources, Unit


def _parameter(p: Parameter) -> dict[str, Any]:
    return {
        "name": p.name,
        "value": p.value,
        "default": p.default,
        "enum": list(p.enum),
        "description": p.description,
        "value_from": dict(p.value_from) if p.value_from is not None else None,
    }


def arguments_to_dict(a: Arguments) -> dict[str, Any]:
    return {
        "parameters": [_parameter(p) for p in a.parameters],
        "artifacts": [
            {"name": x.name, "from": x.from_, "locations": list(x.locations), "raw": dict(x.raw)}
            for x in a.artifacts
        ],
    }


def arguments_from_dict(d: dict[str, Any]) -> Arguments:
    return Arguments(
        parameters=tuple(
            Parameter(
                name=p["name"],
                value=p.get("value"),
                default=p.get("default"),
                enum=tuple(p.get("enum") or ()),
                description=p.get("description"),
                value_from=p.get("value_from"),
            )
            for p in d.get("parameters", [])
        ),
        artifacts=tuple(
            Artifact(
                name=x["name"],
                from_=x.get("from"),
                locations=tuple(x.get("locations") or ()),
                raw=x.get("raw") or {},
            )
            for x in d.get("artifacts", [])
        ),
    )


def unit_to_dict(u: Unit) -> dict[str, Any]:
    return {
        "name": u.name,
        "slug": u.slug,
        "kind": u.kind,
        "task": u.task,
        "template": u.template,
        "templates": list(u.templates),
        "upstream": list(u.upstream),
        "depends": u.depends,
        "when": u.when,
        "arguments": arguments_to_dict(u.arguments),
        "labels": dict(u.labels),
        "images": list(u.images),
        "resources": {
            "cpu_millicores": u.resources.cpu_millicores,
            "memory_bytes": u.resources.memory_bytes,
            "gpus": u.resources.gpus,
        },
        "datasets": list(u.datasets),
        "data_refs": list(u.data_refs),
        "item": u.item,
        "item_index": u.item_index,
        "with_param": u.with_param,
        "continue_on_failed": u.continue_on_failed,
        "output_bytes": u.output_bytes,
        "carries_exit": u.carries_exit,
        "pods": u.pods,
    }


def unit_from_dict(d: dict[str, Any]) -> Unit:
    r = d.get("resources") or {}
    return Unit(
        name=d["name"],
        slug=d["slug"],
        kind=d.get("kind", "task"),
        task=d.get("task", d["name"]),
        template=d["template"],
        templates=tuple(d.get("templates") or (d["template"],)),
        upstream=tuple(d.get("upstream") or ()),
        depends=d.get("depends") or "",
        when=d.get("when"),
        arguments=arguments_from_dict(d.get("arguments") or {}),
        labels=d.get("labels") or {},
        images=tuple(d.get("images") or ()),
        resources=Resources(
            cpu_millicores=int(r.get("cpu_millicores", 0)),
            memory_bytes=int(r.get("memory_bytes", 0)),
            gpus=int(r.get("gpus", 0)),
        ),
        datasets=tuple(d.get("datasets") or ()),
        data_refs=tuple(d.get("data_refs") or ()),
        item=d.get("item"),
        item_index=d.get("item_index"),
        with_param=d.get("with_param"),
        continue_on_failed=bool(d.get("continue_on_failed", False)),
        output_bytes=_bytes_or_none(d.get("output_bytes")),
        carries_exit=bool(d.get("carries_exit", False)),
        pods=int(d.get("pods", 1)),
    )


def _bytes_or_none(value: Any) -> int | None:
    """A stored byte count; None for anything else (units stored before sizes were kept)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return int(value)
