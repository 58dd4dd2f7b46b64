"""What is known of a call of the entrypoint at submission: the entrypoint's inputs (the
workflow's arguments feed them) and the loops and expressions they decide.

A unit runs one call of the entrypoint template in a step workflow of its own, where Argo
cannot see the entrypoint's ``{{inputs.parameters.x}}``; the portal fills them in the call
(arguments, ``when``, ``withParam``, ``withSequence``) before it builds the unit, so a loop
over an entrypoint input is expanded in the preview as it is at run time."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any

from placement import expression
from placement.parser.arguments import scalar_str, substitute_wf_params

_INPUT = re.compile(r"\{\{\s*inputs\.parameters\.([-\w.]+)\s*\}\}")


def entry_inputs(entry: Mapping[str, Any], wf_params: Mapping[str, str]) -> dict[str, str]:
    """The entrypoint's input parameters as Argo sets them: the workflow argument of the same
    name, else the input's own ``value``/``default``; workflow parameters the entrypoint does
    not declare are visible too (the portal's long-standing reading of ``inputs`` there)."""
    out = dict(wf_params)
    inputs = entry.get("inputs")
    for p in inputs.get("parameters") or [] if isinstance(inputs, Mapping) else []:
        if not isinstance(p, Mapping) or not isinstance(p.get("name"), str):
            continue
        name = p["name"]
        if name in wf_params:
            continue
        for fld in ("value", "default"):
            v = scalar_str(p.get(fld))
            if v is not None:
                out[name] = _evaluated(fill_inputs(substitute_wf_params(v, wf_params), out), out)
                break
    return out


def _evaluated(value: str, known: Mapping[str, str]) -> str:
    """An input's ``{{= }}`` tags evaluated over the inputs before it, as Argo's
    ``substituteParams`` (workflow/common/util.go) gives them; one it cannot evaluate stays."""
    if "{{=" not in value:
        return value
    scope = {f"inputs.parameters.{k}": v for k, v in known.items()}
    try:
        return expression.fill_expressions(value, scope)
    except expression.ExprError:
        return value


def fill_inputs(text: str, inputs: Mapping[str, str]) -> str:
    """``{{inputs.parameters.x}}`` of the entrypoint filled; the rest left as it is."""
    if "{{" not in text:
        return text
    return _INPUT.sub(lambda m: inputs.get(m.group(1), m.group(0)), text)


def fill_call(call: Mapping[str, Any], inputs: Mapping[str, str]) -> Mapping[str, Any]:
    """A copy of ``call`` with the entrypoint's inputs filled in its arguments' values,
    ``when``, ``withParam`` and ``withSequence`` fields (``call`` itself when none is used)."""
    if "inputs.parameters." not in repr(call):
        return call
    out = dict(call)
    args = call.get("arguments")
    if isinstance(args, Mapping) and isinstance(args.get("parameters"), list):
        params = copy.deepcopy(args["parameters"])
        for p in params:
            if isinstance(p, dict) and isinstance(p.get("value"), str):
                p["value"] = fill_inputs(p["value"], inputs)
        out["arguments"] = {**args, "parameters": params}
    for key in ("when", "withParam"):
        if isinstance(call.get(key), str):
            out[key] = fill_inputs(call[key], inputs)
    seq = call.get("withSequence")
    if isinstance(seq, Mapping):
        out["withSequence"] = {
            k: fill_inputs(v, inputs) if isinstance(v, str) else v for k, v in seq.items()
        }
    return out


def submission_scope(inputs: Mapping[str, str], wf_params: Mapping[str, str]) -> dict[str, Any]:
    """What an expression can read at submission: the workflow's parameters and the
    entrypoint's inputs (and their ``.json`` lists, as Argo's scope has them)."""
    scope: dict[str, Any] = {}
    for prefix, values in (("workflow.parameters", wf_params), ("inputs.parameters", inputs)):
        for k, v in values.items():
            scope[f"{prefix}.{k}"] = v
        listing = [{"name": k, "value": v} for k, v in values.items()]
        scope[f"{prefix}.json"] = json.dumps(listing, separators=(",", ":"))
    return scope


def expression_problems(call: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, why) for each ``{{= ...}}`` tag of a call that cannot be read: refused at
    submission, as Argo's validation refuses it, rather than failing the unit later."""
    fields: list[tuple[str, Any]] = [
        ("when", call.get("when")),
        ("withParam", call.get("withParam")),
    ]
    args = call.get("arguments")
    if isinstance(args, Mapping):
        for i, p in enumerate(args.get("parameters") or []):
            if isinstance(p, Mapping):
                fields.append((f"arguments.parameters[{i}].value", p.get("value")))
    out: list[tuple[str, str]] = []
    for name, text in fields:
        if not isinstance(text, str) or "{{=" not in text:
            continue
        for m in expression.EXPRESSION_TAG.finditer(text):
            try:
                expression.parse(m.group(1).strip())
            except expression.ExprError as exc:
                out.append((name, f"expression {m.group(0)[:80]!r}: {exc}"))
    return out
