"""Template substitution: fill ``{{workflow.parameters.x}}``, ``{{tasks.X.outputs...}}``,
``{{steps.X.outputs...}}`` and ``{{item}}`` from values the portal knows; everything else
(``{{inputs...}}``, ``{{pod.name}}``, ``{{=expr}}``) is left for Argo to fill."""

from __future__ import annotations

import copy
import json
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from placement import expression
from placement.parser import Arguments, Artifact


@dataclass(frozen=True)
class TaskOutputs:
    """What a finished upstream unit produced, as the portal read it back from Argo's status.
    ``artifacts`` are Argo artifact objects (``{"name", "s3": {...}}`` ...) keyed by name."""

    phase: str = "Succeeded"
    parameters: Mapping[str, str] = field(default_factory=dict)
    result: str | None = None
    artifacts: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    exit_code: str | None = None
    # Other node facts Argo exposes as {{tasks.X.<field>}}: ip, id, startedAt, finishedAt, ...
    extra: Mapping[str, str] = field(default_factory=dict)
    # The producer's template key: a Skipped/Omitted producer's declared output defaults.
    template: str | None = None


class Unresolved(ValueError):
    """Some ``{{...}}`` references could not be filled (an upstream output missing)."""

    def __init__(self, references: Sequence[str]) -> None:
        self.references = list(references)
        super().__init__("unresolved: " + ", ".join(self.references))


class _Absent:
    """An output of a Skipped or Omitted producer that declared no default: Argo's "absent
    optional" (`workflow/controller/scope.go`, ``addSkippedNodeOutputsToScope``)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()
_DID_NOT_RUN = ("Skipped", "Omitted")

_REF = re.compile(r"\{\{\s*([^{}]+?)\s*\}\}")
# What the portal fills; everything else ({{inputs...}}, {{pod.name}}, {{=expr}}) is Argo's.
_PORTAL_REFS = ("workflow.parameters.", "tasks.", "steps.")


def aggregate_outputs(expanded: Sequence[TaskOutputs]) -> TaskOutputs:
    """Outputs of an expanded task (withItems/withParam/withSequence) as Argo shows them
    downstream (``processAggregateNodeOutputs`` in Argo's `workflow/controller/operator.go`):
    ``expanded`` is in item order; only Succeeded items count (a failed or skipped item adds
    nothing, not a null); ``outputs.parameters.p`` is the JSON list of the items' values, of the
    parsed values when every one is a JSON object or list; ``outputs.result`` is the JSON list
    of the parsed results; ``outputs.parameters`` the list of per-item ``{name: value}`` maps."""
    done = [o for o in expanded if o.phase == "Succeeded"]
    values: dict[str, list[str]] = {}
    per_item: list[dict[str, str]] = []
    results: list[Any] = []
    for o in done:
        if o.parameters:
            per_item.append(dict(o.parameters))
            for n, v in o.parameters.items():
                values.setdefault(n, []).append(v)
        if o.result is not None:
            results.append(_json_or_text(o.result))
    phases = [o.phase for o in expanded]
    phase = "Succeeded" if all(p in ("Succeeded", "Skipped") for p in phases) else "Failed"
    return TaskOutputs(
        phase=phase,
        parameters={n: _aggregated_list(v) for n, v in values.items()},
        result=json.dumps(results, separators=(",", ":")),
        extra={"outputs.parameters": json.dumps(per_item, separators=(",", ":"))},
    )


def _json_or_text(text: str) -> Any:
    """An item's result as Argo reads it (``json.Unmarshal`` into an Item). Argo fails the
    task when a result is not JSON; the portal keeps it as a string instead (decisions)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _aggregated_list(values: Sequence[str]) -> str:
    """Argo's ``aggregatedJSONValueList``: parsed values when all are JSON maps or lists,
    otherwise the list of strings."""
    parsed: list[Any] = []
    for v in values:
        try:
            x = json.loads(v)
        except ValueError:
            return json.dumps(list(values), separators=(",", ":"))
        if not isinstance(x, (list, dict)):
            return json.dumps(list(values), separators=(",", ":"))
        parsed.append(x)
    return json.dumps(parsed, separators=(",", ":"))


def with_skipped_defaults(
    outputs: Mapping[str, TaskOutputs], templates: Mapping[str, Any]
) -> dict[str, TaskOutputs]:
    """Argo's ``addSkippedNodeOutputsToScope``: a Skipped or Omitted producer that made no
    outputs shows each declared ``outputs.parameters[].valueFrom.default`` as its value."""
    out = dict(outputs)
    for task, o in outputs.items():
        if o.phase not in _DID_NOT_RUN or o.parameters or o.template is None:
            continue
        tmpl = templates.get(o.template)
        declared = (tmpl.get("outputs") or {}).get("parameters") if isinstance(tmpl, dict) else None
        defaults = {
            str(p["name"]): str(p["valueFrom"]["default"])
            for p in declared or []
            if isinstance(p, dict)
            and isinstance(p.get("valueFrom"), dict)
            and p["valueFrom"].get("default") is not None
        }
        if defaults:
            out[task] = replace(o, parameters=defaults)
    return out


def _lookup(
    ref: str,
    workflow_parameters: Mapping[str, str],
    outputs: Mapping[str, TaskOutputs],
    item: Any,
    has_item: bool,
    current: str | None = None,
) -> tuple[bool, Any]:
    """(found, value) for one reference; found False means "not ours" or "missing"."""
    if ref.startswith("workflow.parameters."):
        name = ref[len("workflow.parameters.") :]
        if name in workflow_parameters:
            return True, workflow_parameters[name]
        return False, None
    if ref == "item" or ref.startswith("item."):
        if not has_item:
            return False, None
        v: Any = item
        for part in ref.split(".")[1:]:
            if isinstance(v, Mapping) and part in v:
                v = v[part]
            else:
                return False, None
        return True, v
    head, _, rest = ref.partition(".")
    if head not in ("tasks", "steps"):
        return False, None
    if rest == "name" and current is not None:
        return True, current
    task, _, what = rest.partition(".")
    out = outputs.get(task)
    if out is None:
        return False, None
    if what == "outputs.result":
        if out.result is None and out.phase in _DID_NOT_RUN:
            return True, ABSENT
        return out.result is not None, out.result
    if what.startswith("outputs.parameters."):
        name = what[len("outputs.parameters.") :]
        if name not in out.parameters and out.phase in _DID_NOT_RUN:
            return True, ABSENT
        return name in out.parameters, out.parameters.get(name)
    if what.startswith("outputs.artifacts."):
        name = what[len("outputs.artifacts.") :]
        return name in out.artifacts, out.artifacts.get(name)
    if what == "status":
        return True, out.phase
    if what == "exitCode":
        return out.exit_code is not None, out.exit_code
    if what == "outputs.parameters":
        if "outputs.parameters" in out.extra:  # an expanded task: Argo's list of maps
            return True, out.extra["outputs.parameters"]
        return True, json.dumps(dict(out.parameters), sort_keys=True)
    return what in out.extra, out.extra.get(what)


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, sort_keys=True)


