"""A catalogue WorkflowTemplate read as an OGC API - Processes process description.

Inputs are the template's ``spec.arguments.parameters`` (JSON Schema strings with their
``enum``, default and description); outputs are the entrypoint template's outputs, or, when
the entrypoint declares none (a DAG or steps template usually does not), the outputs of its
final tasks, named ``<task>.<output>`` (``<task>.result`` for a script's standard output).
Plain data in, plain data out: the views add links and look the rows up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

PROCESS_VERSION = "1.0.0"
JOB_CONTROL = ["async-execute", "dismiss"]
OUTPUT_TRANSMISSION = ["value", "reference"]
# A ``project`` input picks the run's project as ``POST /api/v1/runs/?project=`` does; a
# template parameter of that name wins (then the token's default project applies).
PROJECT_INPUT = "project"

REF = re.compile(
    r"^\{\{\s*(?:tasks|steps)\.(?P<task>[^.\s]+)\.outputs\."
    r"(?:(?P<kind>parameters|artifacts)\.(?P<name>[^\s}]+)|(?P<result>result))\s*\}\}$"
)


@dataclass(frozen=True)
class OutputSpec:
    """Where one process output comes from: ``task`` (a unit's name; "" for the entrypoint
    when it is a single unit), ``kind`` (parameter, artifact or result) and the unit's
    output ``name``."""

    id: str
    kind: str
    task: str
    name: str
    description: str = ""


def _spec(manifest: dict[str, Any]) -> dict[str, Any]:
    spec = manifest.get("spec")
    return spec if isinstance(spec, dict) else {}


def _templates(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        str(t["name"]): t
        for t in _spec(manifest).get("templates") or []
        if isinstance(t, dict) and t.get("name")
    }


def parameters(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    params = (_spec(manifest).get("arguments") or {}).get("parameters") or []
    return [p for p in params if isinstance(p, dict) and p.get("name")]


def _annotations(manifest: dict[str, Any]) -> dict[str, Any]:
    meta = manifest.get("metadata")
    return (meta.get("annotations") or {}) if isinstance(meta, dict) else {}


def inputs_of(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for p in parameters(manifest):
        schema: dict[str, Any] = {"type": "string"}
        default = p.get("value", p.get("default"))
        if isinstance(p.get("enum"), list) and p["enum"]:
            schema["enum"] = [str(e) for e in p["enum"]]
        if default is not None:
            schema["default"] = str(default)
        out[str(p["name"])] = {
            "title": str(p["name"]),
            "description": str(p.get("description") or ""),
            "schema": schema,
            # A parameter with a value or default may be left out.
            "minOccurs": 0 if default is not None else 1,
            "maxOccurs": 1,
        }
    if PROJECT_INPUT not in out:
        out[PROJECT_INPUT] = {
            "title": PROJECT_INPUT,
            "description": "The project the job runs in (default: your only project).",
            "schema": {"type": "string"},
            "minOccurs": 0,
            "maxOccurs": 1,
        }
    return out


def _declared(template: dict[str, Any], task: str, prefix: str) -> list[OutputSpec]:
    outputs = template.get("outputs") or {}
    specs = []
    for kind, key in (("parameter", "parameters"), ("artifact", "artifacts")):
        for o in outputs.get(key) or []:
            if isinstance(o, dict) and o.get("name"):
                specs.append(
                    OutputSpec(
                        id=f"{prefix}{o['name']}",
                        kind=kind,
                        task=task,
                        name=str(o["name"]),
                        description=str(o.get("description") or ""),
                    )
                )
    if prefix and "script" in template:
        specs.append(OutputSpec(id=f"{prefix}result", kind="result", task=task, name="result"))
    return specs


def _entrypoint_refs(template: dict[str, Any]) -> list[OutputSpec]:
    """A DAG's or steps' declared outputs, each resolved to the task it is taken from
    (``valueFrom.parameter`` / ``from`` of ``{{tasks.T.outputs...}}``)."""
    specs = []
    outputs = template.get("outputs") or {}
    for key, field in (("parameters", "parameter"), ("artifacts", "from")):
        for o in outputs.get(key) or []:
            if not isinstance(o, dict) or not o.get("name"):
                continue
            source = (o.get("valueFrom") or {}).get(field) if key == "parameters" else o.get(field)
            m = REF.match(str(source or ""))
            if m is None:
                continue
            kind = "result" if m["result"] else m["kind"][:-1]
            specs.append(
                OutputSpec(
                    id=str(o["name"]),
                    kind=kind,
                    task=m["task"],
                    name=m["name"] or "result",
                    description=str(o.get("description") or ""),
                )
            )
    return specs


def output_specs(manifest: dict[str, Any]) -> list[OutputSpec]:
    templates = _templates(manifest)
    entry = templates.get(str(_spec(manifest).get("entrypoint") or ""))
    if entry is None:
        return []
    if "dag" not in entry and "steps" not in entry:
        return _declared(entry, "", "")
    declared = _entrypoint_refs(entry)
    if declared:
        return declared
    # Final tasks: those no other task depends on (DAG), or the last group (steps).
    if "dag" in entry:
        tasks = [t for t in (entry["dag"] or {}).get("tasks") or [] if isinstance(t, dict)]
        names = [str(t.get("name")) for t in tasks]
        needed = set()
        for t in tasks:
            text = (
                " ".join(str(d) for d in t.get("dependencies") or [])
                + " "
                + str(t.get("depends") or "")
            )
            needed |= {n for n in names if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text)}
        final = [t for t in tasks if str(t.get("name")) not in needed]
    else:
        groups = [g for g in entry["steps"] or [] if isinstance(g, list)]
        final = [s for s in (groups[-1] if groups else []) if isinstance(s, dict)]
    specs: list[OutputSpec] = []
    for t in final:
        template = templates.get(str(t.get("template") or ""))
        if template is not None:
            specs += _declared(template, str(t["name"]), f"{t['name']}.")
    return specs


def outputs_of(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for o in output_specs(manifest):
        schema: dict[str, Any] = (
            {"type": "string", "contentMediaType": "application/octet-stream"}
            if o.kind == "artifact"
            else {"type": "string"}
        )
        out[o.id] = {"title": o.id, "description": o.description, "schema": schema}
    return out


def summary(name: str, manifest: dict[str, Any]) -> dict[str, Any]:
    annotations = _annotations(manifest)
    title = annotations.get("workflows.argoproj.io/title") or name
    description = annotations.get("workflows.argoproj.io/description") or ""
    return {
        "id": name,
        "title": str(title),
        "description": str(description),
        "version": PROCESS_VERSION,
        "jobControlOptions": list(JOB_CONTROL),
        "outputTransmission": list(OUTPUT_TRANSMISSION),
    }


def description(name: str, manifest: dict[str, Any]) -> dict[str, Any]:
    return {
        **summary(name, manifest),
        "inputs": inputs_of(manifest),
        "outputs": outputs_of(manifest),
    }


class InputsInvalid(Exception):
    def __init__(self, errors: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{p}: {m}" for p, m in errors))
        self.errors = errors


def arguments_from(manifest: dict[str, Any], inputs: Any) -> tuple[dict[str, str], str | None]:
    """An execute request's ``inputs`` as the run's workflow arguments and project. A value
    may be given bare or qualified (``{"value": ...}``); every value is a string to Argo."""
    if inputs is None:
        inputs = {}
    if not isinstance(inputs, dict):
        raise InputsInvalid([("inputs", "must be an object of input id: value")])
    known = {str(p["name"]): p for p in parameters(manifest)}
    errors: list[tuple[str, str]] = []
    arguments: dict[str, str] = {}
    project: str | None = None
    for key, raw in inputs.items():
        value = raw.get("value") if isinstance(raw, dict) and "value" in raw else raw
        if isinstance(value, bool):
            value = str(value).lower()
        if not isinstance(value, (str, int, float)):
            errors.append((f"inputs.{key}", "must be a string, a number or a boolean"))
            continue
        if key in known:
            enum = known[key].get("enum")
            if isinstance(enum, list) and enum and str(value) not in [str(e) for e in enum]:
                allowed = ", ".join(str(e) for e in enum)
                errors.append((f"inputs.{key}", f"{value!r} is not one of {allowed}"))
                continue
            arguments[key] = str(value)
        elif key == PROJECT_INPUT:
            project = str(value)
        else:
            errors.append((f"inputs.{key}", "no such input"))
    missing = [
        n
        for n, p in known.items()
        if p.get("value", p.get("default")) is None and n not in arguments
    ]
    errors += [(f"inputs.{n}", "is required") for n in missing]
    if errors:
        raise InputsInvalid(errors)
    return arguments, project


def workflow_for(name: str, arguments: dict[str, str]) -> dict[str, Any]:
    """The Workflow a job submits: the catalogue template by reference, as ``argo submit
    --from workflowtemplate/<name>`` creates it, with the inputs as its arguments."""
    spec: dict[str, Any] = {"workflowTemplateRef": {"name": name}}
    if arguments:
        spec["arguments"] = {"parameters": [{"name": k, "value": v} for k, v in arguments.items()]}
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": f"{name[:40]}-"},
        "spec": spec,
    }
