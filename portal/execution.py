"""Running a run: create step workflows on Karmada, read their state back, move the DAG on.

Every function here is safe to call twice and from several workers at once:

* step workflows have deterministic names, so a repeated create answers AlreadyExists, which is
  checked to be ours and counts as success;
* every state change is a conditional UPDATE (``filter(..., phase=old).update(...)``) on the
  row's current attempt, so a late or duplicated message changes nothing;
* no database transaction is held across a Karmada call, so a worker that dies mid-task leaves
  rows as they were and the next delivery (acks_late) or the periodic resync finishes the job.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from placement import codec, manifests, parser, planner
from placement.parser import ParsedWorkflow, Unit
from placement.selectors import dataset_inputs, fleet_state, rule_inputs
from portal import gateway, labels, placement_runtime
from portal.choices import DecisionSource, RunStatus, UnitPhase, UnitTiming
from portal.models import BULK_ROWS, PlacementDecision, RunEvent, UnitRun, WorkflowRun
from sites.choices import SyncMode
from sites.models import Site

log = logging.getLogger(__name__)

FINAL_UNIT = {
    UnitPhase.SUCCEEDED,
    UnitPhase.FAILED,
    UnitPhase.ERROR,
    UnitPhase.SKIPPED,
    UnitPhase.OMITTED,
}
ACTIVE_RUN = [RunStatus.PENDING, RunStatus.RUNNING]
ARGO_TO_UNIT = {
    "Pending": UnitPhase.PENDING,
    "Running": UnitPhase.RUNNING,
    "Succeeded": UnitPhase.SUCCEEDED,
    "Failed": UnitPhase.FAILED,
    "Error": UnitPhase.ERROR,
}


def _event(run_id: int, kind: str, message: str, unit: UnitRun | None = None) -> None:
    RunEvent.objects.create(run_id=run_id, unit=unit, kind=kind, message=message)


# --------------------------------------------------------------------------------------------
# Building step workflows


def parsed_of(run: WorkflowRun) -> ParsedWorkflow:
    """The run's parsed workflow as stored at submission (no re-parse, no catalogue lookup)."""
    c = run.compiled
    return ParsedWorkflow(
        name=c.get("name"),
        generate_name=c.get("generate_name"),
        namespace=c.get("namespace"),
        labels=c.get("labels") or {},
        annotations=c.get("annotations") or {},
        arguments=codec.arguments_from_dict(c.get("arguments") or {}),
        entrypoint=c.get("entrypoint") or "",
        on_exit=c.get("on_exit"),
        templates=c.get("templates") or {},
        template_scopes=c.get("template_scopes") or {},
        units=(),
        spec=c.get("spec") or {},
        document={},
    )


def _task_outputs(unit: UnitRun) -> manifests.TaskOutputs:
    out = unit.outputs or {}
    return manifests.TaskOutputs(
        phase=unit.phase,
        parameters={
            str(p.get("name")): str(p.get("value", ""))
            for p in out.get("parameters") or []
            if isinstance(p, dict)
        },
        result=out.get("result"),
        artifacts={
            str(a.get("name")): a for a in out.get("artifacts") or [] if isinstance(a, dict)
        },
        exit_code=out.get("exitCode"),
    )


def upstream_outputs(units: Iterable[UnitRun]) -> dict[str, manifests.TaskOutputs]:
    """Outputs by task name; an expanded task (withItems/withParam) aggregates its items."""
    by_task: dict[str, list[UnitRun]] = {}
    for u in units:
        if u.spec.get("expanded"):
            continue  # a group row: its items carry the outputs
        by_task.setdefault(u.spec.get("task") or u.name, []).append(u)
    out: dict[str, manifests.TaskOutputs] = {}
    for task, rows in by_task.items():
        expanded = any(r.spec.get("item_index") is not None for r in rows)
        if expanded:
            rows.sort(key=lambda r: r.spec.get("item_index") or 0)
            out[task] = manifests.aggregate_outputs([_task_outputs(r) for r in rows])
        else:
            out[task] = _task_outputs(rows[0])
    return out


@dataclass(frozen=True)
class SiteState:
    usable: bool  # ready and not cordoned
    overrides: Mapping[str, Any]


def sites_state() -> dict[str, SiteState]:
    """Every site's usability and overrides in one query (a fleet has few sites; one read per
    advance instead of two per unit submitted)."""
    return {
        name: SiteState(ready and not cordoned, overrides or {})
        for name, ready, cordoned, overrides in Site.objects.order_by().values_list(
            "name", "ready", "cordoned", "overrides"
        )
    }


