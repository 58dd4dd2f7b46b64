"""Advancing a run: skip or omit what can no longer run, expand withParam, create the step
workflows of units whose dependencies are done, run the exit handler, settle the status."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from placement import codec, manifests, parser, planner
from placement.parser import Unit
from portal import gateway, state
from portal.choices import ACTIVE_RUN, FINAL_UNIT, DecisionSource, RunStatus, UnitPhase, UnitTiming
from portal.execution import gates, outcome, transfers
from portal.execution.common import (
    SiteState,
    ancestors,
    event,
    site_unusable_why,
    site_usable,
    sites_state,
    upstream_where,
)
from portal.execution.failover import failover_unit
from portal.execution.steps import submit_units, upstream_outputs
from portal.models import BULK_ROWS, PlacementDecision, UnitRun, WorkflowRun
from portal.planning import held_by, holds_changed, planner_snapshot
from portal.quotas import services as quota_services
from sites.models import SiteLink

log = logging.getLogger(__name__)

# Step workflows built and created together (their claim is one UPDATE, their events one
# INSERT); the turn is checked between chunks.
CREATE_CHUNK = 50


@dataclass
class Turn:
    """How much one advance may do before it lets other runs have a worker: a big fan-out
    is created in turns of at most ``max_creations`` step workflows or ``seconds``, each
    followed by a request at the tail of the queue."""

    max_creations: int = field(default_factory=lambda: settings.PORTAL_ADVANCE_BATCH)
    seconds: float = field(default_factory=lambda: settings.PORTAL_ADVANCE_TURN_SECONDS)
    creations: int = 0
    cut: bool = False  # work was left for the next turn
    started: float = field(default_factory=time.monotonic)

    def fit(self, units: int) -> None:
        """Size the turn to the run, once its units are read: reading a run's units costs
        every turn the same, so a turn of a big run may create a fifth of them and last
        four times as long as the read took (at most a fifth of a turn is overhead; with a
        third, a 10,000-item fan-out spent a third of its creation re-reading its units).
        Other projects are not kept waiting longer: a project holds one turn at a time, and
        what users wait on goes ahead of turns (``fairness``)."""
        read = time.monotonic() - self.started
        self.max_creations = max(self.max_creations, units // 5)
        self.seconds = max(self.seconds, 4 * read)
        self.started = time.monotonic()

    def spent(self) -> bool:
        # A turn always creates something: one that only read the units would come back
        # forever without progress.
        if self.creations and (
            self.creations >= self.max_creations or time.monotonic() - self.started >= self.seconds
        ):
            self.cut = True
        return self.cut


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
    try:
        # An expression tag (``{{= ...}}``) is evaluated here too; its error is a ValueError.
        value = manifests.substitute(
            spec.with_param,
            run.compiled.get("parameters") or {},
            # a skipped producer's declared defaults, as in its consumers' arguments
            manifests.with_skipped_defaults(
                upstream_outputs(units), run.compiled.get("templates") or {}
            ),
            missing=missing,
            inputs=_entry_inputs(run),
        )
        if missing:
            raise ValueError(f"unresolved: {', '.join(missing)}")
        # Sized against the run's unit limit before a single unit is built.
        room = settings.PORTAL_MAX_UNITS - len(units)
        items = parser.parse_with_param_value(value, max_items=room)
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
        if not UnitRun.objects.filter(
            pk=unit.pk, phase=UnitPhase.PENDING, spec__expanded__isnull=True
        ).exists():
            return []
        UnitRun.objects.bulk_create(rows, ignore_conflicts=True, batch_size=BULK_ROWS)
        holds_changed({}, held_by(rows))
        _item_decisions(run, decisions)
        unit.spec = {**unit.spec, "expanded": [c.name for c in children]}
        state.units_move(
            UnitRun.objects.filter(pk=unit.pk),
            UnitPhase.RUNNING,
            from_=[UnitPhase.PENDING],
            spec=unit.spec,
            started_at=timezone.now(),
        )
        unit.phase = UnitPhase.RUNNING
        event(run.pk, "unit-expanded", f"{unit.name}: withParam gave {len(children)} items", unit)
    if not children:
        state.unit_move(unit, UnitPhase.SKIPPED, message="withParam gave no items")
    return list(UnitRun.objects.filter(run=run, name__in=[c.name for c in children]))


def _entry_inputs(run: WorkflowRun) -> dict[str, str]:
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
        state.unit_move(u, UnitPhase.SUCCEEDED if ok else UnitPhase.FAILED)


def run_advance(run_id: int, turn: Turn | None = None) -> bool:
    """Move a run on: skip or omit what can no longer run, expand withParam, create the step
    workflows of every unit whose dependencies are done (within ``turn``), and settle the
    run's status. True when the turn ran out with work left (the caller asks again).

    Callers that may run concurrently for one run go through ``run_advance_turn``."""
    turn = turn or Turn()
    # The manifest as submitted is for people; advancing reads the compiled form only.
    run = (
        WorkflowRun.objects.select_related("project")
        .defer("manifest")
        .filter(pk=run_id)
        .order_by()
        .first()
    )
    if run is None:
        return False
    if run.status in ACTIVE_RUN and gates.shutdown_requested(run):
        run.status = RunStatus.STOPPED
    if run.status == RunStatus.STOPPED:
        _shutdown(run)
        gates.after(run, [])
        _exit_after_stop(run)
        return False
    if run.status not in ACTIVE_RUN:
        return False
    units = _units_of(run)
    turn.fit(len(units))
    _advance_units(run, units, turn)
    _settle_groups(units)
    if (
        run.status == RunStatus.PENDING
        and any(u.workflow_name for u in units)
        and not all(u.phase in FINAL_UNIT for u in units)
    ):
        # The common first advance: a step workflow exists and the run cannot have ended, so
        # Pending → Running needs no second read (the update is conditional on Pending anyway).
        _mark_running(run.pk)
    elif turn.cut:
        pass  # units are left to create: the run cannot have ended, and its units are many
    else:
        run_refresh_status(run.pk)
    gates.after(run, units)
    _wake_quota_waiters(run)
    return turn.cut


def _wake_quota_waiters(run: WorkflowRun) -> None:
    """Units of this run that ended freed quota: the runs queued at those sites advance now
    (a unit's end admits what waits, not the next resync)."""
    from portal import tasks

    for run_id in quota_services.wake(run):
        try:
            tasks.advance_request(run_id)
        except Exception:  # noqa: BLE001 - broker down: the resync advances waiting runs
            log.warning("could not wake run %s queued for quota", run_id, exc_info=True)


def _units_of(run: WorkflowRun) -> list[UnitRun]:
    """The run's units, outputs read only for those that ended (only they have any): in a
    fan-out of thousands that are still running, decoding every row's outputs was a third
    of reading them, and every turn reads them all."""
    # ``upstream`` is read from the spec here; the column is for the pages.
    units = list(run.units.order_by("position", "id").defer("outputs", "upstream"))
    ended = dict(
        run.units.order_by()
        .filter(phase__in=list(FINAL_UNIT))
        .exclude(outputs={})
        .values_list("pk", "outputs")
    )
    for u in units:
        u.outputs = ended.get(u.pk) or {}
        # The column holds the same list as the spec (both written from the parser's unit);
        # read as a deferred field it would cost a query per unit, per pass: a 10,000-item
        # fan-out was created at 5 step workflows a second.
        u.upstream = list(u.spec.get("upstream") or ())
    return units


def _advance_units(run: WorkflowRun, units: list[UnitRun], turn: Turn) -> None:
    """Pass over the units until a pass changes nothing (``units`` grows with expanded items
    and the exit handler, and a pass sees what it added), or the turn is spent."""
    sites: dict[str, SiteState] | None = None
    blocked: frozenset[tuple[str, str]] | None = None
    allowed = outcome.continues(run)
    progressed = True
    while progressed and not turn.cut:
        progressed = False
        _settle_groups(units)
        phases = _task_phases(units)
        # Once per pass, not per unit (that was quadratic in a fan-out's size): a unit
        # submitted in this pass depends only on units that had ended when the pass began.
        outputs = upstream_outputs(units)
        ready: list[UnitRun] = []
        for unit in units:
            if unit.phase != UnitPhase.PENDING or unit.workflow_name or unit.spec.get("expanded"):
                continue
            held = _held_back(run, unit, phases, outputs, allowed)
            if held is not None:
                progressed |= held
                continue
            if unit.spec.get("with_param"):
                units.extend(_expand(run, unit, units))
                progressed = True
                continue
            if sites is None:
                sites = sites_state()
            if (
                unit.timing == UnitTiming.SUBMIT
                and not site_usable(unit.site, sites)
                and failover_unit(run, unit, units, reason=site_unusable_why(unit.site, sites))
            ):
                progressed = True
                sites = None  # failover may have read newer state; read again when needed
                continue
            if unit.timing == UnitTiming.SUBMIT and unit.upstream:
                if blocked is None:
                    blocked = _unreachable_pairs()
                # Upstream outputs its site cannot read: a copy at a relay that can (issue
                # #28), else the unit goes elsewhere.
                routed = transfers.route(run, unit, units, blocked)
                progressed |= routed.moved or bool(routed.added)
                cut = sorted(set(routed.cut))
                if cut and failover_unit(
                    run,
                    unit,
                    units,
                    reason=f"site {unit.site} cannot reach the artifact repository of "
                    f"{', '.join(cut)}, where its upstream outputs are, and no site can "
                    "relay them",
                ):
                    progressed = True
                    sites = None
                    continue
            waits = transfers.hold(unit, units)
            if waits is not None:
                progressed |= waits
                continue
            ready.append(unit)
        ready, ended = gates.admit(run, units, ready)
        progressed |= ended
        # Over its project's quota at its site: queued, not pushed to Karmada (issue 32).
        ready = quota_services.admit(run, ready, units)
        # Created in chunks, the turn checked between them: a fan-out's thousands of ready
        # units are created over several turns, other runs' advances in between.
        for start in range(0, len(ready), CREATE_CHUNK):
            if turn.spent():
                break
            chunk = ready[start : start + CREATE_CHUNK][: turn.max_creations - turn.creations]
            turn.creations += len(chunk)
            submit_units(run, chunk, units, sites, outputs)
        if turn.cut:
            return
        if (
            not progressed
            and _exit_pending(run, units)
            and all(u.phase in FINAL_UNIT for u in units)
        ):
            exit_unit = _create_exit_unit(run, units)
            if exit_unit is not None and exit_unit not in units:
                units.append(exit_unit)
                progressed = True


def _unreachable_pairs() -> frozenset[tuple[str, str]]:
    """(source, target) site pairs whose link says steps at target cannot read source's
    artifact repository."""
    return frozenset(
        SiteLink.objects.filter(artifacts_reachable=False)
        .order_by()
        .values_list("source__name", "target__name")
    )


def _held_back(
    run: WorkflowRun,
    unit: UnitRun,
    phases: Mapping[str, str | list[str] | None],
    outputs: Mapping[str, manifests.TaskOutputs],
    allowed: Mapping[str, frozenset[str]],
) -> bool | None:
    """None when ``depends`` and ``when`` let a pending unit start; otherwise whether holding
    it back moved it (omitted, skipped, errored; False while its dependencies run).
    ``allowed``: the phases each task's ``continueOn`` lets its dependents go on after."""
    try:
        verdict = manifests.evaluate_depends(unit.depends or "", phases, allowed)
    except SoftTimeLimitExceeded:
        raise
    except Exception as exc:  # noqa: BLE001 - any evaluator failure ends the unit, with why
        return _expression_failed(unit, "depends", exc)
    if verdict is None:
        return False
    if verdict is False:
        return state.unit_move(unit, UnitPhase.OMITTED, message="depends not satisfied")
    if not unit.when:
        return None
    try:
        go = manifests.evaluate_when(
            unit.when,
            run.compiled.get("parameters") or {},
            outputs,
            item=unit.spec.get("item"),
            has_item=unit.spec.get("item_index") is not None,
            inputs=_entry_inputs(run),
        )
    except manifests.WhenError as exc:
        if unit.spec.get("with_param"):
            # Argo's expandStep: a ``when`` that cannot be decided before the loop expands
            # (it reads ``{{item}}``) is decided per item, after expansion.
            return None
        return state.unit_move(unit, UnitPhase.ERROR, message=f"when: {exc}")
    except SoftTimeLimitExceeded:
        raise
    except Exception as exc:  # noqa: BLE001 - ValueError, RecursionError...: see below
        return _expression_failed(unit, "when", exc)
    if not go:
        return state.unit_move(unit, UnitPhase.SKIPPED, message=f"when '{unit.when}' is false")
    return None


def _expression_failed(unit: UnitRun, what: str, exc: BaseException) -> bool:
    """An expression the evaluator could not evaluate (a bad escape, nesting too deep, a bug
    of ours) errors the unit with the message, once, instead of failing the whole advance on
    every retry and leaving the run Running with nothing said."""
    detail = str(exc) or exc.__class__.__name__
    log.info("run %s unit %s: %s expression failed: %r", unit.run_id, unit.name, what, exc)
    return state.unit_move(
        unit,
        UnitPhase.ERROR,
        message=f"{what}: cannot evaluate: {exc.__class__.__name__}: {detail}"[:2000],
    )


EXIT_UNIT = "onExit"


def _exit_pending(run: WorkflowRun, units: list[UnitRun]) -> bool:
    """The run has an exit handler that has not been created yet."""
    return bool(run.compiled.get("on_exit")) and not any(
        u.spec.get("kind") == "exit" for u in units
    )


def _exit_arguments(spec: Mapping[str, Any]) -> parser.Arguments:
    """A workflow-level exit hook's own arguments (``LifecycleHook.WithArgs`` in Argo's
    `pkg/apis/workflow/v1alpha1/workflow_types.go`: the hook's, else the workflow's, which
    every step workflow carries anyway); ``onExit`` has none of its own."""
    hooks = spec.get("hooks")
    hook = hooks.get("exit") if isinstance(hooks, Mapping) and not spec.get("onExit") else None
    return parser.parse_arguments(hook.get("arguments") if isinstance(hook, Mapping) else None)


def _create_exit_unit(
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
        event(run.pk, "exit-handler", f"all units ended ({status}); running onExit", row)
        if decision.site is None:
            state.unit_move(row, UnitPhase.ERROR, message=f"no site can run it: {decision.reason}")
    return row


def _mark_running(run_id: int) -> bool:
    now = timezone.now()
    return state.run_move(
        run_id, RunStatus.RUNNING, from_=[RunStatus.PENDING], started_at=now, updated_at=now
    )


def run_refresh_status(run_id: int) -> str:
    """Derive the run's status from its units (conditional: never leaves Stopped).

    All units ended: the entrypoint's DAG or steps template as Argo assesses it
    (``outcome.decide``), Failed if the exit handler failed. Otherwise Running once a unit
    was submitted.
    """
    run = WorkflowRun.objects.get(pk=run_id)
    if run.status not in ACTIVE_RUN:
        return run.status
    units = list(run.units.all())
    now = timezone.now()
    if units and all(u.phase in FINAL_UNIT for u in units) and not _exit_pending(run, units):
        decided = outcome.decide(run, units)
        new, extra = decided.status, []
        exit_unit = next((u for u in units if u.spec.get("kind") == "exit"), None)
        if exit_unit is not None and exit_unit.phase in (UnitPhase.FAILED, UnitPhase.ERROR):
            new = RunStatus.FAILED if new == RunStatus.SUCCEEDED else new
            extra.append(exit_unit)
        message = outcome.message(decided, extra)
        changed = state.run_move(
            run.pk, new, from_=[run.status], finished_at=now, updated_at=now, message=message
        )
        if changed:
            event(
                run.pk, "run-finished", f"Run {new.lower()}" + (f": {message}" if message else "")
            )
        return new if changed else run.status
    if run.status == RunStatus.PENDING and any(u.workflow_name for u in units):
        _mark_running(run.pk)
        return RunStatus.RUNNING
    return run.status


def _shutdown(run: WorkflowRun) -> None:
    """A stopped run: running step workflows get its ``spec.shutdown`` (``Stop`` unless the
    user asked to terminate); units that never started are omitted. The exit handler is not
    stopped: Argo's ``Stop`` runs it (``_exit_after_stop``)."""
    strategy = gates.shutdown_strategy(run)
    for unit in run.units.filter(phase__in=[UnitPhase.PENDING, UnitPhase.RUNNING]):
        if unit.spec.get("kind") == "exit":
            continue
        if unit.workflow_name:
            if not unit.spec.get("shutdown_sent"):
                with contextlib.suppress(gateway.NotFound):
                    gateway.patch(
                        gateway.WORKFLOW, unit.workflow_name, {"spec": {"shutdown": strategy}}
                    )
                UnitRun.objects.filter(pk=unit.pk).update(spec={**unit.spec, "shutdown_sent": True})
        elif not unit.spec.get("expanded"):
            state.unit_move(unit, UnitPhase.OMITTED, message="run stopped")


def _exit_after_stop(run: WorkflowRun) -> None:
    """Argo's ``Stop`` runs the workflow's exit handler once the stopped steps have ended
    (``{{workflow.status}}`` Failed); ``Terminate`` does not."""
    if gates.shutdown_strategy(run) != "Stop" or not run.compiled.get("on_exit"):
        return
    units = _units_of(run)
    if not all(u.phase in FINAL_UNIT for u in units if u.spec.get("kind") != "exit"):
        return
    exit_unit = next((u for u in units if u.spec.get("kind") == "exit"), None)
    if exit_unit is None:
        # A stopped workflow is Failed to Argo ("Stopped with strategy 'Stop'").
        exit_unit = _create_exit_unit(run, units, status=RunStatus.FAILED)
    if exit_unit is None or exit_unit.phase != UnitPhase.PENDING or exit_unit.workflow_name:
        return
    submit_units(run, [exit_unit], [*units, exit_unit], None, upstream_outputs(units))
