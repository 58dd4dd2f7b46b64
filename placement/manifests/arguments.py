"""A unit's arguments with every portal reference filled: parameter values as text, an
artifact ``from`` an upstream output as that output's location (with its ``subPath``), and
an argument naming an output its producer never made left unsupplied, as Argo does."""

from __future__ import annotations

import copy
import json
import posixpath
from collections.abc import Mapping
from typing import Any

from placement import expression
from placement.manifests.outputs import ABSENT, TaskOutputs
from placement.manifests.substitution import REFERENCE, Unresolved, lookup, substitute
from placement.parser import Arguments, Artifact, Parameter


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
    resolver = _Resolver(
        workflow_parameters or {},
        outputs if outputs is not None else {},
        item=item,
        has_item=has_item,
        current=current,
        inputs=inputs,
    )
    params = [resolver.parameter(p, input_defaults or {}) for p in arguments.parameters]
    arts = [resolver.artifact(a) for a in arguments.artifacts]
    if strict and resolver.missing:
        raise Unresolved(sorted(set(resolver.missing)))
    out: dict[str, Any] = {}
    if params:
        out["parameters"] = params
    if arts:
        out["artifacts"] = arts
    return out


class _Resolver:
    """The values one unit's arguments are filled from; ``missing`` collects what could not
    be filled."""

    def __init__(
        self,
        workflow_parameters: Mapping[str, str],
        outputs: Mapping[str, TaskOutputs],
        *,
        item: Any,
        has_item: bool,
        current: str | None,
        inputs: Mapping[str, str] | None,
    ) -> None:
        self.workflow_parameters = workflow_parameters
        self.outputs = outputs
        self.item = item
        self.has_item = has_item
        self.current = current
        self.inputs = inputs
        self.missing: list[str] = []

    def parameter(self, p: Parameter, input_defaults: Mapping[str, str]) -> dict[str, Any]:
        entry: dict[str, Any] = {"name": p.name}
        absent = self.absent_reference(p.value)
        if absent is not None:
            default = input_defaults.get(p.name)
            if default is None:
                self.missing.append(
                    f"{absent} (its producer did not run and inputs.parameters."
                    f"{p.name} has no default)"
                )
            else:
                entry["value"] = default
        elif p.value is not None:
            try:
                entry["value"] = self.substitute(p.value, current=self.current, inputs=self.inputs)
            except expression.ExprError as exc:
                # Argo fails the node on an expression that cannot be evaluated; so does this.
                raise Unresolved([f"arguments.parameters.{p.name}: {exc}"]) from None
        elif p.default is not None:
            entry["value"] = p.default
        if p.value_from is not None and p.value is None:
            entry["valueFrom"] = dict(p.value_from)
        return entry

    def substitute(self, text: str, **options: Any) -> str:
        return substitute(
            text,
            self.workflow_parameters,
            self.outputs,
            item=self.item,
            has_item=self.has_item,
            missing=self.missing,
            **options,
        )

    def lookup(self, ref: str) -> tuple[bool, Any]:
        return lookup(ref, self.workflow_parameters, self.outputs, self.item, self.has_item)

    def absent_reference(self, value: str | None) -> str | None:
        """The reference when ``value`` is exactly one ``{{...}}`` naming an absent output."""
        if not value:
            return None
        m = REFERENCE.fullmatch(value.strip())
        if m is None:
            return None
        found, v = self.lookup(m.group(1))
        return m.group(1) if found and v is ABSENT else None

    def artifact(self, a: Artifact) -> dict[str, Any]:
        raw = {k: v for k, v in a.raw.items() if k != "from"}
        if a.from_:
            m = REFERENCE.fullmatch(a.from_.strip())
            found, value = self.lookup(m.group(1)) if m else (False, None)
            if found and isinstance(value, Mapping):
                loc = self.upstream_location(value, raw)  # takes the subPath out of raw
                return {**raw, **loc, "name": a.name}
            if m and m.group(1).startswith(("tasks.", "steps.")):
                self.missing.append(m.group(1))
            return {**raw, "from": a.from_}
        text = json.dumps(raw)
        # JSON text: a rendered expression could break it; Argo fills those tags at the site.
        filled = self.substitute(text, expressions=False)
        resolved: dict[str, Any] = json.loads(filled) if filled != text else raw
        return resolved

    def upstream_location(self, value: Mapping[str, Any], raw: dict[str, Any]) -> dict[str, Any]:
        """The upstream artifact's location, for this argument (its ``subPath`` taken out of
        ``raw`` and appended to the key)."""
        skip = ("name", "path", "mode", "from")
        loc = {k: copy.deepcopy(v) for k, v in value.items() if k not in skip}
        sub = raw.pop("subPath", None)
        if sub:
            # Argo's resolveArtifact (workflow/controller/scope.go): the argument's subPath,
            # substituted, is appended to the artifact's key; an absent optional in it
            # cannot be substituted.
            absent = self.absent_reference(str(sub))
            if absent is not None:
                self.missing.append(absent)
            sub = self.substitute(str(sub), expressions=False)
            for kind in ("s3", "gcs", "oss"):
                if isinstance(loc.get(kind), dict) and "key" in loc[kind]:
                    loc[kind]["key"] = posixpath.join(str(loc[kind]["key"]), str(sub))
        return loc