def step_workflow_for(
    run: WorkflowRun,
    unit: UnitRun,
    units: Iterable[UnitRun],
    sites: Mapping[str, SiteState] | None = None,
) -> dict[str, Any]:
    site = unit.site or None
    mirror = None
    if site:
        state = (sites if sites is not None else sites_state()).get(site)
        mirror = state.overrides.get("image_registry_mirror") if state else None
    body = manifests.step_workflow(
        parsed_of(run),
        codec.unit_from_dict(unit.spec),
        run_name=run.name,
        run_id=run.pk,
        attempt=unit.attempt,
        namespace=gateway.namespace(),
        site=site,
        reason=unit.reason or "placed at runtime",
        workflow_parameters=run.compiled.get("parameters") or {},
        outputs=upstream_outputs(units),
        domain=settings.PORTAL_LABEL_DOMAIN,
        image_mirror=mirror or None,
    )
    if not site:
        context = placement_runtime.context_annotation(
            project=run.project.name if run.project_id and run.project else None,
            unit_spec=unit.spec,
            units=units,
        )
        if context is not None:
            body["metadata"]["annotations"][labels.key(labels.PLACEMENT_CONTEXT)] = context
    if unit.spec.get("kind") == "exit":
        # Inside the step workflow Argo would answer with the step workflow's own status.
        text = json.dumps(body["spec"]["templates"]).replace(
            "{{workflow.status}}", str(unit.spec.get("workflow_status", ""))
        )
        body["spec"]["templates"] = json.loads(text)
    return body


def _is_ours(obj: Mapping[str, Any], run: WorkflowRun, unit: UnitRun) -> bool:
    have = (obj.get("metadata") or {}).get("labels") or {}
    return (
        have.get(labels.key(labels.RUN)) == str(run.pk)
        and have.get(labels.key(labels.UNIT)) == unit.slug
        and have.get(labels.key(labels.ATTEMPT)) == str(unit.attempt)
    )


def submit_unit(
    run: WorkflowRun,
    unit: UnitRun,
    units: Iterable[UnitRun],
    sites: Mapping[str, SiteState] | None = None,
) -> bool:
    """Create the unit's step workflow (idempotent). False when the API refused it for good:
    the unit is then in Error with the API's message."""
    try:
        body = step_workflow_for(run, unit, units, sites)
    except manifests.Unresolved as exc:
        _unit_set(unit, UnitPhase.ERROR, message=f"cannot resolve arguments: {exc}")
        return False
    name = body["metadata"]["name"]
    try:
        gateway.create(gateway.WORKFLOW, body)
    except gateway.AlreadyExists:
        existing = gateway.get(gateway.WORKFLOW, name)
        if not _is_ours(existing, run, unit):
            _unit_set(unit, UnitPhase.ERROR, message=f"a foreign Workflow {name} already exists")
            return False
    except gateway.PermanentError as exc:
        _unit_set(unit, UnitPhase.ERROR, message=f"Karmada refused the step workflow: {exc}")
        return False
    claimed = UnitRun.objects.filter(
        pk=unit.pk, attempt=unit.attempt, workflow_name="", phase=UnitPhase.PENDING
    ).update(workflow_name=name, submitted_at=timezone.now(), updated_at=timezone.now())
    if claimed:
        unit.workflow_name = name
        where = f"at {unit.site}" if unit.site else "for runtime placement"
        _event(run.pk, "unit-submitted", f"{unit.name}: step workflow {name} created {where}", unit)
    return True


def _unit_set(unit: UnitRun, phase: str, *, message: str = "", **fields: Any) -> bool:
    if phase not in UnitPhase.values:
        raise ValueError(phase)
    now = timezone.now()
    extra: dict[str, Any] = {"phase": phase, "updated_at": now, **fields}
    if message:
        extra["message"] = message
    if phase in FINAL_UNIT and "finished_at" not in fields:
        extra["finished_at"] = now
    changed = UnitRun.objects.filter(pk=unit.pk, attempt=unit.attempt, phase=unit.phase).update(
        **extra
    )
    if changed:
        old = unit.phase
        for k, v in extra.items():
            setattr(unit, k, v)
        text = f"{unit.name}: {old} → {phase}" + (f" ({message})" if message else "")
        _event(unit.run_id, "unit-phase", text, unit)
    return bool(changed)


# --------------------------------------------------------------------------------------------
# Advancing a run


def _phase_of(units: list[UnitRun]) -> str | list[str] | None:
    if len(units) == 1 and units[0].spec.get("item_index") is None:
        return units[0].phase if units[0].phase in FINAL_UNIT else None
    phases = [u.phase for u in units]
    return phases if all(p in FINAL_UNIT for p in phases) else None


