"""A step workflow's spec under run-level controls the portal holds itself (parallelism and the
run's deadline): what Argo's controller would apply once to the whole workflow must not be applied
again, separately, by each site's controller to each step workflow."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

# A step workflow's artifacts outlive it until the run ends: later units at other sites read
# them. The portal keeps step workflows of such runs until the run has ended, then deletes
# them, which is when the member's controller collects (``OnWorkflowDeletion``).
_GC_AT_DELETION = {"OnWorkflowCompletion": "OnWorkflowDeletion"}


def _artifact_gc(value: Any) -> Any:
    if isinstance(value, Mapping) and value.get("strategy") in _GC_AT_DELETION:
        return {**value, "strategy": _GC_AT_DELETION[str(value["strategy"])]}
    return value


def _template_artifacts_gc(template: dict[str, Any]) -> None:
    outputs = template.get("outputs")
    for art in (outputs.get("artifacts") or []) if isinstance(outputs, Mapping) else []:
        if isinstance(art, dict) and "artifactGC" in art:
            art["artifactGC"] = _artifact_gc(art["artifactGC"])


def has_artifact_gc(spec: Mapping[str, Any], templates: Mapping[str, Any]) -> bool:
    """Whether the workflow collects artifacts when it completes (spec-level or on any output
    artifact): then its step workflows are kept until the run ends."""
    if _artifact_gc(spec.get("artifactGC")) is not spec.get("artifactGC"):
        return True
    for t in templates.values():
        outputs = t.get("outputs") if isinstance(t, Mapping) else None
        for art in (outputs.get("artifacts") or []) if isinstance(outputs, Mapping) else []:
            if isinstance(art, Mapping) and art.get("artifactGC") is not _artifact_gc(
                art.get("artifactGC")
            ):
                return True
    return False


def run_level_spec(spec: Mapping[str, Any], *, deadline_left: float | None) -> dict[str, Any]:
    """The step workflow's spec with the run's controls taken out of the member's hands:

    * ``activeDeadlineSeconds``: the time left of the run's deadline (at least 1 s; the portal
      does not create a step past it), not the whole deadline again for every step;
      ``deadline_left`` None leaves the field out (the exit handler runs after the deadline,
      as Argo runs ``onExit`` after a workflow timed out);
    * ``synchronization`` (workflow level, and the entrypoint template's): held by the portal
      across sites and runs, so a member neither locks again nor needs the ConfigMap;
    * ``artifactGC`` ``OnWorkflowCompletion`` becomes ``OnWorkflowDeletion`` (see above).
    """
    out = copy.deepcopy(dict(spec))
    out.pop("activeDeadlineSeconds", None)
    if deadline_left is not None:
        out["activeDeadlineSeconds"] = max(1, math.ceil(deadline_left))
    out.pop("synchronization", None)
    for t in out.get("templates") or []:
        if isinstance(t, dict):
            if t.get("name") == out.get("entrypoint"):
                t.pop("synchronization", None)
            _template_artifacts_gc(t)
    if "artifactGC" in out:
        out["artifactGC"] = _artifact_gc(out["artifactGC"])
    return out
