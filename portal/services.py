"""Writes for runs: preview, submit, stop, retry, resubmit (HackSoft style: keyword-only,
typed; views, serializers and tasks call these). Status and phase changes go through
``portal.state``, the one writer of run and unit state."""

from __future__ import annotations

import dataclasses
import json
import logging
import secrets
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from placement import codec, manifests, parser, planner
from placement.gcpause import gc_paused
from placement.parser import FieldError, FieldWarning, ParsedWorkflow, WorkflowInvalid
from placement.planner import relays
from placement.revisions.replay import planning_record
from portal import bulk, catalogue, state, stored_decisions
from portal.choices import RunStatus, UnitPhase, UnitTiming
from portal.models import (
    BULK_ROWS,
    RunEvent,
    UnitRun,
    WorkflowRun,
    WorkflowTemplate,
)
from portal.planning import held_by, holds_changed, planner_snapshot
from portal.quotas import budgets
from portal.quotas import priorities as quota_priorities
from portal.quotas import usage as quota_usage
from portal.quotas.admission import Amount
from portal.quotas.models import PriorityClass
from portal.selectors import projects_of
from portal.submission_limits import submission_count
from sites.models import DEFAULT_PRIORITY_RANGE, Project, priority_clamp

log = logging.getLogger(__name__)


class ActionRefused(Exception):
    """An action that the run's state does not allow (answered 409)."""


def parser_limits() -> parser.Limits:
    """The parser's bounds from the settings, for the API and the submit page (the webhook
    builds the same from the settings itself: it must not import this module)."""
    return parser.Limits(
        max_body_bytes=settings.PORTAL_MAX_BODY_BYTES,
        max_units=settings.PORTAL_MAX_UNITS,
        max_dependency_edges=settings.PORTAL_MAX_DEPENDENCY_EDGES,
        max_pods_per_unit=settings.PORTAL_MAX_PODS_PER_UNIT,
        unknown_loop_items=settings.PORTAL_UNKNOWN_LOOP_ITEMS,
    )


# -- the WorkflowTemplate catalogue (GET|POST /api/v1/workflow-templates/ ...) -------------
# Who writes what and what a run resolves: ``portal.catalogue``; these bind the parser's bounds.

CatalogueRefused = catalogue.CatalogueRefused


def workflow_template_create(
    *, user: Any, body: str | bytes | dict[str, Any], project: Project | str | None = None
) -> WorkflowTemplate:
    """Add a WorkflowTemplate (or, for fleet staff, a ClusterWorkflowTemplate) to the
    catalogue of ``project`` (None: fleet-wide)."""
    return catalogue.workflow_template_create(
        user=user, body=body, project=project, limits=parser_limits()
    )


def workflow_template_update(
    *,
    template: WorkflowTemplate,
    user: Any,
    body: str | bytes | dict[str, Any],
    project: Project | str | None = None,
) -> WorkflowTemplate:
    return catalogue.workflow_template_update(
        template=template, user=user, body=body, project=project, limits=parser_limits()
    )


def workflow_template_delete(*, template: WorkflowTemplate, user: Any) -> None:
    catalogue.workflow_template_delete(template=template, user=user)


def _apply_arguments(doc: dict[str, Any], arguments: dict[str, str] | None) -> dict[str, Any]:
    """Set workflow parameter values from a form or an API client before parsing."""
    if not arguments:
        return doc
    if not isinstance(arguments, dict):
        raise WorkflowInvalid([FieldError("arguments", "must be an object of name: value")])
    spec = doc.get("spec")
    params = (spec.get("arguments") or {}).get("parameters") if isinstance(spec, dict) else None
    if not isinstance(params, list):
        params = []
    known = {p.get("name"): p for p in params if isinstance(p, dict)}
    errors = [
        FieldError(f"arguments.{name}", "no such workflow parameter")
        for name in arguments
        if name not in known
    ]
    errors += [
        FieldError(f"arguments.{name}", "must be a string")
        for name, value in arguments.items()
        if not isinstance(value, (str, int, float, bool))
    ]
    if errors:
        raise WorkflowInvalid(errors)
    for name, value in arguments.items():
        known[name]["value"] = str(value)
    return doc


