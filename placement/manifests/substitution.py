"""Template substitution: fill ``{{workflow.parameters.x}}``, ``{{tasks.X.outputs...}}``,
``{{steps.X.outputs...}}`` and ``{{item}}`` from values the portal knows; everything else
(``{{inputs...}}``, ``{{pod.name}}``, ``{{=expr}}``) is left for Argo to fill."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from placement import expression
from placement.manifests.outputs import ABSENT, DID_NOT_RUN, TaskOutputs


class Unresolved(ValueError):
    """Some ``{{...}}`` references could not be filled (an upstream output missing)."""

    def __init__(self, references: Sequence[str]) -> None:
        self.references = list(references)
        super().__init__("unresolved: " + ", ".join(self.references))


REFERENCE = re.compile(r"\{\{\s*([^{}]+?)\s*\}\}")
# What the portal fills; everything else ({{inputs...}}, {{pod.name}}, {{=expr}}) is Argo's.
_PORTAL_REFS = ("workflow.parameters.", "tasks.", "steps.")


def lookup(
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
        if out.result is None and out.phase in DID_NOT_RUN:
            return True, ABSENT
        return out.result is not None, out.result
    if what.startswith("outputs.parameters."):
        name = what[len("outputs.parameters.") :]
        if name not in out.parameters and out.phase in DID_NOT_RUN:
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


def as_text(value: Any) -> str:
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
        found, value = lookup(ref, wp, outs, item, has_item, current)
        if found and value is ABSENT:
            # Only a whole argument may be absent (resolve_arguments); inside text Argo fails.
            if missing is not None:
                missing.append(ref)
            return m.group(0)
        if found:
            return as_text(value)
        ours = ref.startswith(_PORTAL_REFS) or ref == "item" or ref.startswith("item.")
        ours = ours and not (ref in ("tasks.name", "steps.name") and current is None)
        if ours and missing is not None:
            missing.append(ref)
        return m.group(0)

    return REFERENCE.sub(one, text) if "{{" in text else text


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
            if out.result is not None or out.phase in DID_NOT_RUN:
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