def _task_phases(units: list[UnitRun]) -> dict[str, str | list[str] | None]:
    by_task: dict[str, list[UnitRun]] = {}
    for u in units:
        if u.spec.get("expanded"):
            continue
        by_task.setdefault(u.spec.get("task") or u.name, []).append(u)
    return {task: _phase_of(rows) for task, rows in by_task.items()}


def _expand(run: WorkflowRun, unit: UnitRun, units: list[UnitRun]) -> list[UnitRun]:
    """withParam: one unit per item of the upstream output, created once (unique names)."""
    spec = codec.unit_from_dict(unit.spec)
    assert spec.with_param is not None
    missing: list[str] = []
    value = manifests.substitute(
        spec.with_param,
        run.compiled.get("parameters") or {},
        upstream_outputs(units),
        missing=missing,
    )
    try:
        if missing:
            raise ValueError(f"unresolved: {', '.join(missing)}")
        items = parser.parse_with_param_value(value)
    except ValueError as exc:
        _unit_set(unit, UnitPhase.ERROR, message=f"withParam: {exc}")
        return []
    children = parser.expand_with_param(spec, items)
    decisions = planner.plan(
        children,
        fleet_state(),
        rule_inputs(),
        dataset_inputs(),
        project=run.project.name if run.project else None,
        upstream_sites={u.name: u.site for u in units if u.site},
    ).by_unit()
    rows = []
    for child in children:
        d = decisions[child.name]
        child_spec = codec.unit_to_dict(child)
        rows.append(
            UnitRun(
                run=run,
                name=child.name,
                slug=child.slug,
                template=child.template,
                position=unit.position,
                depends=child.depends,
                upstream=list(child.upstream),
                when=child.when or "",
                timing=d.timing,
                site=d.site or "",
                planned_site=d.site or d.runtime_hint or "",
                reason=d.reason,
                spec=child_spec,
            )
        )
    with transaction.atomic():
        if not UnitRun.objects.filter(
            pk=unit.pk, phase=UnitPhase.PENDING, spec__expanded__isnull=True
        ).exists():
            return []
        UnitRun.objects.bulk_create(rows, ignore_conflicts=True, batch_size=BULK_ROWS)
        unit.spec = {**unit.spec, "expanded": [c.name for c in children]}
        UnitRun.objects.filter(pk=unit.pk).update(
            spec=unit.spec, phase=UnitPhase.RUNNING, started_at=timezone.now()
        )
        unit.phase = UnitPhase.RUNNING
        _event(run.pk, "unit-expanded", f"{unit.name}: withParam gave {len(children)} items", unit)
    if not children:
        _unit_set(unit, UnitPhase.SKIPPED, message="withParam gave no items")
    return list(UnitRun.objects.filter(run=run, name__in=[c.name for c in children]))


def _settle_groups(units: list[UnitRun]) -> None:
    """An expanded unit ends when all its items have ended."""
    by_name = {u.name: u for u in units}
    for u in units:
        items = u.spec.get("expanded")
        if not items or u.phase in FINAL_UNIT:
            continue
        rows = [by_name[n] for n in items if n in by_name]
        if len(rows) < len(items) or any(r.phase not in FINAL_UNIT for r in rows):
            continue
        ok = all(r.phase in (UnitPhase.SUCCEEDED, UnitPhase.SKIPPED) for r in rows)
        _unit_set(u, UnitPhase.SUCCEEDED if ok else UnitPhase.FAILED)


