"""Runs with their units and decisions for the dashboard tests, made with the factories, and
the demo workflow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from placement.models import PlacementRule
from portal.choices import RunStatus, UnitPhase
from portal.models import PlacementDecision, RunEvent, UnitRun, WorkflowRun
from sites.models import Project
from tests.factories import PlacementDecisionFactory, UnitRunFactory, WorkflowRunFactory

REPO = Path(__file__).resolve().parents[2]
EO_PIPELINE = REPO / "examples" / "eo-pipeline.yaml"

# A step reading an input artifact that only site-c (the demo fleet's GPUs) can run.
READ_ON_GPU: dict[str, Any] = {
    "inputs": {"artifacts": [{"name": "data", "path": "/tmp/in.txt"}]},
    "container": {
        "image": "alpine:3.23",
        "command": ["cat", "/tmp/in.txt"],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    },
}


def pin(task: str, site: str, prefix: str = "test-pin") -> None:
    """A submit-time rule pinning the units of ``task`` to ``site`` (named ``prefix-task``)."""
    PlacementRule.objects.update_or_create(
        name=f"{prefix}-{task}",
        defaults={
            "order": 1,
            "selector": {"task": task},
            "timing": "submit",
            "effect": "pin",
            "parameters": {"sites": [site]},
        },
    )


# A decision's table: the chosen site first, then one it ruled out.
CHOSEN: dict[str, Any] = {
    "eligible": True,
    "why": "holds the data",
    "score": 0.9,
    "bytes_to_move": 0,
    "est_transfer_s": 0.0,
}
RULED_OUT = {
    "site": "site-z",
    "eligible": False,
    "why": "cordoned",
    "score": None,
    "bytes_to_move": 5 * 2**30,
    "est_transfer_s": 42.0,
}


def make_run(
    owner: Any,
    *,
    project: Project | None = None,
    status: str = RunStatus.RUNNING,
    units: list[tuple[str, str, str, list[str]]] | None = None,
    decisions: bool = True,
    name: str | None = None,
) -> WorkflowRun:
    """A run with ``units`` as ``(name, site, phase, upstream)``; by default the demo's three
    units, ingest done at site-a, preprocess running at site-b, inference pending at site-c."""
    run = WorkflowRunFactory(
        owner=owner, project=project, status=status, **({"name": name} if name else {})
    )
    if units is None:
        units = [
            ("ingest", "site-a", UnitPhase.SUCCEEDED, []),
            ("preprocess", "site-b", UnitPhase.RUNNING, ["ingest"]),
            ("inference", "site-c", UnitPhase.PENDING, ["preprocess"]),
        ]
    # Built, then stored in one statement: the large-run tests make thousands.
    rows = [
        UnitRunFactory.build(
            run=run,
            name=unit,
            position=i,
            upstream=upstream,
            planned_site=site,
            phase=phase,
            later_by=i % 50,
        )
        for i, (unit, site, phase, upstream) in enumerate(units)
    ]
    UnitRun.objects.bulk_create(rows)
    if decisions:
        by_name = {u.name: u for u in run.units.all()}
        PlacementDecision.objects.bulk_create(
            [
                PlacementDecisionFactory.build(
                    unit=by_name[unit],
                    candidates=[{"site": site, **CHOSEN}, RULED_OUT],
                )
                for unit, site, _, _ in units
            ]
        )
    return run


def chain_units(n: int, width: int = 40) -> list[tuple[str, str, str, list[str]]]:
    """``n`` units in layers of ``width``, each depending on one unit of the previous layer."""
    sites = ["site-a", "site-b", "site-c"]
    out = []
    for i in range(n):
        up = [f"u{i - width:05d}"] if i >= width else []
        phase = UnitPhase.SUCCEEDED if i < n // 2 else UnitPhase.RUNNING
        out.append((f"u{i:05d}", sites[i % 3], phase, up))
    return out


# The reading step of the cross-site artifact tests: prints the file it was given.
READ_DATA = {
    "inputs": {"artifacts": [{"name": "data", "path": "/tmp/in.txt"}]},
    "container": {"image": "alpine:3.23", "command": ["cat", "/tmp/in.txt"]},
}


def write_then_read(
    write: dict[str, Any], read: dict[str, Any] | None = None, *, generate_name: str = "across-"
) -> str:
    """A two-task DAG: ``write`` (its template, without a name) makes the output artifact
    ``data``, and ``read`` (``READ_DATA`` unless given) takes it ``from`` write's output."""
    take = {"name": "data", "from": "{{tasks.write.outputs.artifacts.data}}"}
    tasks = [
        {"name": "write", "template": "write"},
        {
            "name": "read",
            "template": "read",
            "depends": "write",
            "arguments": {"artifacts": [take]},
        },
    ]
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": generate_name},
            "spec": {
                "entrypoint": "main",
                "templates": [
                    {"name": "main", "dag": {"tasks": tasks}},
                    {"name": "write", **write},
                    {"name": "read", **(read or READ_DATA)},
                ],
            },
        },
        allow_unicode=True,
    )


