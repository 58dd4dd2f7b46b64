"""The run's own variables: ``{{workflow.*}}`` that describe the run rather than one step
workflow, and its global outputs (``globalName``) as later units and the run report them."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from placement.manifests.substitution import REFERENCE, as_text

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
            return REFERENCE.sub(one, v) if "{{" in v and "workflow." in v else v
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
                        params[str(gname)] = as_text(entry["value"])
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