def substitute(
    text: str,
    workflow_parameters: Mapping[str, str] | None = None,
    outputs: Mapping[str, TaskOutputs] | None = None,
    *,
    item: Any = None,
    has_item: bool = False,
    missing: list[str] | None = None,
    current: str | None = None,
    expressions: bool = True,
    inputs: Mapping[str, str] | None = None,
) -> str:
    """Fill the portal's references in ``text``; ``{{inputs...}}`` and other references Argo
    fills inside the step workflow stay as they are. References to workflow parameters, upstream
    tasks/steps or the loop item that cannot be filled are appended to ``missing``.

    ``{{= expr}}`` tags are evaluated first (``expressions``), over the same values
    (``expression_scope``); a tag that reads a variable the portal does not hold stays for
    Argo, unless that variable is the portal's to fill (then it is ``missing``). ``inputs``:
    the entrypoint's inputs (``parser.entry_inputs``; default: the workflow parameters). Raises
    ``ExprError`` when a tag cannot be read or evaluated."""
    wp = workflow_parameters or {}
    outs = outputs if outputs is not None else {}
    if expressions and "{{=" in text:
        text = _fill_expressions(text, wp, outs, item, has_item, missing, inputs)

    def one(m: re.Match[str]) -> str:
        ref = m.group(1)
        found, value = _lookup(ref, wp, outs, item, has_item, current)
        if found and value is ABSENT:
            # Only a whole argument may be absent (resolve_arguments); inside text Argo fails.
            if missing is not None:
                missing.append(ref)
            return m.group(0)
        if found:
            return _as_text(value)
        ours = ref.startswith(_PORTAL_REFS) or ref == "item" or ref.startswith("item.")
        ours = ours and not (ref in ("tasks.name", "steps.name") and current is None)
        if ours and missing is not None:
            missing.append(ref)
        return m.group(0)

    return _REF.sub(one, text) if "{{" in text else text


