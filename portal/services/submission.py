"""Submitting a run: the plan preview (stores nothing) and the submission, which stores the
run, its units and its submission-time decisions in one transaction and starts it."""

from __future__ import annotations

import dataclasses
import json
import logging
import secrets
from collections.abc import Iterator
from typing import Any

from django.db import IntegrityError, transaction

from placement import codec, manifests, planner
from placement.gcpause import gc_paused
from placement.parser import FieldError, FieldWarning, ParsedWorkflow, WorkflowInvalid
from placement.planner import relays
from placement.revisions.replay import new_planning_record
from portal import bulk, stored_decisions
from portal.models import BULK_ROWS, RunEvent, UnitRun, WorkflowRun
from portal.planning import held_by, holds_changed, planner_snapshot
from portal.quotas import budgets
from portal.quotas import priorities as quota_priorities
from portal.quotas import usage as quota_usage
from portal.quotas.admission import Amount
from portal.quotas.models import PriorityClass
from portal.services.parsing import project_for, workflow_parse
from portal.submission_limits import submission_count
from sites.models import Project

log = logging.getLogger(__name__)


def _plan_from(
    parsed: ParsedWorkflow, project: Project | None
) -> tuple[planner.Plan, planner.Fleet, planner.DataCatalogue]:
    """The plan, with the fleet and datasets it was made from (recorded for replay)."""
    view = planner_snapshot()
    plan = planner.plan(
        parsed, view.fleet, view.rules, view.datasets, project=project.name if project else None
    )
    return plan, view.fleet, view.datasets


def workflow_preview(
    *,
    user: Any,
    body: str | bytes | dict[str, Any],
    project: Project | str | None = None,
    arguments: dict[str, str] | None = None,
    top: int | None = None,
    unit: str | None = None,
    loops: bool = False,
) -> dict[str, Any]:
    """The plan for every unit, stores nothing (``POST /api/v1/runs/preview/``): each with
    its ``top`` best candidates (None: the full table), or ``unit`` alone with its full table
    (``units`` is then empty when no unit has that name). ``loops`` adds each unit's ``task``
    and ``item_index``, with which the submit page groups a fan-out as the run page does."""
    proj = project_for(user, project)
    parsed = workflow_parse(body=body, arguments=arguments, project=proj)
    plan, fleet, _ = _plan_from(parsed, proj)
    warnings = [w.as_dict() for w in parsed.warnings]
    # What submission would refuse (a residency-bound input needed where it may not go).
    warnings += [
        {"path": f"units.{d.unit}", "message": f"no site can run it: {d.reason}"}
        for d in plan.decisions
        if d.timing == "submit" and d.site is None
    ]
    planned = _planned_transfers(parsed, plan, fleet)
    pods = {u.name: u.pods for u in parsed.units}
    looped = {u.name: (u.task, u.item_index) for u in parsed.units} if loops else {}
    guess = _estimate(proj, parsed, plan, planned)
    estimate = {
        "compute": quota_usage.money(guess.compute),
        "transfer": quota_usage.money(guess.transfer),
        "total": quota_usage.money(guess.total),
        "currency": quota_usage.currency(),
        "steps_without_history": guess.unknown,
    }
    if unit is not None:
        rows = [d.as_dict() for d in plan.decisions if d.unit == unit]
    else:
        rows = plan.as_dict(top)["units"]
    for row in rows:
        # What the unit's step workflow can create at its site (its nested loops multiplied).
        row["pods"] = pods.get(row["name"])
        if loops:
            row["task"], row["item_index"] = looped.get(row["name"], (row["name"], None))
    return {"units": rows, "warnings": warnings, "estimate": estimate, "transfers": planned}


NAME_ATTEMPTS = 8


def _run_names(parsed: ParsedWorkflow) -> Iterator[str]:
    """Names to try for a new run: ``metadata.name`` as given, then ``<base>-<6 hex>``.

    Not checked beforehand: the unique constraint decides, and ``run_submit`` tries the next
    name when the insert collides (one query fewer per submission, and no race between a check
    and the insert)."""
    base = (parsed.name or (parsed.generate_name or "workflow")).rstrip("-")[:40].rstrip("-")
    if parsed.name:
        yield base
    for _ in range(NAME_ATTEMPTS):
        yield f"{base}-{secrets.token_hex(3)}"


def _compiled(parsed: ParsedWorkflow) -> dict[str, Any]:
    """What later steps need to build step workflows (see ``execution.parsed_of``)."""
    # JSON round trip: templates may hold values YAML typed in ways JSON does not keep.
    return json.loads(
        json.dumps(
            {
                "name": parsed.name,
                "generate_name": parsed.generate_name,
                "namespace": parsed.namespace,
                "templates": dict(parsed.templates),
                "template_scopes": dict(parsed.template_scopes),
                "arguments": codec.arguments_to_dict(parsed.arguments),
                "parameters": parsed.workflow_parameters(),
                "entrypoint": parsed.entrypoint,
                "on_exit": parsed.on_exit,
                "labels": dict(parsed.labels),
                "annotations": dict(parsed.annotations),
                "spec": dict(parsed.spec),
                # Its step workflows are kept until the run ends (``execution.lifecycle``).
                "artifact_gc": manifests.has_artifact_gc(parsed.spec, parsed.templates),
            },
            default=str,
        )
    )


