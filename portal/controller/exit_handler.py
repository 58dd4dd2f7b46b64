"""The run's exit handler (Argo's ``onExit`` and workflow-level ``hooks.exit``): one more unit
once every unit has ended, with ``{{workflow.status}}`` set to how the run went."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from placement import codec, parser, planner
from placement.parser import Unit
from portal import state
from portal.choices import (
    FINAL_UNIT,
    DecisionSource,
    RunStatus,
    UnitKind,
    UnitPhase,
    UnitTiming,
)
from portal.controller import gates, outcome
from portal.controller.common import event, units_of, upstream_where
from portal.controller.submit import submit_units
from portal.models import PlacementDecision, UnitRun, WorkflowRun
from portal.planning import planner_snapshot
from portal.selectors import upstream_outputs

EXIT_UNIT = "onExit"


def exit_pending(run: WorkflowRun, units: list[UnitRun]) -> bool:
    """The run has an exit handler that has not been created yet."""
    return bool(run.compiled.get("on_exit")) and not any(u.kind == UnitKind.EXIT for u in units)


def _exit_arguments(spec: Mapping[str, Any]) -> parser.Arguments:
    """A workflow-level exit hook's own arguments (``LifecycleHook.WithArgs`` in Argo's
    `pkg/apis/workflow/v1alpha1/workflow_types.go`: the hook's, else the workflow's, which
    every step workflow carries anyway); ``onExit`` has none of its own."""
    hooks = spec.get("hooks")
    hook = hooks.get("exit") if isinstance(hooks, Mapping) and not spec.get("onExit") else None
    return parser.parse_arguments(hook.get("arguments") if isinstance(hook, Mapping) else None)


def create_exit_unit(
    run: WorkflowRun, units: list[UnitRun], status: str | None = None
) -> UnitRun | None:
    """Argo's ``onExit``: once every unit has ended, one more step workflow runs the exit
    template with ``{{workflow.status}}`` set to how the run went (``status`` if given)."""
    key = str(run.compiled["on_exit"])
    status = status or outcome.decide(run, units).status
    unit = Unit(
        name=EXIT_UNIT,
        slug="onexit",
        kind="workflow",
        task=EXIT_UNIT,
        template=key,
        # Every template: the exit handler may call any of them, Argo ignores the rest.
        templates=(key, *[k for k in run.compiled.get("templates", {}) if k != key]),
        upstream=(),
        depends="",
        when=None,
        arguments=_exit_arguments(run.compiled.get("spec") or {}),
        labels={},
        images=(),
        resources=parser.Resources(),
        datasets=(),
        data_refs=(),
    )
    view = planner_snapshot()
    decision = planner.decide(
        unit,
        view.fleet,
        view.rules,
        view.datasets,
        project=run.project.name if run.project else None,
        upstream_sites=upstream_where(units),
        timing="submit",
    )
    spec = {**codec.unit_to_dict(unit), "kind": UnitKind.EXIT.value, "workflow_status": status}
    row, created = UnitRun.objects.get_or_create(
        run=run,
        name=EXIT_UNIT,
        defaults={
            "slug": unit.slug,
            "template": key,
            "position": max((u.position for u in units), default=0) + 1,
            "timing": UnitTiming.SUBMIT,
            "site": decision.site or "",
            "planned_site": decision.site or "",
            "reason": f"exit handler: {decision.reason}",
            "spec": spec,
            "kind": UnitKind.EXIT,
        },
    )
    if created:
        PlacementDecision.from_plan(
            decision, reason=row.reason, run=run, unit=row, source=DecisionSource.RULE
        ).save()
        event(run.pk, "exit-handler", f"all units ended ({status}); running onExit", row)
        if decision.site is None:
            state.unit_move(row, UnitPhase.ERROR, message=f"no site can run it: {decision.reason}")
    return row


def exit_after_stop(run: WorkflowRun) -> None:
    """Argo's ``Stop`` runs the workflow's exit handler once the stopped steps have ended
    (``{{workflow.status}}`` Failed); ``Terminate`` does not."""
    if gates.shutdown_strategy(run) != "Stop" or not run.compiled.get("on_exit"):
        return
    units = units_of(run)
    if not all(u.phase in FINAL_UNIT for u in units if u.kind != UnitKind.EXIT):
        return
    exit_unit = next((u for u in units if u.kind == UnitKind.EXIT), None)
    if exit_unit is None:
        # A stopped workflow is Failed to Argo ("Stopped with strategy 'Stop'").
        exit_unit = create_exit_unit(run, units, status=RunStatus.FAILED)
    if exit_unit is None or exit_unit.phase != UnitPhase.PENDING or exit_unit.workflow_name:
        return
    submit_units(run, [exit_unit], [*units, exit_unit], None, upstream_outputs(units))
