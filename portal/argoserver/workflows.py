"""A run as Argo Server shows a Workflow: ``metadata``, the ``spec`` as submitted, and a
``status`` whose nodes are built from the run's units as Argo's controller names them
(``Workflow.NodeID``: ``<workflow>-<fnv32a(node name)>``; DAG tasks ``<workflow>.<task>``,
steps ``<workflow>[<group>].<step>``, the exit handler ``<workflow>.onExit``). Each node's site
is in the workflow's ``<domain>/node-sites`` annotation (JSON, by node id), in the node's
``hostNodeName`` and at the head of its ``message``, so ``argo get`` shows where it ran."""

from __future__ import annotations

import itertools
import json
import re
import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from portal.choices import RunStatus, UnitKind, UnitPhase
from portal.karmada.logs import fnv32a
from portal.models import SyncHold, UnitRun, WorkflowRun
from portal.selectors import outputs_summary

UID_NAMESPACE = uuid.UUID("6f1c1f0e-5a43-4c53-9d0e-2b9a3c7c4a10")
ARGO_LABEL = "workflows.argoproj.io"
# The fields of Argo's ``Outputs`` a unit's recorded outputs may carry.
OUTPUT_KEYS = ("parameters", "artifacts", "result", "exitCode")
LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]")


def timestamp(value: datetime | None) -> str | None:
    """metav1.Time's form: RFC 3339 in UTC, whole seconds."""
    if value is None:
        return None
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_id(workflow: str, name: str) -> str:
    """Argo's ``Workflow.NodeID`` (pkg/apis/workflow/v1alpha1/workflow_types.go)."""
    return workflow if name == workflow else f"{workflow}-{fnv32a(name)}"


def version_of(last_change: datetime) -> str:
    """A workflow's resourceVersion: the time the run or one of its units last changed, in
    microseconds, so that a watch sees every change."""
    return str(int(last_change.timestamp() * 1_000_000))


def uid_of(run: WorkflowRun) -> str:
    return str(uuid.uuid5(UID_NAMESPACE, f"{run.pk}:{run.created_at.isoformat()}"))


def namespace_of(run: WorkflowRun) -> str:
    return run.project.name if run.project_id is not None and run.project else ""


def phase_of(run: WorkflowRun, waiting_on_lock: bool = False) -> str:
    """Argo's workflow phase. A stopped run is Failed, as Argo's controller marks a
    workflow whose shutdown ended it ("Stopped with strategy ..."). A pending run is Running
    (Argo marks a workflow Running on its first operation, before any pod exists) unless it
    waits for a lock, where Argo's controller keeps it Pending."""
    if run.status == RunStatus.STOPPED:
        return "Failed"
    if run.status == RunStatus.PENDING:
        return "Pending" if waiting_on_lock else "Running"
    return str(run.status)


def message_of(run: WorkflowRun) -> str:
    if run.status == RunStatus.STOPPED:
        strategy = ((run.compiled or {}).get("spec") or {}).get("shutdown") or "Stop"
        return f"Stopped with strategy '{strategy}'"
    return run.message or ""


def labels_of(run: WorkflowRun, phase: str) -> dict[str, str]:
    """The manifest's labels, Argo's own (phase, completed, creator) and the portal's."""
    domain = settings.PORTAL_LABEL_DOMAIN
    meta = (run.manifest or {}).get("metadata") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    labels[f"{ARGO_LABEL}/phase"] = phase
    labels[f"{ARGO_LABEL}/completed"] = "true" if run.finished_at is not None else "false"
    if run.owner_id is not None:
        labels[f"{ARGO_LABEL}/creator"] = LABEL_VALUE.sub("-", run.owner.get_username())[:63]
    if run.resubmitted_from_id is not None and run.resubmitted_from is not None:
        labels[f"{ARGO_LABEL}/resubmitted-from-workflow"] = run.resubmitted_from.name
    labels[f"{domain}/run"] = str(run.pk)
    if run.project_id is not None:
        labels[f"{domain}/project"] = namespace_of(run)
    return labels


def runs_waiting_on_locks(run_ids: Iterable[int]) -> set[int]:
    """Runs held back by a workflow-level mutex or semaphore they do not hold yet."""
    return set(
        SyncHold.objects.filter(run_id__in=list(run_ids), scope="", held=False).values_list(
            "run_id", flat=True
        )
    )