def run_submit(
    *,
    user: Any,
    body: str | bytes | dict[str, Any],
    project: Project | str | None = None,
    arguments: dict[str, str] | None = None,
    resubmitted_from: WorkflowRun | None = None,
    priority_class: str | None = None,
) -> WorkflowRun:
    """Store the run, its units and its submission-time decisions in one transaction, and
    start it once committed. A unit that no site can take refuses the whole submission.
    ``priority_class``: the name of the class ordering its units in the quota queue (default:
    its project's)."""
    with gc_paused():
        return _submit(
            user=user,
            body=body,
            project=project,
            arguments=arguments,
            resubmitted_from=resubmitted_from,
            priority_class=priority_class,
        )


def _submit(
    *,
    user: Any,
    body: str | bytes | dict[str, Any],
    project: Project | str | None,
    arguments: dict[str, str] | None,
    resubmitted_from: WorkflowRun | None,
    priority_class: str | None = None,
) -> WorkflowRun:
    proj = project_for(user, project)
    priority = _priority_class(proj, priority_class)
    submission_count(user=user, project=proj)  # before any parsing: that is what it bounds
    parsed = workflow_parse(body=body, arguments=arguments, project=proj)
    plan, fleet, datasets = _plan_from(parsed, proj)
    unplaceable = [d for d in plan.decisions if d.timing == "submit" and d.site is None]
    if unplaceable:
        raise WorkflowInvalid(
            [FieldError(f"units.{d.unit}", f"no site can run it: {d.reason}") for d in unplaceable]
        )
    parsed = _within_budget(proj, parsed, plan, fleet)
    # The document as parsed (arguments applied): what runs is what is stored.
    manifest = dict(parsed.document)
    compiled = _compiled(parsed)
    if priority is not None:
        compiled["priority_class"] = {"name": priority.name, "value": priority.value}
    for name in _run_names(parsed):
        try:
            return _store_run(
                name=name,
                user=user,
                project=proj,
                manifest=manifest,
                compiled=compiled,
                arguments=arguments or {},
                parsed=parsed,
                plan=plan,
                planned_from=(fleet, datasets),
                resubmitted_from=resubmitted_from,
            )
        except IntegrityError as exc:
            if not _is_name_clash(exc):
                raise
    raise WorkflowInvalid([FieldError("metadata.name", "no free run name; try again")])


def _estimate(
    project: Project | None,
    parsed: ParsedWorkflow,
    plan: planner.Plan,
    transfers: list[dict[str, Any]],
) -> budgets.Estimate:
    """What the run is expected to cost: its compute from the project's history,
    and the copies its plan implies (``relays.planned``)."""
    sites = {d.unit: d.site or "" for d in plan.decisions}
    return budgets.estimate(
        project,
        (
            (
                u.template,
                Amount(u.resources.cpu_millicores, u.resources.memory_bytes, u.resources.gpus),
                sites.get(u.name, ""),
            )
            for u in parsed.units
        ),
        ((str(t["from"]), str(t["via"]), int(t["bytes"])) for t in transfers),
    )


def _planned_transfers(
    parsed: ParsedWorkflow, plan: planner.Plan, fleet: planner.Fleet
) -> list[dict[str, Any]]:
    """The copies the plan implies: a unit placed where it cannot read what it reads."""
    return relays.planned(
        plan.decisions,
        {u.name: u.upstream for u in parsed.units},
        fleet,
        {u.name: u.output_bytes for u in parsed.units},
    )


def _within_budget(
    project: Project | None, parsed: ParsedWorkflow, plan: planner.Plan, fleet: planner.Fleet
) -> ParsedWorkflow:
    """The project's monthly budget: past 80 % the run carries a warning (an event);
    with a hard stop, a submission whose estimate exceeds what is left is refused with it."""
    standing = budgets.standing(project)
    if standing is None or project is None:
        return parsed
    guess = _estimate(project, parsed, plan, _planned_transfers(parsed, plan, fleet))
    cur = quota_usage.currency()
    said = (
        f"{project.name} has spent {quota_usage.money(standing.spent)} of its "
        f"{quota_usage.money(standing.monthly)} {cur} budget this month; this run's estimate is "
        f"{quota_usage.money(guess.total)} {cur}"
        + (f" ({guess.unknown} steps without history not counted)" if guess.unknown else "")
    )
    if standing.hard_stop and (standing.left <= 0 or guess.total > standing.left):
        raise WorkflowInvalid([FieldError("project", f"over budget: {said}")])
    if standing.warn or guess.total > standing.left:
        return dataclasses.replace(
            parsed, warnings=(*parsed.warnings, FieldWarning("project", f"budget: {said}"))
        )
    return parsed