def expression_scope(
    workflow_parameters: Mapping[str, str],
    outputs: Mapping[str, TaskOutputs],
    item: Any = None,
    has_item: bool = False,
    inputs: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The dotted variables an expression sees (Argo's scope, ``getParametersAny``): workflow
    parameters, the entrypoint's inputs (the workflow's arguments by name, as the parser fills
    them), ``workflow.parameters.json``, each upstream task's or step's ``status``,
    ``exitCode``, ``outputs.result`` and ``outputs.parameters.x`` (an absent output is ``nil``,
    so ``??`` can give its fallback), and ``item`` as its JSON value."""
    scope: dict[str, Any] = {}
    for prefix, values in (
        ("workflow.parameters", workflow_parameters),
        ("inputs.parameters", workflow_parameters if inputs is None else inputs),
    ):
        for k, v in values.items():
            scope[f"{prefix}.{k}"] = v
        listing = [{"name": k, "value": v} for k, v in values.items()]
        scope[f"{prefix}.json"] = json.dumps(listing, separators=(",", ":"))
    for task, out in outputs.items():
        for head in ("tasks", "steps"):
            base = f"{head}.{task}"
            scope[f"{base}.status"] = out.phase
            if out.exit_code is not None:
                scope[f"{base}.exitCode"] = out.exit_code
            if out.result is not None or out.phase in _DID_NOT_RUN:
                # A producer that did not run has an absent (nil) result, for ``??``.
                scope[f"{base}.outputs.result"] = out.result
            for n, v in out.parameters.items():
                scope[f"{base}.outputs.parameters.{n}"] = v
            for k, v in out.extra.items():
                if "." not in k:
                    scope[f"{base}.{k}"] = v
    if has_item:
        scope["item"] = item
    return scope


def _fill_expressions(
    text: str,
    workflow_parameters: Mapping[str, str],
    outputs: Mapping[str, TaskOutputs],
    item: Any,
    has_item: bool,
    missing: list[str] | None,
    inputs: Mapping[str, str] | None,
) -> str:
    scope = expression_scope(workflow_parameters, outputs, item, has_item, inputs)

    def unresolved(_source: str, names: list[str]) -> None:
        ours = [n for n in names if n.startswith(_PORTAL_REFS) or n.split(".")[0] == "item"]
        if missing is not None:
            missing.extend(ours)

    return expression.fill_expressions(text, scope, unresolved=unresolved)


def resolve_arguments(
    arguments: Arguments,
    workflow_parameters: Mapping[str, str] | None = None,
    outputs: Mapping[str, TaskOutputs] | None = None,
    *,
    item: Any = None,
    has_item: bool = False,
    strict: bool = True,
    current: str | None = None,
    input_defaults: Mapping[str, str] | None = None,
    inputs: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A unit's arguments as an Argo ``arguments`` object with every portal reference filled:
    parameter values get text, an artifact ``from: {{tasks.X.outputs.artifacts.y}}`` becomes
    the upstream artifact's location. ``strict`` raises ``Unresolved`` for anything missing.

    An argument that is exactly one reference to an output a Skipped or Omitted producer never
    made is unsupplied, as in Argo (``markAbsentOptionalArgs``): the consumer's own
    ``inputs.parameters[].default`` (``input_defaults``) applies, and without one it is missing."""
    missing: list[str] = []
    params: list[dict[str, Any]] = []
    for p in arguments.parameters:
        entry: dict[str, Any] = {"name": p.name}
        absent = _absent_reference(p.value, workflow_parameters, outputs, item, has_item)
        if absent is not None:
            default = (input_defaults or {}).get(p.name)
            if default is None:
                missing.append(
                    f"{absent} (its producer did not run and inputs.parameters."
                    f"{p.name} has no default)"
                )
            else:
                entry["value"] = default
        elif p.value is not None:
            try:
                entry["value"] = substitute(
                    p.value,
                    workflow_parameters,
                    outputs,
                    item=item,
                    has_item=has_item,
                    missing=missing,
                    current=current,
                    inputs=inputs,
                )
            except expression.ExprError as exc:
                # Argo fails the node on an expression that cannot be evaluated; so does this.
                raise Unresolved([f"arguments.parameters.{p.name}: {exc}"]) from None
        elif p.default is not None:
            entry["value"] = p.default
        if p.value_from is not None and p.value is None:
            entry["valueFrom"] = dict(p.value_from)
        params.append(entry)
    arts: list[dict[str, Any]] = []
    for a in arguments.artifacts:
        arts.append(_resolve_artifact(a, workflow_parameters, outputs, item, has_item, missing))
    if strict and missing:
        raise Unresolved(sorted(set(missing)))
    out: dict[str, Any] = {}
    if params:
        out["parameters"] = params
    if arts:
        out["artifacts"] = arts
    return out


def _absent_reference(
    value: str | None,
    workflow_parameters: Mapping[str, str] | None,
    outputs: Mapping[str, TaskOutputs] | None,
    item: Any,
    has_item: bool,
) -> str | None:
    """The reference when ``value`` is exactly one ``{{...}}`` naming an absent output."""
    if not value:
        return None
    m = _REF.fullmatch(value.strip())
    if m is None:
        return None
    found, v = _lookup(m.group(1), workflow_parameters or {}, outputs or {}, item, has_item)
    return m.group(1) if found and v is ABSENT else None


def _resolve_artifact(
    a: Artifact,
    workflow_parameters: Mapping[str, str] | None,
    outputs: Mapping[str, TaskOutputs] | None,
    item: Any,
    has_item: bool,
    missing: list[str],
) -> dict[str, Any]:
    raw = {k: v for k, v in a.raw.items() if k != "from"}
    if a.from_:
        m = _REF.fullmatch(a.from_.strip())
        found, value = (False, None)
        if m:
            found, value = _lookup(
                m.group(1),
                workflow_parameters or {},
                (outputs if outputs is not None else {}),
                item,
                has_item,
            )
        if found and isinstance(value, Mapping):
            # The upstream artifact's location, under this argument's name.
            loc = {
                k: copy.deepcopy(v)
                for k, v in value.items()
                if k not in ("name", "path", "mode", "from")
            }
            sub = raw.pop("subPath", None)
            if sub:
                # Argo's resolveArtifact (workflow/controller/scope.go): the argument's subPath,
                # substituted, is appended to the artifact's key; an absent optional in it
                # cannot be substituted.
                absent = _absent_reference(str(sub), workflow_parameters, outputs, item, has_item)
                if absent is not None:
                    missing.append(absent)
                sub = substitute(
                    str(sub),
                    workflow_parameters,
                    outputs,
                    item=item,
                    has_item=has_item,
                    missing=missing,
                    expressions=False,
                )
                for kind in ("s3", "gcs", "oss"):
                    if isinstance(loc.get(kind), dict) and "key" in loc[kind]:
                        loc[kind]["key"] = posixpath.join(str(loc[kind]["key"]), str(sub))
            return {**raw, **loc, "name": a.name}
        if m and m.group(1).startswith(("tasks.", "steps.")):
            missing.append(m.group(1))
        return {**raw, "from": a.from_}
    text = json.dumps(raw)
    # JSON text: a rendered expression could break it; Argo fills those tags at the site.
    filled = substitute(
        text,
        workflow_parameters,
        outputs,
        item=item,
        has_item=has_item,
        missing=missing,
        expressions=False,
    )
    resolved: dict[str, Any] = json.loads(filled) if filled != text else raw
    return resolved


# Argo's ``{{workflow.creationTimestamp.<c>}}``: strftime characters (Argo's
# `workflow/controller/operator.go` sets one variable per character it knows).
_STRFTIME_CHARS = "aAbBcCdDeFgGhHIjklmMnpRrSTuUVwWxXyYzZ"


def run_variables(
    *,
    name: str,
    namespace: str,
    uid: str,
    created: Any,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    duration_seconds: float | None = None,
    failures: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, str]:
    """The ``{{workflow.*}}`` variables that describe the run rather than one step workflow
    (Argo's ``setGlobalParameters`` and the exit-time ``workflow.duration``/``failures``).

    ``created`` is an aware ``datetime``. Inside a step workflow Argo would answer with the step
    workflow's own name, uid and age, so the portal fills these before it creates one."""
    out = {
        "workflow.name": name,
        "workflow.namespace": namespace,
        "workflow.uid": uid,
        "workflow.creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "workflow.creationTimestamp.RFC3339": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "workflow.creationTimestamp.s": str(int(created.timestamp())),
    }
    for c in _STRFTIME_CHARS:
        out[f"workflow.creationTimestamp.{c}"] = created.strftime("%" + c)
    for k, v in (labels or {}).items():
        out[f"workflow.labels.{k}"] = str(v)
    for k, v in (annotations or {}).items():
        out[f"workflow.annotations.{k}"] = str(v)
    if duration_seconds is not None:
        out["workflow.duration"] = f"{duration_seconds:f}"
    if failures is not None:
        out["workflow.failures"] = json.dumps(list(failures), separators=(",", ":"))
    return out


def fill_run_variables(obj: Any, variables: Mapping[str, str]) -> Any:
    """A copy of ``obj`` (templates, arguments) with every ``{{workflow.x}}`` named in
    ``variables`` filled; other references stay for Argo. Strings are filled one by one, so
    a value with quotes (``workflow.failures``) cannot break the document."""
    if not variables:
        return obj

    def one(m: re.Match[str]) -> str:
        return variables.get(m.group(1), m.group(0))

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return _REF.sub(one, v) if "{{" in v and "workflow." in v else v
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        return v

    return walk(obj)


@dataclass(frozen=True)
class GlobalOutputs:
    """The run's global outputs (``globalName``): what ``{{workflow.outputs.parameters.x}}`` and
    ``{{workflow.outputs.artifacts.x}}`` mean in later units, and the run's reported outputs."""

    parameters: Mapping[str, str] = field(default_factory=dict)
    artifacts: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def variables(self) -> dict[str, str]:
        return {f"workflow.outputs.parameters.{k}": v for k, v in self.parameters.items()}

    def as_argo(self) -> dict[str, Any]:
        """Argo's ``status.outputs`` shape: entries named by their global names."""
        out: dict[str, Any] = {}
        if self.parameters:
            out["parameters"] = [{"name": k, "value": v} for k, v in self.parameters.items()]
        if self.artifacts:
            out["artifacts"] = [{**a, "name": k} for k, a in self.artifacts.items()]
        return out


def global_outputs(
    produced: Sequence[tuple[Mapping[str, Any], Mapping[str, Any] | None]],
) -> GlobalOutputs:
    """Global outputs from ``(outputs, template)`` of units in the order they ended (a later
    value wins, as Argo's ``addParamToGlobalScope`` overwrites). An output counts when Argo
    reported it with ``globalName`` or the unit's template declares one for its name."""
    params: dict[str, str] = {}
    arts: dict[str, Mapping[str, Any]] = {}
    for outputs, template in produced:
        declared = template.get("outputs") if isinstance(template, Mapping) else None
        declared = declared if isinstance(declared, Mapping) else {}
        for kind in ("parameters", "artifacts"):
            names = {
                str(d["name"]): str(d["globalName"])
                for d in declared.get(kind) or []
                if isinstance(d, Mapping) and d.get("name") and d.get("globalName")
            }
            for entry in outputs.get(kind) or []:
                if not isinstance(entry, Mapping):
                    continue
                gname = entry.get("globalName") or names.get(str(entry.get("name")))
                if not gname:
                    continue
                if kind == "parameters":
                    if entry.get("value") is not None:
                        params[str(gname)] = _as_text(entry["value"])
                else:
                    arts[str(gname)] = {
                        k: copy.deepcopy(v)
                        for k, v in entry.items()
                        if k not in ("name", "path", "globalName", "mode")
                    }
    return GlobalOutputs(parameters=params, artifacts=arts)


_GLOBAL_ARTIFACT = re.compile(r"\{\{\s*workflow\.outputs\.artifacts\.([^{}\s]+)\s*\}\}")


def fill_global_artifacts(obj: Any, artifacts: Mapping[str, Mapping[str, Any]]) -> Any:
    """A copy of ``obj`` where an artifact ``from: "{{workflow.outputs.artifacts.x}}"`` becomes
    the location of the run's global artifact ``x`` (it may live at another site's bucket)."""
    if not artifacts:
        return obj

    def walk(v: Any) -> Any:
        if isinstance(v, list):
            return [walk(x) for x in v]
        if not isinstance(v, dict):
            return v
        src = v.get("from")
        m = _GLOBAL_ARTIFACT.fullmatch(src.strip()) if isinstance(src, str) else None
        if m and m.group(1) in artifacts:
            rest = {k: walk(x) for k, x in v.items() if k != "from"}
            return {**rest, **copy.deepcopy(dict(artifacts[m.group(1)])), "name": v.get("name")}
        return {k: walk(x) for k, x in v.items()}

    return walk(obj)