def metadata_of(
    run: WorkflowRun, phase: str, units: Sequence[UnitRun] | None = None
) -> dict[str, Any]:
    meta = (run.manifest or {}).get("metadata") or {}
    stamps = [run.updated_at, *(u.updated_at for u in units or [])]
    out: dict[str, Any] = {
        "name": run.name,
        "namespace": namespace_of(run),
        "uid": uid_of(run),
        # Changes whenever the run or one of its units does: a watch compares it.
        "resourceVersion": version_of(max(stamps)),
        "generation": 1,
        "creationTimestamp": timestamp(run.created_at),
        "labels": labels_of(run, phase),
        "annotations": {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
    }
    if meta.get("generateName"):
        out["generateName"] = meta["generateName"]
    return out


def spec_of(run: WorkflowRun) -> dict[str, Any]:
    """The spec as submitted (arguments applied), with what ``argo stop`` and
    ``argo suspend`` change in it: ``shutdown`` and ``suspend``."""
    spec = dict((run.manifest or {}).get("spec") or {})
    compiled = (run.compiled or {}).get("spec") or {}
    for key in ("shutdown", "suspend"):
        if key in compiled:
            spec[key] = compiled[key]
        else:
            spec.pop(key, None)
    return quantities_as_strings(spec)


def quantities_as_strings(value: Any) -> Any:
    """Resource quantities as Kubernetes writes them back: ``resource.Quantity`` marshals to
    a string, so a ``nvidia.com/gpu: 1`` written in YAML comes back as ``"1"``."""
    if isinstance(value, list):
        return [quantities_as_strings(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        if key == "resources" and isinstance(item, dict):
            item = {
                k: (
                    {q: str(n) if isinstance(n, int | float) else n for q, n in v.items()}
                    if k in ("limits", "requests") and isinstance(v, dict)
                    else v
                )
                for k, v in item.items()
            }
        out[key] = quantities_as_strings(item)
    return out


def workflow_of(
    run: WorkflowRun, units: Sequence[UnitRun], *, waiting_on_lock: bool = False
) -> dict[str, Any]:
    """The whole Workflow object of ``run`` (``units``: its units, in order)."""
    phase = phase_of(run, waiting_on_lock)
    nodes = Nodes(run, units, phase).build()
    metadata = metadata_of(run, phase, units)
    sites = {n["id"]: n["hostNodeName"] for n in nodes.values() if n.get("hostNodeName")}
    metadata["annotations"][f"{settings.PORTAL_LABEL_DOMAIN}/node-sites"] = json.dumps(
        sites, sort_keys=True
    )
    status: dict[str, Any] = {
        "phase": phase,
        "startedAt": timestamp(run.started_at or run.created_at),
        "finishedAt": timestamp(run.finished_at),
        "progress": progress_of(units),
        "nodes": nodes,
    }
    message = message_of(run)
    if message:
        status["message"] = message
    summary = outputs_summary(
        [
            {"name": u.name, "upstream": u.upstream, "phase": u.phase, "outputs": u.outputs}
            for u in units
        ],
        limit=0,
    )["global"]
    outputs = {k: v for k, v in summary.items() if v}
    if outputs:
        status["outputs"] = outputs
    if run.finished_at is not None:
        status["conditions"] = [{"type": "Completed", "status": "True"}]
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": metadata,
        "spec": spec_of(run),
        "status": {k: v for k, v in status.items() if v is not None},
    }


def progress_of(units: Sequence[UnitRun]) -> str:
    """Argo counts pods, succeeded over all; skipped and omitted units ran none."""
    counted = [u for u in units if u.phase not in (UnitPhase.SKIPPED, UnitPhase.OMITTED)]
    done = sum(1 for u in counted if u.phase == UnitPhase.SUCCEEDED)
    return f"{done}/{len(counted)}"


NODE_TYPES = (
    ("dag", "DAG"),
    ("steps", "Steps"),
    ("suspend", "Suspend"),
    ("http", "HTTP"),
    ("plugin", "Plugin"),
    ("containerSet", "ContainerSet"),
)


class Nodes:
    """``status.nodes`` of one run: a root node for the entrypoint, a node per unit under it
    (with Argo's StepGroup nodes for steps and TaskGroup nodes for a fanned-out task), and the
    exit handler's node beside them."""

    def __init__(self, run: WorkflowRun, units: Sequence[UnitRun], phase: str) -> None:
        self.run = run
        self.name = run.name
        self.units = list(units)
        self.phase = phase
        compiled = run.compiled or {}
        self.templates: dict[str, Any] = compiled.get("templates") or {}
        self.entrypoint = str(compiled.get("entrypoint") or "")
        self.nodes: dict[str, dict[str, Any]] = {}

    def template_type(self, key: str) -> str:
        template = self.templates.get(key)
        if isinstance(template, dict):
            for field, kind in NODE_TYPES:
                if field in template:
                    return kind
        return "Pod"

    def add(self, name: str, display: str, type_: str, **fields: Any) -> dict[str, Any]:
        node = {
            "id": node_id(self.name, name),
            "name": name,
            "displayName": display,
            "type": type_,
            **{k: v for k, v in fields.items() if v not in (None, "", [])},
        }
        self.nodes[node["id"]] = node
        return node

    def unit_node(
        self, unit: UnitRun, name: str, display: str, boundary: str | None
    ) -> dict[str, Any]:
        site = unit.site or ""
        message = " ".join(part for part in (f"[{site}]" if site else "", unit.message) if part)
        outputs = {
            k: v
            for k, v in (unit.outputs or {}).items()
            if k in OUTPUT_KEYS and v not in (None, [], "")
        }
        kind = "Skipped" if unit.phase == UnitPhase.SKIPPED else self.template_type(unit.template)
        return self.add(
            name,
            display,
            kind,
            templateName=unit.template,
            phase=str(unit.phase),
            boundaryID=boundary,
            startedAt=timestamp(unit.started_at),
            finishedAt=timestamp(unit.finished_at),
            progress=("1/1" if unit.phase == UnitPhase.SUCCEEDED else "0/1"),
            message=message,
            hostNodeName=site,
            outputs=outputs or None,
        )

    def build(self) -> dict[str, dict[str, Any]]:
        main = [u for u in self.units if u.kind != UnitKind.EXIT]
        exits = [u for u in self.units if u.kind == UnitKind.EXIT]
        root_type = self.template_type(self.entrypoint)
        if root_type not in ("DAG", "Steps") and len(main) == 1:
            # One template run whole: its node is the workflow's only node, as in Argo.
            self.unit_node(main[0], self.name, self.name, None)
        else:
            root = self.add(
                self.name,
                self.name,
                root_type if root_type in ("DAG", "Steps") else "DAG",
                templateName=self.entrypoint,
                phase=self.phase,
                startedAt=timestamp(self.run.started_at or self.run.created_at),
                finishedAt=timestamp(self.run.finished_at),
                progress=progress_of(main),
                message=message_of(self.run),
            )
            if root_type == "Steps":
                self.steps(root, main)
            else:
                self.dag(root, main)
        for unit in exits:
            self.unit_node(unit, f"{self.name}.onExit", "onExit", None)
        return self.nodes

    def dag(self, root: dict[str, Any], units: list[UnitRun]) -> None:
        ids: dict[str, str] = {}
        groups: dict[str, dict[str, Any]] = {}
        for unit in units:
            node = self.unit_node(unit, f"{self.name}.{unit.name}", unit.name, root["id"])
            ids[unit.name] = node["id"]
            if unit.item_index is not None:
                group = groups.get(unit.task)
                if group is None:
                    group = self.add(
                        f"{self.name}.{unit.task}",
                        unit.task,
                        "TaskGroup",
                        templateName=unit.template,
                        boundaryID=root["id"],
                        phase=str(unit.phase),
                    )
                    groups[unit.task] = group
                group.setdefault("children", []).append(node["id"])
        for unit in units:
            upstream = [u for u in unit.upstream or [] if u in ids]
            mine = ids[unit.name]
            if unit.item_index is not None:
                mine = groups[unit.task]["id"]
            if not upstream and mine not in root.setdefault("children", []):
                root["children"].append(mine)
            for name in upstream:
                parent = self.nodes[ids[name]]
                if mine not in parent.setdefault("children", []):
                    parent["children"].append(mine)
        for group in groups.values():
            phases = {self.nodes[c]["phase"] for c in group["children"]}
            group["phase"] = _group_phase(phases)

    def steps(self, root: dict[str, Any], units: list[UnitRun]) -> None:
        level: dict[str, int] = {}
        for unit in units:  # in order: a step's upstream is the group before it
            level[unit.name] = 1 + max((level.get(u, 0) for u in unit.upstream or []), default=-1)
        groups: list[dict[str, Any]] = []
        for g in range(max(level.values(), default=-1) + 1):
            members = [u for u in units if level[u.name] == g]
            group = self.add(
                f"{self.name}[{g}]",
                f"[{g}]",
                "StepGroup",
                templateName=self.entrypoint,
                boundaryID=root["id"],
                phase=_group_phase({str(u.phase) for u in members}),
            )
            for unit in members:
                node = self.unit_node(unit, f"{self.name}[{g}].{unit.name}", unit.name, root["id"])
                group.setdefault("children", []).append(node["id"])
            groups.append(group)
        if groups:
            root["children"] = [groups[0]["id"]]
        for before, after in itertools.pairwise(groups):
            for child in before.get("children", []):
                self.nodes[child]["children"] = [after["id"]]


def _group_phase(phases: set[str]) -> str:
    if not phases:
        return "Pending"
    for phase in ("Running", "Error", "Failed", "Pending"):
        if phase in phases:
            return phase
    return "Succeeded" if "Succeeded" in phases else sorted(phases)[0]