def _priority_class(project: Project | None, name: Any) -> PriorityClass | None:
    """The priority class a submission asks for (else its project's default), or a 400."""
    if name is not None and not isinstance(name, str):
        raise WorkflowInvalid([FieldError("priority_class", "must be a priority class's name")])
    try:
        return quota_priorities.priority_for(project, name)
    except PriorityClass.DoesNotExist:
        known = ", ".join(PriorityClass.objects.values_list("name", flat=True)) or "none"
        raise WorkflowInvalid(
            [FieldError("priority_class", f"no priority class {name!r} (known: {known})")]
        ) from None


def _is_name_clash(exc: IntegrityError) -> bool:
    """The run name's unique constraint, and not some other integrity failure."""
    cause = exc.__cause__
    diag = getattr(cause, "diag", None)
    constraint = getattr(diag, "constraint_name", None) or ""
    text = f"{constraint} {exc}"
    return "portal_workflowrun_name" in text or "portal_workflowrun.name" in text


def _store_run(
    *,
    name: str,
    user: Any,
    project: Project | None,
    manifest: dict[str, Any],
    compiled: dict[str, Any],
    arguments: dict[str, str],
    parsed: ParsedWorkflow,
    plan: planner.Plan,
    planned_from: tuple[planner.Fleet, planner.DataCatalogue],
    resubmitted_from: WorkflowRun | None,
) -> WorkflowRun:
    """One transaction: the run, its units, its submission decisions and the first event; the
    run is enqueued once committed. The returned run carries its units (no re-read)."""
    with transaction.atomic():
        run = WorkflowRun.objects.create(
            name=name,
            project=project,
            owner=user,
            manifest=manifest,
            arguments=arguments,
            compiled=compiled,
            resubmitted_from=resubmitted_from,
        )
        decisions = plan.by_unit()
        rows = [
            UnitRun.plan_row(run.pk, unit, decisions[unit.name], position=position)
            for position, unit in enumerate(parsed.units)
        ]
        units = bulk.create_rows(UnitRun, UnitRun.PLAN_COLUMNS, rows, batch_size=BULK_ROWS)
        if any(u.pk is None for u in units):  # a backend that cannot return bulk-insert ids
            units = list(UnitRun.objects.filter(run=run).order_by("position", "id"))
        by_name = {u.name: u for u in units}
        holds_changed({}, held_by(units))
        stored_decisions.store_submitted(run, by_name, plan)
        bulk.insert_big(
            new_planning_record(
                run_id=run.pk,
                project=project.name if project else None,
                units=parsed.units,
                fleet=planned_from[0],
                datasets=planned_from[1],
                unit_docs=[u.spec for u in units],
            )
        )
        _submitted_events(run, user, len(units), parsed)
        transaction.on_commit(lambda: enqueue_advance(run.pk))
    # The units as stored, for an answer built without reading them again (``with_units``).
    run.stored_units = units  # type: ignore[attr-defined]
    return run


def _submitted_events(run: WorkflowRun, user: Any, units: int, parsed: ParsedWorkflow) -> None:
    """The run's first event, and what the preview warned of, field path and all."""
    RunEvent.objects.create(
        run=run, kind="submitted", message=f"Submitted by {user.get_username()}: {units} units"
    )
    RunEvent.objects.bulk_create(
        [
            RunEvent(run=run, kind="warning", message=f"{w.path}: {w.message}", data=w.as_dict())
            for w in parsed.warnings
        ]
    )


def with_units(run: WorkflowRun) -> WorkflowRun | None:
    """The run just submitted, with ``run.units`` answering from the units it stored, as
    ``prefetch_related("units")`` would (a queryset holding its results, built the way
    Django's prefetch builds it); None when the run does not carry them.

    For the submitting view's answer only: a prefetch is a snapshot, and code that later
    changes the units would read stale rows from it, so ``run_submit`` does not set it."""
    units = getattr(run, "stored_units", None)
    if units is None:
        return None
    prefetched = UnitRun.objects.filter(run=run).order_by("position", "id")
    prefetched._result_cache = units
    prefetched._prefetch_done = True  # type: ignore[attr-defined]
    run._prefetched_objects_cache = {"units": prefetched}  # type: ignore[attr-defined]
    return run


def enqueue_advance(run_id: int) -> None:
    from portal.controller import workqueue

    try:
        workqueue.add(run_id)
    except Exception:  # noqa: BLE001 - broker down: the periodic resync picks the run up
        log.warning("could not enqueue run %s; the resync will start it", run_id, exc_info=True)