def run_advance(run_id: int) -> None:
    """Move a run on: skip or omit what can no longer run, expand withParam, create the step
    workflows of every unit whose dependencies are done, and settle the run's status."""
    # The manifest as submitted is for people; advancing reads the compiled form only.
    run = (
        WorkflowRun.objects.select_related("project")
        .defer("manifest")
        .filter(pk=run_id)
        .order_by()
        .first()
    )
    if run is None:
        return
    if run.status == RunStatus.STOPPED:
        _shutdown(run)
        return
    if run.status not in ACTIVE_RUN:
        return
    units = list(run.units.order_by("position", "id"))
    sites: dict[str, SiteState] | None = None
    progressed = True
    while progressed:
        progressed = False
        _settle_groups(units)
        phases = _task_phases(units)
        outputs = upstream_outputs(units)
        for unit in units:
            if unit.phase != UnitPhase.PENDING or unit.workflow_name or unit.spec.get("expanded"):
                continue
            verdict = manifests.evaluate_depends(unit.depends or "", phases)
            if verdict is None:
                continue
            if verdict is False:
                progressed |= _unit_set(unit, UnitPhase.OMITTED, message="depends not satisfied")
                continue
            if unit.when:
                try:
                    go = manifests.evaluate_when(
                        unit.when,
                        run.compiled.get("parameters") or {},
                        outputs,
                        item=unit.spec.get("item"),
                        has_item=unit.spec.get("item_index") is not None,
                    )
                except manifests.WhenError as exc:
                    progressed |= _unit_set(unit, UnitPhase.ERROR, message=f"when: {exc}")
                    continue
                if not go:
                    progressed |= _unit_set(
                        unit, UnitPhase.SKIPPED, message=f"when '{unit.when}' is false"
                    )
                    continue
            if unit.spec.get("with_param"):
                new = _expand(run, unit, units)
                units.extend(new)
                progressed = True
                continue
            if sites is None:
                sites = sites_state()
            if (
                unit.timing == UnitTiming.SUBMIT
                and not _site_usable(unit.site, sites)
                and _failover_unit(run, unit, units, reason=f"site {unit.site} is not ready")
            ):
                progressed = True
                sites = None  # failover may have read newer state; read again when needed
                continue
            submit_unit(run, unit, units, sites)
        if (
            not progressed
            and _exit_pending(run, units)
            and all(u.phase in FINAL_UNIT for u in units)
        ):
            exit_unit = _create_exit_unit(run, units)
            if exit_unit is not None and exit_unit not in units:
                units.append(exit_unit)
                progressed = True
    _settle_groups(units)
    if (
        run.status == RunStatus.PENDING
        and any(u.workflow_name for u in units)
        and not all(u.phase in FINAL_UNIT for u in units)
    ):
        # The common first advance: a step workflow exists and the run cannot have ended, so
        # Pending → Running needs no second read (the update is conditional on Pending anyway).
        _mark_running(run.pk)
    else:
        run_refresh_status(run.pk)


EXIT_UNIT = "onExit"


def _exit_pending(run: WorkflowRun, units: list[UnitRun]) -> bool:
    """The run has an exit handler that has not been created yet."""
    return bool(run.compiled.get("on_exit")) and not any(
        u.spec.get("kind") == "exit" for u in units
    )


def _main_status(units: list[UnitRun]) -> tuple[str, list[UnitRun]]:
    bad = [
        u
        for u in units
        if u.phase in (UnitPhase.FAILED, UnitPhase.ERROR)
        and not u.spec.get("continue_on_failed")
        and not u.spec.get("expanded")
        and u.spec.get("kind") != "exit"
    ]
    if any(u.phase == UnitPhase.ERROR for u in bad):
        return RunStatus.ERROR, bad
    return (RunStatus.FAILED if bad else RunStatus.SUCCEEDED), bad


def _create_exit_unit(run: WorkflowRun, units: list[UnitRun]) -> UnitRun | None:
    """Argo's ``onExit``: once every unit has ended, one more step workflow runs the exit
    template with ``{{workflow.status}}`` set to how the run went."""
    key = str(run.compiled["on_exit"])
    status, _bad = _main_status(units)
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
        arguments=parser.Arguments(),
        labels={},
        images=(),
        resources=parser.Resources(),
        datasets=(),
        data_refs=(),
    )
    decision = planner.decide(
        unit,
        fleet_state(),
        rule_inputs(),
        dataset_inputs(),
        project=run.project.name if run.project else None,
        upstream_sites={u.name: u.site for u in units if u.site},
        timing="submit",
    )
    spec = {**codec.unit_to_dict(unit), "kind": "exit", "workflow_status": status}
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
        },
    )
    if created:
        PlacementDecision.from_plan(
            decision, reason=row.reason, run=run, unit=row, source=DecisionSource.RULE
        ).save()
        _event(run.pk, "exit-handler", f"all units ended ({status}); running onExit", row)
        if decision.site is None:
            _unit_set(row, UnitPhase.ERROR, message=f"no site can run it: {decision.reason}")
    return row


def _site_usable(site: str, sites: Mapping[str, SiteState] | None = None) -> bool:
    state = (sites if sites is not None else sites_state()).get(site)
    return bool(state and state.usable)


def _mark_running(run_id: int) -> bool:
    now = timezone.now()
    return bool(
        WorkflowRun.objects.filter(pk=run_id, status=RunStatus.PENDING).update(
            status=RunStatus.RUNNING, started_at=now, updated_at=now
        )
    )