FAN_SITES = ("site-a", "site-b", "site-c")


def fan_out_run(owner: Any, units: int) -> WorkflowRun:
    """``units`` units as the parser stores a fan-out: a generator, the items of one looped
    task (a third done, a third running, a third pending, over three sites), and a join."""
    run = WorkflowRunFactory(owner=owner, status="Running")
    items = units - 2
    names = [f"fan({i}:{i})" for i in range(items)]
    phases = ("Succeeded", "Running", "Pending")
    rows = [UnitRunFactory.build(run=run, name="gen", position=0, phase="Succeeded")]
    rows += [
        UnitRunFactory.build(
            run=run,
            name=name,
            position=i + 1,
            upstream=["gen"],
            planned_site=FAN_SITES[i % 3],
            site=FAN_SITES[i % 3] if i % 3 != 2 else "",
            phase=phases[i * 3 // items],
            spec={"task": "fan", "item_index": i, "template": "work"},
        )
        for i, name in enumerate(names)
    ]
    rows.append(UnitRunFactory.build(run=run, name="join", position=items + 1, upstream=names))
    UnitRun.objects.bulk_create(rows, batch_size=2000)
    events = [
        RunEvent(run=run, unit=None, kind="unit-phase", message=f"{n}: Pending → Running")
        for n in names
    ]
    RunEvent.objects.bulk_create(events, batch_size=2000)
    return run


FAN_OUT_CPU = 8000  # millicores per item


def fan_out(items: int, seconds: int = 0) -> str:
    """A run of ``items`` items of 8 CPU under the task name the demo's runtime rule
    (``preprocess*``) leaves to the webhook; ``seconds``: how long each runs in the sandbox."""
    work: dict[str, Any] = {
        "name": "work",
        "inputs": {"parameters": [{"name": "i"}]},
        "container": {
            "image": "busybox",
            "command": ["true"],
            "resources": {"requests": {"cpu": "8", "memory": "1Gi"}},
        },
    }
    if seconds:
        duration = {"portal.multisite.io/sandbox-duration": f"{seconds}s"}
        work["metadata"] = {"annotations": duration}
    task = {
        "name": "preprocess",
        "template": "work",
        "arguments": {"parameters": [{"name": "i", "value": "{{item}}"}]},
        "withItems": list(range(items)),
    }
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "burst-"},
            "spec": {
                "entrypoint": "main",
                "templates": [{"name": "main", "dag": {"tasks": [task]}}, work],
            },
        }
    )


def cluster_of(site: Any, *, allocated: int = 0, labels: dict[str, str] | None = None) -> Any:
    """The Karmada Cluster of ``site`` as its member posts it: Ready, its figures, and
    ``allocated`` millicores of CPU in use."""
    return {
        "metadata": {"name": site.name, "labels": labels or {}},
        "spec": {"region": site.region, "provider": site.provider},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "resourceSummary": {
                "allocatable": {
                    "cpu": f"{site.cpu_allocatable}m",
                    "memory": str(site.memory_allocatable),
                    "pods": str(site.pods_allocatable),
                    "nvidia.com/gpu": str(site.gpu_allocatable),
                },
                "allocated": {
                    "cpu": f"{allocated}m",
                    "memory": str(site.memory_allocated),
                    "pods": str(site.pods_allocated),
                    "nvidia.com/gpu": str(site.gpu_allocated),
                },
            },
        },
    }
