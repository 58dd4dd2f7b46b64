"""What finished upstream units produced, as later units read it: ``TaskOutputs`` per unit,
an expanded task's outputs aggregated as Argo shows them downstream, and the declared
defaults of a producer that did not run (``ABSENT`` when it declared none)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any


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


class _Absent:
    """An output of a Skipped or Omitted producer that declared no default: Argo's "absent
    optional" (`workflow/controller/scope.go`, ``addSkippedNodeOutputsToScope``)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()
DID_NOT_RUN = ("Skipped", "Omitted")


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
        if o.phase not in DID_NOT_RUN or o.parameters or o.template is None:
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