def run_refresh_status(run_id: int) -> str:
    """Derive the run's status from its units (conditional: never leaves Stopped).

    All units ended: Failed when a unit Failed (Error when one errored) and it was not allowed
    to (``continueOn.failed``), else Succeeded. Otherwise Running once a unit was submitted.
    """
    run = WorkflowRun.objects.get(pk=run_id)
    if run.status not in ACTIVE_RUN:
        return run.status
    units = list(run.units.all())
    now = timezone.now()
    if units and all(u.phase in FINAL_UNIT for u in units) and not _exit_pending(run, units):
        new, bad = _main_status(units)
        exit_unit = next((u for u in units if u.spec.get("kind") == "exit"), None)
        if exit_unit is not None and exit_unit.phase in (UnitPhase.FAILED, UnitPhase.ERROR):
            new = RunStatus.FAILED if new == RunStatus.SUCCEEDED else new
            bad.append(exit_unit)
        message = "; ".join(f"{u.name}: {u.message or u.phase}" for u in bad)[:2000]
        changed = WorkflowRun.objects.filter(pk=run.pk, status=run.status).update(
            status=new, finished_at=now, updated_at=now, message=message
        )
        if changed:
            _event(
                run.pk, "run-finished", f"Run {new.lower()}" + (f": {message}" if message else "")
            )
        return new if changed else run.status
    if run.status == RunStatus.PENDING and any(u.workflow_name for u in units):
        _mark_running(run.pk)
        return RunStatus.RUNNING
    return run.status


def _shutdown(run: WorkflowRun) -> None:
    """A stopped run: running step workflows get ``spec.shutdown: Stop``; units that never
    started are omitted."""
    for unit in run.units.filter(phase__in=[UnitPhase.PENDING, UnitPhase.RUNNING]):
        if unit.workflow_name:
            if not unit.spec.get("shutdown_sent"):
                with contextlib.suppress(gateway.NotFound):
                    gateway.patch(
                        gateway.WORKFLOW, unit.workflow_name, {"spec": {"shutdown": "Stop"}}
                    )
                UnitRun.objects.filter(pk=unit.pk).update(spec={**unit.spec, "shutdown_sent": True})
        elif not unit.spec.get("expanded"):
            _unit_set(unit, UnitPhase.OMITTED, message="run stopped")


# --------------------------------------------------------------------------------------------
# Reading back: ResourceBindings


def _parse_time(value: Any) -> datetime | None:
    return parse_datetime(value) if isinstance(value, str) and value else None


def _outputs_of(name: str, status: Mapping[str, Any]) -> dict[str, Any]:
    """The step workflow's outputs: its root node's (Argo keys the root node by the
    workflow's name), else the entrypoint node's."""
    nodes = status.get("nodes") or {}
    root = nodes.get(name) if isinstance(nodes, dict) else None
    if not isinstance(root, dict) and isinstance(nodes, dict):
        root = next(
            (n for n in nodes.values() if isinstance(n, dict) and not n.get("boundaryID")), None
        )
    outputs = dict((root or {}).get("outputs") or status.get("outputs") or {})
    return outputs


def _bound_workflow(binding: Mapping[str, Any]) -> str:
    """The name of the Workflow a ResourceBinding binds ('' for any other kind)."""
    resource = (binding.get("spec") or {}).get("resource") or {}
    return str(resource.get("name") or "") if resource.get("kind") == "Workflow" else ""


def bindings_observe(bindings: Iterable[Mapping[str, Any]]) -> set[int]:
    """``binding_observe`` for a whole list (the resync's): their units in one query. Returns
    the runs with a unit that ended."""
    named = [(b, name) for b in bindings if (name := _bound_workflow(b))]
    rows = UnitRun.objects.filter(workflow_name__in={name for _, name in named})
    units = {u.workflow_name: u for u in rows.order_by("-pk")}  # the lowest pk wins
    ended = set()
    for binding, name in named:
        unit = units.get(name)
        if unit is not None and (run_id := binding_observe(binding, unit)) is not None:
            ended.add(run_id)
    return ended


