"""withParam: a unit's loop expanded into one unit per item of its upstream output, each placed
and given its decision row as a submission's units are."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from placement import codec, manifests, parser, planner
from portal import state
from portal.choices import DecisionSource, UnitPhase, UnitTiming
from portal.controller.common import ancestors, event, upstream_where
from portal.models import BULK_ROWS, PlacementDecision, UnitRun, WorkflowRun
from portal.planning import held_by, holds_changed, planner_snapshot
from portal.selectors import upstream_outputs


def expand(run: WorkflowRun, unit: UnitRun, units: list[UnitRun]) -> list[UnitRun]:
    """withParam: one unit per item of the upstream output, created once (unique names)."""
    spec = codec.unit_from_dict(unit.spec)
    assert spec.with_param is not None
    try:
        items = _items(run, spec.with_param, units)
    except ValueError as exc:
        state.unit_move(unit, UnitPhase.ERROR, message=f"withParam: {exc}")
        return []
    children = parser.expand_with_param(spec, items)
    view = planner_snapshot()
    decisions = planner.plan(
        children,
        view.fleet,
        view.rules,
        view.datasets,
        project=run.project.name if run.project else None,
        upstream_sites=upstream_where(units),
        ancestors=ancestors(unit, units),  # residency of what they read binds the items
    ).by_unit()
    rows = [
        UnitRun.from_plan(run, child, decisions[child.name], position=unit.position)
        for child in children
    ]
    with transaction.atomic():
        if not UnitRun.objects.filter(pk=unit.pk, phase=UnitPhase.PENDING, expanded=False).exists():
            return []
        UnitRun.objects.bulk_create(rows, ignore_conflicts=True, batch_size=BULK_ROWS)
        holds_changed({}, held_by(rows))
        _item_decisions(run, decisions)
        unit.spec = {**unit.spec, "item_names": [c.name for c in children]}
        unit.expanded = bool(children)  # no item: a unit Skipped below, not a group
        state.units_move(
            UnitRun.objects.filter(pk=unit.pk),
            UnitPhase.RUNNING,
            from_=[UnitPhase.PENDING],
            spec=unit.spec,
            expanded=unit.expanded,
            started_at=timezone.now(),
        )
        unit.phase = UnitPhase.RUNNING
        event(run.pk, "unit-expanded", f"{unit.name}: withParam gave {len(children)} items", unit)
    if not children:
        state.unit_move(unit, UnitPhase.SKIPPED, message="withParam gave no items")
    return list(UnitRun.objects.filter(run=run, name__in=[c.name for c in children]))


def _items(run: WorkflowRun, with_param: str, units: list[UnitRun]) -> list[Any]:
    """The items ``withParam`` names, from the run's parameters and upstream outputs; a
    ValueError says why there are none to build."""
    missing: list[str] = []
    # An expression tag (``{{= ...}}``) is evaluated here too; its error is a ValueError.
    value = manifests.substitute(
        with_param,
        run.compiled.get("parameters") or {},
        # a skipped producer's declared defaults, as in its consumers' arguments
        manifests.with_skipped_defaults(
            upstream_outputs(units), run.compiled.get("templates") or {}
        ),
        missing=missing,
        inputs=entry_inputs(run),
    )
    if missing:
        raise ValueError(f"unresolved: {', '.join(missing)}")
    # Sized against the run's unit limit before a single unit is built.
    room = settings.PORTAL_MAX_UNITS - len(units)
    return parser.parse_with_param_value(value, max_items=room)


def entry_inputs(run: WorkflowRun) -> dict[str, str]:
    """The entrypoint's inputs (its defaults where the workflow has no argument of the name),
    for the expressions the worker evaluates."""
    compiled = run.compiled
    entry = (compiled.get("templates") or {}).get(compiled.get("entrypoint") or "") or {}
    return parser.entry_inputs(entry, compiled.get("parameters") or {})


def _item_decisions(run: WorkflowRun, decisions: Mapping[str, Any]) -> None:
    """Each withParam item its own decision row (its datasets, residency, candidate table),
    as a submission's units have."""
    items = UnitRun.objects.filter(run=run, name__in=list(decisions)).exclude(
        decisions__isnull=False
    )
    PlacementDecision.objects.bulk_create(
        [
            PlacementDecision.from_plan(
                decisions[item.name],
                run=run,
                unit=item,
                source=DecisionSource.RULE,
                timing=UnitTiming.SUBMIT,
            )
            for item in items
            if decisions[item.name].timing == "submit"
        ],
        batch_size=BULK_ROWS,
    )