def _check_enums(doc: dict[str, Any], arguments: dict[str, str] | None) -> None:
    """A workflow parameter with an ``enum`` takes only one of its values (Argo refuses the
    workflow otherwise): a value given in ``arguments`` is reported at ``arguments.<name>``,
    one written in the manifest at its place in ``spec.arguments.parameters``."""
    spec = doc.get("spec")
    params = (spec.get("arguments") or {}).get("parameters") if isinstance(spec, dict) else None
    errors = []
    for i, p in enumerate(params if isinstance(params, list) else []):
        if not isinstance(p, dict) or not isinstance(p.get("enum"), list) or not p["enum"]:
            continue
        value = p.get("value", p.get("default"))
        if value is None:
            continue
        allowed = [str(e).lower() if isinstance(e, bool) else str(e) for e in p["enum"]]
        shown = str(value).lower() if isinstance(value, bool) else str(value)
        if shown not in allowed:
            name = p.get("name")
            path = (
                f"arguments.{name}"
                if arguments and name in arguments
                else f"spec.arguments.parameters[{i}].value"
            )
            errors.append(FieldError(path, f"{shown!r} is not one of {', '.join(allowed)}"))
    if errors:
        raise WorkflowInvalid(errors)


def workflow_parse(
    *,
    body: str | bytes | dict[str, Any],
    arguments: dict[str, str] | None = None,
    project: Project | None = None,
) -> ParsedWorkflow:
    """Decode, validate and split a submitted Workflow into units (raises WorkflowInvalid).
    ``templateRef``s resolve in ``project``'s catalogue, then the fleet-wide one."""
    doc = parser.decode_document(body, parser_limits())
    doc = _apply_arguments(doc, arguments)
    _check_enums(doc, arguments)
    uses = parser.uses_catalogue(doc)
    parsed = parser.parse_workflow(
        doc,
        catalogue.catalogue_for(project) if uses else {},
        cluster_catalogue=catalogue.catalogue_for(None, catalogue.CLUSTER_KIND) if uses else {},
        limits=parser_limits(),
        domain=settings.PORTAL_LABEL_DOMAIN,
    )
    return _priority_clamped(parsed, project)


def _priority_clamped(parsed: ParsedWorkflow, project: Project | None) -> ParsedWorkflow:
    """``spec.priority`` within the range the project allows: the run is compiled with the
    clamped value (its place in a lock's queue, its step workflows' priority at their site),
    and the preview and the run's history say so at ``spec.priority``."""
    asked = parsed.spec.get("priority")
    if isinstance(asked, bool) or not isinstance(asked, int):
        return parsed  # Argo's schema types it; a string priority is refused there
    allowed = priority_clamp(asked, project)
    if allowed == asked:
        return parsed
    low, high = project.priority_range if project is not None else DEFAULT_PRIORITY_RANGE
    whose = f"project {project.name!r}" if project is not None else "a run in no project"
    warning = FieldWarning(
        "spec.priority",
        f"{asked} is outside the range {whose} allows ({low} to {high}): "
        f"the run's priority is {allowed}",
    )
    return dataclasses.replace(
        parsed,
        spec={**parsed.spec, "priority": allowed},
        warnings=(*parsed.warnings, warning),
    )


def _project_for(user: Any, project: Project | str | None) -> Project | None:
    if project is None or project == "":
        return default_project(user)
    # One query: the project by name among the user's own (unknown and not-yours look alike).
    key: dict[str, Any] = {"pk": project.pk} if isinstance(project, Project) else {"name": project}
    obj = projects_of(user).filter(**key).first()
    if obj is None:
        raise WorkflowInvalid([FieldError("project", f"unknown project: {project}")])
    return obj