def binding_observe(binding: Mapping[str, Any], unit: UnitRun | None = None) -> int | None:
    """Fold a ResourceBinding's state into its unit (read by name unless given). Returns the
    run id when the unit ended (the caller enqueues the run's next step), else None."""
    spec = binding.get("spec") or {}
    name = _bound_workflow(binding)
    if not name:
        return None
    clusters = spec.get("clusters") or []
    site = clusters[0].get("name", "") if clusters and isinstance(clusters[0], dict) else ""
    aggregated = (binding.get("status") or {}).get("aggregatedStatus") or []
    member = (aggregated[0] or {}).get("status") if aggregated else None
    if not site and not isinstance(member, dict):
        return None  # created, not scheduled yet: nothing to fold in, so nothing to read
    if unit is None:
        unit = UnitRun.objects.filter(workflow_name=name).order_by("pk").first()
    if unit is None:
        return None
    if site and site != unit.site:
        _unit_placed(unit, site)
    if not isinstance(member, dict):
        return None
    phase = ARGO_TO_UNIT.get(str(member.get("phase") or ""), None)
    if phase is None or phase == unit.phase or unit.phase in FINAL_UNIT:
        return None
    fields: dict[str, Any] = {}
    started = _parse_time(member.get("startedAt"))
    finished = _parse_time(member.get("finishedAt"))
    if started:
        fields["started_at"] = started
    if phase in FINAL_UNIT:
        fields["finished_at"] = finished or timezone.now()
        fields["outputs"] = _outputs_of(name, member)
    message = (
        str(member.get("message") or "") if phase in (UnitPhase.FAILED, UnitPhase.ERROR) else ""
    )
    if phase == UnitPhase.PENDING:
        return None
    changed = _unit_set(unit, phase, message=message, **fields)
    if changed and unit.run.status == RunStatus.PENDING:
        run_refresh_status(unit.run_id)
    return unit.run_id if changed and phase in FINAL_UNIT else None


def _unit_placed(unit: UnitRun, site: str) -> None:
    """Karmada scheduled the step workflow. A runtime unit that the webhook did not place
    (unreachable, too slow) was placed by the fallback policy: record that decision.

    The webhook queues its decision before it answers, so before the binding exists: the queue
    is written first, and then a webhook decision is in the database if there was one."""
    queue_read = True
    if unit.timing == UnitTiming.RUNTIME:
        try:
            placement_runtime.decisions_flush(wait=True)
        except placement_runtime.QueueUnavailable as exc:
            queue_read = False
            log.warning("%s: decision queue unreadable (%s)", unit.workflow_name, exc)
        unit.refresh_from_db(fields=["site", "reason"])
        if unit.site == site:
            return  # placed by the webhook, as its decision says
    changed = UnitRun.objects.filter(pk=unit.pk, attempt=unit.attempt, site=unit.site).update(
        site=site, updated_at=timezone.now()
    )
    if not changed:
        return
    had_decision = PlacementDecision.objects.filter(
        unit=unit, attempt=unit.attempt, site=site
    ).exists()
    unit.site = site
    if not had_decision and not queue_read:
        # A webhook decision may still be queued: do not call it the fallback policy's.
        log.warning("%s: placed at %s; not known yet by whom", unit.workflow_name, site)
    elif not had_decision:
        reason = "fallback policy: Karmada chose a ready site (the placement webhook did not)"
        PlacementDecision.objects.create(
            run_id=unit.run_id,
            unit=unit,
            workflow_name=unit.workflow_name,
            attempt=unit.attempt,
            source=DecisionSource.FALLBACK,
            timing=unit.timing,
            site=site,
            reason=reason,
        )
        UnitRun.objects.filter(pk=unit.pk).update(reason=reason)
    _event(unit.run_id, "unit-placed", f"{unit.name}: scheduled at {site}", unit)


# --------------------------------------------------------------------------------------------
# Reading back: Clusters → Sites


_MILLI = {"cpu"}


def _quantity(value: Any, milli: bool = False) -> int:
    q = parser.parse_quantity(value)
    if q is None:
        return 0
    return round(q * 1000) if milli else int(q)


