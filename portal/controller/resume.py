"""Resuming a suspended step, as Argo's ``ResumeWorkflow`` (``workflow/util/util.go``) does:
clear ``spec.suspend``, and mark every active Suspend node Succeeded (nodes read from
``status.nodes`` or, for a large workflow, ``status.compressedNodes``, and written back as
they came).

``spec.suspend`` is cleared on karmada-apiserver, which propagates the spec to the member.
Node status is the member controller's, and Karmada does not propagate status downwards, so
the suspended nodes are marked on the member's Workflow through Karmada's cluster proxy (when
Karmada has no path to the site, e.g. a pull-mode site registered without an impersonator
secret, the event says to resume it there)."""

from __future__ import annotations

import base64
import gzip
import json
import logging
from datetime import UTC, datetime
from typing import Any

from portal.controller.common import event
from portal.karmada import client, errors, proxy, resources
from portal.karmada.node_status import NodeStatusUnreadable, nodes_of
from portal.models import UnitRun

log = logging.getLogger(__name__)

MAX_CONFLICTS = 5


def _hydrate(wf: dict[str, Any]) -> bool:
    """The member Workflow's nodes into ``status.nodes``, as Argo's hydrator does before it
    changes them (``packer.DecompressWorkflow``: ``compressedNodes`` is base64 of gzipped
    JSON). True when they came compressed, so ``_dehydrate`` writes them back that way.
    Raises ``NodeStatusUnreadable`` for nodes offloaded to the member's database."""
    status = wf.get("status") or {}
    compressed = not (isinstance(status.get("nodes"), dict) and status["nodes"]) and bool(
        status.get("compressedNodes")
    )
    nodes = nodes_of(status)
    if compressed:
        status["nodes"] = nodes
        status.pop("compressedNodes", None)
    return compressed


def _dehydrate(wf: dict[str, Any]) -> None:
    """``packer.compressWorkflow``: the nodes back into ``compressedNodes``."""
    status = wf["status"]
    raw = json.dumps(status.pop("nodes"), separators=(",", ":")).encode()
    status["compressedNodes"] = base64.b64encode(gzip.compress(raw)).decode()


def _active_suspend_nodes(wf: dict[str, Any]) -> list[str]:
    nodes = (wf.get("status") or {}).get("nodes") or {}
    return [
        node_id
        for node_id, node in nodes.items()
        if isinstance(node, dict)
        and node.get("type") == "Suspend"
        and node.get("phase") == "Running"
    ]


def unit_resume(unit: UnitRun, *, by: str) -> bool:
    """Resume the unit's step workflow. True when something was resumed."""
    name = unit.workflow_name
    if not name:
        return False
    client.patch(resources.WORKFLOW, name, {"spec": {"suspend": None}})
    resumed = 0
    if unit.site:
        ns = client.namespace()
        for _ in range(MAX_CONFLICTS):
            try:
                wf = proxy.member_workflow_get(unit.site, ns, name)
            except errors.KarmadaError as exc:
                _partial(unit, exc)
                return True
            try:
                compressed = _hydrate(wf)
            except NodeStatusUnreadable as exc:
                event(
                    unit.run_id,
                    "resume-partial",
                    f"{unit.name}: spec.suspend cleared; suspended nodes at {unit.site} not "
                    f"readable ({exc}); resume them on the site",
                    unit,
                )
                return True
            active = _active_suspend_nodes(wf)
            if not active:
                break
            now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            for node_id in active:
                node = wf["status"]["nodes"][node_id]
                message = f"Resumed by: {by}"
                node["phase"] = "Succeeded"
                node["message"] = (
                    f"{node['message']}; {message}" if node.get("message") else message
                )
                node["finishedAt"] = now
            if compressed:
                _dehydrate(wf)
            try:
                proxy.member_workflow_replace(unit.site, ns, name, wf)
            except errors.Conflict:
                continue
            except errors.Forbidden as exc:  # the read was granted, the write is not
                _partial(unit, exc)
                return True
            resumed = len(active)
            break
    event(
        unit.run_id,
        "resumed",
        f"{unit.name}: resumed by {by}" + (f" ({resumed} suspended node(s))" if resumed else ""),
        unit,
    )
    return True


def unit_resume_by_id(unit_id: int, *, by: str) -> bool:
    """``unit_resume`` of the unit with this id; False when it is gone."""
    unit = UnitRun.objects.filter(pk=unit_id).first()
    return unit is not None and unit_resume(unit, by=by)


def _partial(unit: UnitRun, exc: errors.KarmadaError) -> None:
    event(
        unit.run_id,
        "resume-partial",
        f"{unit.name}: spec.suspend cleared; suspended nodes at {unit.site} not "
        f"reachable through Karmada ({exc.message}); resume them on the site",
        unit,
    )