def default_project(user: Any) -> Project | None:
    """The user's only project, when they have exactly one (staff, who see every project,
    choose). A run in no project is visible to its owner alone."""
    if getattr(user, "is_staff", False) or not getattr(user, "is_authenticated", False):
        return None
    mine = list(projects_of(user)[:2])
    return mine[0] if len(mine) == 1 else None


def _plan(parsed: ParsedWorkflow, project: Project | None) -> planner.Plan:
    return _plan_from(parsed, project)[0]


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
    proj = _project_for(user, project)
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
    proj = _project_for(user, project)
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
    """What the run is expected to cost (issue 32): its compute from the project's history,
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
    """The project's monthly budget (issue 32): past 80 % the run carries a warning (an event);
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
        planning_record(
            run_id=run.pk,
            project=project.name if project else None,
            units=parsed.units,
            fleet=planned_from[0],
            datasets=planned_from[1],
        )
        RunEvent.objects.create(
            run=run,
            kind="submitted",
            message=f"Submitted by {user.get_username()}: {len(units)} units",
        )
        # What the preview warned of stays in the run's history, field path and all.
        RunEvent.objects.bulk_create(
            [
                RunEvent(
                    run=run, kind="warning", message=f"{w.path}: {w.message}", data=w.as_dict()
                )
                for w in parsed.warnings
            ]
        )
        transaction.on_commit(lambda: _enqueue_advance(run.pk))
    # The units as stored, for an answer built without reading them again (``with_units``).
    run.stored_units = units  # type: ignore[attr-defined]
    return run


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


def _enqueue_advance(run_id: int) -> None:
    from portal.controller import workqueue

    try:
        workqueue.add(run_id)
    except Exception:  # noqa: BLE001 - broker down: the periodic resync picks the run up
        log.warning("could not enqueue run %s; the resync will start it", run_id, exc_info=True)


STOP_STRATEGIES = ("Stop", "Terminate")


def run_stop(*, run: WorkflowRun, user: Any, strategy: str = "Stop") -> WorkflowRun:
    """No new units start; running step workflows are asked to stop (``spec.shutdown``).
    ``Stop`` (``argo stop``) then runs the exit handler, ``Terminate`` (``argo terminate``)
    does not; the strategy is kept as the run's ``spec.shutdown``, as Argo keeps it."""
    if strategy not in STOP_STRATEGIES:
        raise WorkflowInvalid([FieldError("strategy", "must be 'Stop' or 'Terminate'")])
    with transaction.atomic():
        locked = WorkflowRun.objects.select_for_update().get(pk=run.pk)
        updated = state.run_move(
            run.pk, RunStatus.STOPPED, finished_at=timezone.now(), updated_at=timezone.now()
        )
        if not updated:
            raise ActionRefused(f"run is {run.status}; only pending or running runs stop")
        spec = {**(locked.compiled.get("spec") or {}), "shutdown": strategy}
        WorkflowRun.objects.filter(pk=run.pk).update(compiled={**locked.compiled, "spec": spec})
        RunEvent.objects.create(
            run=run,
            kind="stopped",
            message=f"Stopped by {user.get_username()}"
            + ("" if strategy == "Stop" else f" (strategy {strategy})"),
        )
        transaction.on_commit(lambda: _enqueue_advance(run.pk))
    run.refresh_from_db()
    return run