def cluster_observe(cluster: Mapping[str, Any]) -> tuple[Site, bool]:
    """Upsert the Site of a Karmada Cluster. Returns (site, created-or-readiness-changed)."""
    meta = cluster.get("metadata") or {}
    spec = cluster.get("spec") or {}
    status = cluster.get("status") or {}
    name = str(meta.get("name"))
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
        if isinstance(c, dict)
    )
    summary = status.get("resourceSummary") or {}
    alloc = summary.get("allocatable") or {}
    used = summary.get("allocated") or {}
    gpus = _quantity(alloc.get("nvidia.com/gpu"))
    now = timezone.now()
    values: dict[str, Any] = {
        "region": spec.get("region") or "",
        "zone": spec.get("zone") or "",
        "provider": spec.get("provider") or "",
        "sync_mode": SyncMode.PULL if spec.get("syncMode") == "Pull" else SyncMode.PUSH,
        "cpu_allocatable": _quantity(alloc.get("cpu"), milli=True),
        "cpu_allocated": _quantity(used.get("cpu"), milli=True),
        "memory_allocatable": _quantity(alloc.get("memory")),
        "memory_allocated": _quantity(used.get("memory")),
        "gpu_allocatable": gpus,
        "gpu_allocated": _quantity(used.get("nvidia.com/gpu")),
        "pods_allocatable": _quantity(alloc.get("pods")),
        "pods_allocated": _quantity(used.get("pods")),
        "last_sync": now,
    }
    with transaction.atomic():
        site, created = Site.objects.select_for_update().get_or_create(
            name=name, defaults={**values, "ready": ready, "ready_changed_at": now}
        )
        changed = created
        if not created:
            if site.ready != ready:
                values["ready"] = ready
                values["ready_changed_at"] = now
                changed = True
            # Cluster labels are the source of truth for their keys; labels operators add stay.
            merged = {**(site.labels or {}), **(meta.get("labels") or {})}
            if merged != site.labels:
                values["labels"] = merged
            Site.objects.filter(pk=site.pk).update(**values)
            for k, v in values.items():
                setattr(site, k, v)
        else:
            Site.objects.filter(pk=site.pk).update(labels=dict(meta.get("labels") or {}))
        if gpus and "gpu" not in (site.capabilities or []):
            site.capabilities = [*(site.capabilities or []), "gpu"]
            Site.objects.filter(pk=site.pk).update(capabilities=site.capabilities)
    return site, changed


def cluster_deleted(name: str) -> None:
    Site.objects.filter(name=name, ready=True).update(ready=False, ready_changed_at=timezone.now())


def policies_sync() -> dict[str, int]:
    """Keep the per-site and fallback PropagationPolicies, the per-site OverridePolicies and
    (``PORTAL_WEBHOOK_REGISTER``) the webhook configuration in step with the inventory: create
    or update what should be there, delete what should not."""
    ns = gateway.namespace()
    domain = settings.PORTAL_LABEL_DOMAIN
    prefix = settings.PORTAL_POLICY_PREFIX
    gateway.ensure_namespace(ns)
    wanted: dict[tuple[str, str], dict[str, Any]] = {}
    for name, overrides in Site.objects.values_list("name", "overrides"):
        pp = manifests.propagation_policy(name, namespace=ns, domain=domain, prefix=prefix)
        wanted[("PropagationPolicy", pp["metadata"]["name"])] = pp
        for op in manifests.override_policies(
            name, overrides or {}, namespace=ns, domain=domain, prefix=prefix
        ):
            wanted[("OverridePolicy", op["metadata"]["name"])] = op
    fb = manifests.fallback_policy(namespace=ns, domain=domain)
    wanted[("PropagationPolicy", fb["metadata"]["name"])] = fb
    counts = {"applied": 0, "deleted": 0}
    if settings.PORTAL_WEBHOOK_REGISTER:
        from portal.placement_runtime import webhook_register

        webhook_register()
        counts["applied"] += 1
    for (kind, _name), body in wanted.items():
        gateway.apply(gateway.BY_KIND[kind], body)
        counts["applied"] += 1
    selector = f"{labels.key(labels.MANAGED)}=true"
    for resource in (gateway.PROPAGATION_POLICY, gateway.OVERRIDE_POLICY):
        items, _ = gateway.list_objects(resource, label_selector=selector)
        for item in items:
            name = item["metadata"]["name"]
            if (resource.kind, name) not in wanted:
                gateway.delete(resource, name)
                counts["deleted"] += 1
    return counts


# --------------------------------------------------------------------------------------------
# Failover


