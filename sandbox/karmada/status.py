"""Karmada's status controllers for Workflows (`pkg/controllers/status/work_status_controller.go`,
`rb_status_controller.go`, `common.go`): the member's whole `.status` goes to the Work's
`manifestStatuses` and the binding's `aggregatedStatus`. Writing it back to the Workflow
needs a `statusAggregation` interpreter and a status subresource; Argo's CRD has none, so with
such a customization each attempt fails with 404 and an `AggregateStatusFailed` Event on the
Workflow; without one nothing is attempted."""

from __future__ import annotations

from typing import Any

from sandbox.argo.member import Member
from sandbox.argo.workflow import WorkflowRun
from sandbox.karmada.clusters import execution_namespace
from sandbox.karmada.events import Events
from sandbox.karmada.works import Key, condition, key_of, set_condition, work_name
from sandbox.resources import INTERPRETER_CUSTOMIZATION, RESOURCE_BINDING, WORK, WORKFLOW
from sandbox.store import Obj, Store, clone


class WorkflowStatus:
    def __init__(self, store: Store, events: Events) -> None:
        self.store = store
        self.events = events
        # (cluster, namespace, name) -> (run, status version) last reflected into the Work.
        self.reflected: dict[tuple[str, str, str], tuple[str, int]] = {}

    def reset(self) -> None:
        self.reflected.clear()

    def forget(self, cluster: str, key: Key) -> None:
        """The member's copy is gone: its next copy is reflected afresh."""
        self.reflected.pop((cluster, *key), None)

    def reflect_work(self, member: Member, key: Key, work: Obj, frozen: set[str]) -> None:
        """The member's status of the Workflow into its Work's `manifestStatuses`, unless the
        cluster is frozen (unreachable or not Ready) or nothing changed since."""
        run: WorkflowRun | None = member.runs.get(key)
        if run is None or member.name in frozen:
            return
        stamp = (run.state.uid, run.state.version)
        if self.reflected.get((member.name, *key)) == stamp:
            return
        status = run.state.render_status()
        phase = status.get("phase")
        new = clone(work)
        new.setdefault("status", {})["manifestStatuses"] = [
            {
                "identifier": {
                    "ordinal": 0,
                    "group": WORKFLOW.group,
                    "version": WORKFLOW.version,
                    "kind": WORKFLOW.kind,
                    "resource": WORKFLOW.plural,
                    "namespace": key[0],
                    "name": key[1],
                },
                "status": status,
                # The shipped Workflow interpreter's InterpretHealth.
                "health": "Unhealthy" if not phase or phase in ("Error", "Failed") else "Healthy",
            }
        ]
        self.store.update(WORK, new, subresource="status", validate=False, check_rv=False)
        self.reflected[(member.name, *key)] = stamp

    def aggregate(self, wf: Obj, rb: Obj, targets: list[str]) -> None:
        items = []
        for cluster in targets:
            work = self.store.find(WORK, execution_namespace(cluster), work_name(*key_of(wf)))
            wstatus = (work or {}).get("status") or {}
            ms = (wstatus.get("manifestStatuses") or [{}])[0]
            item: dict[str, Any] = {"clusterName": cluster}
            work_applied = condition(wstatus, "Applied")
            if work_applied is None or work_applied.get("status") != "True":
                # assembleWorkStatus (`pkg/util/helper/workstatus.go`): a Work not applied
                # gives only its Applied message, and health Unknown.
                if work_applied is not None and work_applied.get("message"):
                    item["appliedMessage"] = work_applied["message"]
                item["health"] = "Unknown"
                items.append(item)
                continue
            item["applied"] = True
            if ms.get("status") is not None:
                item["status"] = ms["status"]
            if ms.get("health"):
                item["health"] = ms["health"]
            items.append(item)
        status = rb.get("status") or {}
        if status.get("aggregatedStatus") == items:
            return
        new = clone(rb)
        nstatus = new.setdefault("status", {})
        nstatus["aggregatedStatus"] = items
        applied = all(i.get("applied") for i in items)
        set_condition(
            nstatus,
            {
                "type": "FullyApplied",
                "status": "True" if applied else "False",
                "reason": "FullyAppliedSuccess" if applied else "FullyAppliedFailed",
                "message": "All works have been successfully applied"
                if applied
                else "Failed to apply all works, see status.aggregatedStatus for details",
            },
        )
        self.store.update(RESOURCE_BINDING, new, subresource="all", validate=False, check_rv=False)
        if any("status" in i for i in items) and self._aggregation_hook():
            # updateResourceStatus: UpdateStatus on a CRD without the status subresource.
            self.events.record(
                wf,
                "Warning",
                "AggregateStatusFailed",
                "the server could not find the requested resource",
                "resource-binding-status-controller",
            )

    def _aggregation_hook(self) -> bool:
        for ric in self.store.all(INTERPRETER_CUSTOMIZATION):
            spec = ric.get("spec") or {}
            target = spec.get("target") or {}
            if (
                target.get("apiVersion") == WORKFLOW.api_version
                and target.get("kind") == WORKFLOW.kind
                and (spec.get("customizations") or {}).get("statusAggregation")
            ):
                return True
        return False