def run_retry(*, run: WorkflowRun, user: Any) -> WorkflowRun:
    """Failed and errored units get a new attempt; units they blocked become pending again."""
    with transaction.atomic():
        locked = WorkflowRun.objects.select_for_update().get(pk=run.pk)
        if locked.status not in (RunStatus.FAILED, RunStatus.ERROR):
            raise ActionRefused(f"run is {locked.status}; only failed runs can be retried")
        failed = list(locked.units.filter(phase__in=[UnitPhase.FAILED, UnitPhase.ERROR]))
        if not failed:
            raise ActionRefused("no failed units to retry")
        for unit in failed:
            RunEvent.objects.create(
                run=run,
                unit=unit,
                kind="unit-retried",
                message=f"{unit.name}: attempt {unit.attempt} {unit.phase}; "
                f"retried as attempt {unit.attempt + 1}",
                data={"ended_attempt": unit.attempt_record(ended="retried", why=unit.message)},
            )
            state.units_move(
                UnitRun.objects.filter(pk=unit.pk),
                UnitPhase.PENDING,
                from_=[unit.phase],
                attempt=unit.attempt + 1,
                workflow_name="",
                submitted_at=None,
                started_at=None,
                finished_at=None,
                message="",
                site="" if unit.timing == UnitTiming.RUNTIME else unit.site,
            )
        state.units_move(locked.units.all(), UnitPhase.PENDING, from_=[UnitPhase.OMITTED])
        state.run_move(
            run.pk, RunStatus.RUNNING, from_=[locked.status], finished_at=None, message=""
        )
        RunEvent.objects.create(
            run=run,
            kind="retried",
            message=f"Retry by {user.get_username()}: {', '.join(u.name for u in failed)}",
        )
        transaction.on_commit(lambda: _enqueue_advance(run.pk))
    run.refresh_from_db()
    return run


def run_resume(*, run: WorkflowRun, user: Any, node: str | None = None) -> WorkflowRun:
    """Resume a suspended step (``node``: a unit's name) or the whole run, as ``argo resume``
    does: without a node, the run's ``spec.suspend`` is cleared (units start again) and every
    running step is resumed; the worker clears each step's ``spec.suspend`` and marks its
    suspended nodes."""
    from portal import tasks

    if run.status not in (RunStatus.PENDING, RunStatus.RUNNING):
        raise ActionRefused(f"run is {run.status}; only a running run has steps to resume")
    units = run.units.filter(phase=UnitPhase.RUNNING).exclude(workflow_name="")
    if node:
        if not run.units.filter(name=node).exists():
            raise WorkflowInvalid([FieldError("node", f"no step {node!r} in run {run.name}")])
        units = units.filter(name=node)
    targets = list(units.values_list("pk", "name"))
    by = user.get_username()
    held = not node and _run_unsuspend(run, by)
    if not targets and not held:
        raise ActionRefused(f"step {node} is not running" if node else "no running step")
    if targets:
        RunEvent.objects.create(
            run=run,
            kind="resume-requested",
            message=f"Resume of {', '.join(n for _, n in targets)} requested by {by}",
        )

    def enqueue() -> None:
        for pk, _name in targets:
            try:
                tasks.unit_resume.delay(pk, by)
            except Exception:  # noqa: BLE001 - broker down: the user sees no "resumed" event
                log.warning("could not enqueue the resume of unit %s", pk, exc_info=True)

    transaction.on_commit(enqueue)
    return run


def _run_unsuspend(run: WorkflowRun, by: str) -> bool:
    """Clear the run's ``spec.suspend`` (one conditional UPDATE of the stored spec, so two
    resumes clear it once) and advance it. False when it was not suspended."""
    with transaction.atomic():
        locked = WorkflowRun.objects.select_for_update().filter(pk=run.pk).first()
        if locked is None or not locked.suspended:
            return False
        spec = {k: v for k, v in locked.compiled["spec"].items() if k != "suspend"}
        locked.compiled = {**locked.compiled, "spec": spec}
        WorkflowRun.objects.filter(pk=run.pk).update(compiled=locked.compiled)
        run.compiled = locked.compiled
        RunEvent.objects.create(run=run, kind="resumed", message=f"Run resumed by {by}")
        transaction.on_commit(lambda: _enqueue_advance(run.pk))
    return True


def run_resubmit(*, run: WorkflowRun, user: Any) -> WorkflowRun:
    """A new run of the same manifest and arguments."""
    return run_submit(
        user=user,
        body=run.manifest,
        project=run.project,
        arguments=run.arguments or None,
        resubmitted_from=run,
        priority_class=quota_priorities.run_priority(run)[0] or None,
    )