def _failover_unit(run: WorkflowRun, unit: UnitRun, units: Iterable[UnitRun], reason: str) -> bool:
    """Place the unit again without its lost site, as a new attempt (decision "failover")."""
    lost = unit.site
    spec = codec.unit_from_dict(unit.spec)
    upstream = {u.name: u.site for u in units if u.site and u.phase == UnitPhase.SUCCEEDED}
    decision = planner.decide(
        spec,
        fleet_state(),
        rule_inputs(),
        dataset_inputs(),
        project=run.project.name if run.project else None,
        upstream_sites=upstream,
        exclude_sites=[lost] if lost else [],
        timing="submit",
    )
    if decision.site is None:
        _event(
            run.pk,
            "failover-blocked",
            f"{unit.name}: {reason}; no other site: {decision.reason}",
            unit,
        )
        return False
    old_name = unit.workflow_name
    now = timezone.now()
    with transaction.atomic():
        changed = UnitRun.objects.filter(
            pk=unit.pk, attempt=unit.attempt, phase__in=[UnitPhase.PENDING, UnitPhase.RUNNING]
        ).update(
            attempt=unit.attempt + 1,
            site=decision.site,
            timing=UnitTiming.SUBMIT,
            phase=UnitPhase.PENDING,
            workflow_name="",
            submitted_at=None,
            started_at=None,
            reason=f"failover from {lost}: {decision.reason}",
            updated_at=now,
        )
        if not changed:
            return False
        unit.attempt += 1
        unit.site = decision.site
        unit.phase = UnitPhase.PENDING
        unit.workflow_name = ""
        unit.timing = UnitTiming.SUBMIT
        unit.reason = f"failover from {lost}: {decision.reason}"
        PlacementDecision.from_plan(
            decision,
            reason=unit.reason,
            run=run,
            unit=unit,
            attempt=unit.attempt,
            source=DecisionSource.FAILOVER,
        ).save()
        _event(
            run.pk,
            "failover",
            f"{unit.name}: {reason}; attempt {unit.attempt} at {decision.site}",
            unit,
        )
    if old_name:
        try:
            gateway.delete(gateway.WORKFLOW, old_name)
        except gateway.KarmadaError as exc:
            # The site or Karmada is unreachable: the old attempt's labels no longer match a
            # unit, so whatever it reports later is ignored.
            log.info("could not delete %s after failover: %s", old_name, exc)
    return True


def failover_check() -> list[int]:
    """Units at sites not ready for longer than the grace period move elsewhere. Returns the
    runs to advance."""
    grace = timedelta(seconds=settings.PORTAL_FAILOVER_GRACE_SECONDS)
    lost = list(
        Site.objects.filter(ready=False, ready_changed_at__lt=timezone.now() - grace).values_list(
            "name", flat=True
        )
    )
    if not lost:
        return []
    runs: set[int] = set()
    stuck = UnitRun.objects.filter(
        site__in=lost,
        phase__in=[UnitPhase.PENDING, UnitPhase.RUNNING],
        run__status__in=ACTIVE_RUN,
    ).select_related("run", "run__project")
    for unit in stuck:
        units = list(unit.run.units.all())
        if _failover_unit(unit.run, unit, units, reason=f"site {unit.site} not ready"):
            runs.add(unit.run_id)
    return sorted(runs)


def stale_runs(older_than_s: int | None = None) -> list[int]:
    """Active runs that nothing will move on: no step workflow in flight (whose end the
    watcher would report), no unit changed for a while, and work left (a unit waiting, or
    every unit ended but the status not settled). A lost task or a broker outage leaves
    exactly these; the resync advances them. Runs with work in flight are left alone, so the
    cost of a resync does not grow with the number of busy runs."""
    seconds = settings.PORTAL_STALE_SECONDS if older_than_s is None else older_than_s
    cutoff = timezone.now() - timedelta(seconds=seconds)
    units = UnitRun.objects.filter(run=OuterRef("pk"))
    in_flight = units.filter(phase__in=[UnitPhase.PENDING, UnitPhase.RUNNING]).exclude(
        workflow_name=""
    )
    waiting = units.filter(phase=UnitPhase.PENDING, workflow_name="")
    unfinished = units.exclude(phase__in=list(FINAL_UNIT))
    stuck = (
        WorkflowRun.objects.filter(status__in=ACTIVE_RUN, created_at__lt=cutoff)
        .exclude(Exists(in_flight))
        .exclude(Exists(units.filter(updated_at__gte=cutoff)))
        .filter(Exists(waiting) | ~Exists(unfinished))
        .values_list("pk", flat=True)
    )
    stopping = (
        WorkflowRun.objects.filter(status=RunStatus.STOPPED)
        .filter(Exists(in_flight.filter(updated_at__lt=cutoff)))
        .values_list("pk", flat=True)
    )
    return sorted({*stuck, *stopping})


def unit_for_workflow(workflow_labels: Mapping[str, str]) -> UnitRun | None:
    """The current attempt of the unit a step workflow's labels name."""
    run_id = workflow_labels.get(labels.key(labels.RUN), "")
    slug = workflow_labels.get(labels.key(labels.UNIT), "")
    attempt = workflow_labels.get(labels.key(labels.ATTEMPT), "")
    if not (run_id.isdigit() and attempt.isdigit()):
        return None
    return (
        UnitRun.objects.select_related("run", "run__project")
        .filter(run_id=int(run_id), slug=slug, attempt=int(attempt))
        .first()
    )


def unit_spec(unit: UnitRun) -> Unit:
    return codec.unit_from_dict(unit.spec)
