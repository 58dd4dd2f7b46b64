"""Failover: units at sites lost for longer than the grace period are placed again elsewhere;
runs that nothing would move on are found for the resync."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from placement import codec, planner
from portal import state
from portal.choices import ACTIVE_RUN, FINAL_UNIT, DecisionSource, RunStatus, UnitPhase, UnitTiming
from portal.controller import transfers
from portal.controller.cleanup import superseded_remember
from portal.controller.common import ancestors, event, upstream_where
from portal.karmada import client, errors, resources
from portal.models import PlacementDecision, RunEvent, UnitRun, WorkflowRun
from portal.planning import held_by, holds_changed, planner_snapshot
from sites.models import Site

log = logging.getLogger(__name__)


def failover_unit(
    run: WorkflowRun,
    unit: UnitRun,
    units: Iterable[UnitRun],
    reason: str,
    *,
    replaced: bool = False,
) -> bool:
    """Place the unit again without its lost site, as a new attempt (decision "failover").
    ``replaced``: Karmada refused the step there; the decision says "re-placed: <reason>"
    and the new attempt starts with no message."""
    lost = unit.site
    units = list(units)
    decision = _decide(run, unit, units, lost)
    if (
        decision.site is None
        and isinstance(decision, transfers.RelayDecision)
        and (unit.workflow_name or unit.phase != UnitPhase.PENDING)
    ):
        return _copy_lost(run, unit, f"{reason}; no other relay: {decision.reason}")
    if decision.site is None:
        _blocked(run, unit, f"{unit.name}: {reason}; no other site: {decision.reason}")
        return False
    old_name = unit.workflow_name
    if not _move(run, unit, decision, decision.site, reason, replaced=replaced):
        return False
    if old_name:
        try:
            client.delete(resources.WORKFLOW, old_name)
        except errors.KarmadaError as exc:
            # Karmada is unreachable: the old attempt's name no longer matches the unit, so
            # whatever it reports later is ignored, and the resync deletes it then.
            log.info("could not delete %s after failover: %s", old_name, exc)
            superseded_remember(unit, old_name)
    return True


def _decide(
    run: WorkflowRun, unit: UnitRun, units: list[UnitRun], lost: str
) -> planner.Decision | transfers.RelayDecision:
    """Where the unit goes instead of ``lost``: the planner's choice, or, for a copy,
    another relay."""
    decision: planner.Decision | transfers.RelayDecision
    if transfers.is_transfer(unit):
        # A copy goes to another relay, chosen as the first was (relays.py), not by rules.
        relay = transfers.relay_again(run, unit, units, lost)
        decision = transfers.RelayDecision(
            relay,
            f"relay {relay}: it reads the producer's repository and the reader reads it"
            if relay
            else "no other site reads the producer's repository and is read by the reader",
        )
    else:
        spec = codec.unit_from_dict(unit.spec)
        upstream = upstream_where(units, succeeded_only=True)
        view = planner_snapshot()
        decision = planner.decide(
            spec,
            view.fleet,
            view.rules,
            view.datasets,
            project=run.project.name if run.project else None,
            upstream_sites=upstream,
            exclude_sites=[lost] if lost else [],
            timing="submit",
            ancestors=ancestors(unit, units),
        )
    return decision


def _blocked(run: WorkflowRun, unit: UnitRun, message: str) -> None:
    """No other site can take the unit. Tried again at every advance and resync while the
    site stays closed: one event says so until something changes (the run page shows a
    banner meanwhile)."""
    last = RunEvent.objects.filter(run_id=run.pk, unit=unit).order_by("-created_at", "-id")
    previous = last.values_list("kind", "message").first()
    if previous != ("failover-blocked", message):
        event(run.pk, "failover-blocked", message, unit)


def _move(
    run: WorkflowRun,
    unit: UnitRun,
    decision: planner.Decision | transfers.RelayDecision,
    site: str,
    reason: str,
    *,
    replaced: bool,
) -> bool:
    """The unit at the decided ``site``, Pending with no step workflow, its decision and event
    recorded, in one transaction; False when the unit changed meanwhile."""
    why = f"re-placed: {reason}; " if replaced else f"failover from {unit.site}: "
    old_name = unit.workflow_name
    # A unit with no step workflow yet (a retried unit whose site was closed meanwhile) has
    # not run this attempt anywhere: it is placed again within the same attempt, so attempts
    # count by one, and nothing ended to record.
    started = bool(old_name) or unit.phase != UnitPhase.PENDING
    attempt = unit.attempt + 1 if started else unit.attempt
    ended = unit.attempt_record(ended="failed over", why=reason) if started else None
    now = timezone.now()
    held = held_by([unit])
    with transaction.atomic():
        changed = state.units_move(
            UnitRun.objects.filter(pk=unit.pk, attempt=unit.attempt, workflow_name=old_name),
            UnitPhase.PENDING,
            from_=[UnitPhase.PENDING, UnitPhase.RUNNING],
            attempt=attempt,
            timing=UnitTiming.SUBMIT,
            workflow_name="",
            submitted_at=None,
            started_at=None,
            reason=f"{why}{decision.reason}",
            refused_at=None,
            updated_at=now,
            **({"message": ""} if replaced else {}),
        )
        if not changed:
            return False
        # Placed over the site the unit was read at; placed elsewhere meanwhile, nothing moves.
        if not state.unit_place(
            UnitRun.objects.filter(pk=unit.pk, attempt=attempt), site, from_sites=[unit.site]
        ):
            transaction.set_rollback(True)
            return False
        _moved(unit, attempt, site, f"{why}{decision.reason}")
        holds_changed(held, held_by([unit]))
        _record(run, unit, decision)
        event(
            run.pk,
            "failover",
            f"{unit.name}: {reason}; attempt {unit.attempt} at {site}"
            if started
            else f"{unit.name}: {reason}; attempt {unit.attempt} placed at {site} instead",
            unit,
            data={"ended_attempt": ended} if ended else {},
        )
    return True


def _moved(unit: UnitRun, attempt: int, site: str, reason: str) -> None:
    """``unit`` as the move left its row; copies relayed for the site it leaves are dropped
    (the new site routes its own)."""
    if (unit.spec or {}).get("via"):
        unit.spec = {k: v for k, v in unit.spec.items() if k != "via"}
        UnitRun.objects.filter(pk=unit.pk).update(spec=unit.spec)
    unit.attempt = attempt
    unit.site = site
    unit.phase = UnitPhase.PENDING
    unit.workflow_name = ""
    unit.timing = UnitTiming.SUBMIT
    unit.reason = reason


def _record(
    run: WorkflowRun, unit: UnitRun, decision: planner.Decision | transfers.RelayDecision
) -> None:
    """The new attempt's decision row (source "failover")."""
    if isinstance(decision, transfers.RelayDecision):
        PlacementDecision.objects.create(
            run=run,
            unit=unit,
            attempt=unit.attempt,
            source=DecisionSource.FAILOVER,
            timing=UnitTiming.SUBMIT,
            site=unit.site,
            reason=unit.reason,
        )
    else:
        PlacementDecision.from_plan(
            decision,
            reason=unit.reason,
            run=run,
            unit=unit,
            attempt=unit.attempt,
            source=DecisionSource.FAILOVER,
        ).save()


def _copy_lost(run: WorkflowRun, unit: UnitRun, message: str) -> bool:
    """A copy lost mid-way with no other relay ends in Error saying so; its readers then end
    in Error naming it (``transfers.hold``) rather than wait, unexplained, for a site that
    may never return. A copy not started yet waits like any unit. Its step workflow stays,
    as a failed unit's does: the run's end deletes it."""
    if not state.unit_move(unit, UnitPhase.ERROR, message=message):
        return False
    event(run.pk, "failover-blocked", f"{unit.name}: {message}", unit)
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
        if failover_unit(unit.run, unit, units, reason=f"site {unit.site} not ready"):
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
    # A unit that depends on nothing and still has no step workflow is one a turn left to
    # the next (a big fan-out); if that turn's request was lost, nothing in flight will ask
    # for it, so such runs count even with work in flight (a healthy run has none for long).
    ready = waiting.filter(depends="", expanded=False)
    stuck = (
        WorkflowRun.objects.filter(status__in=ACTIVE_RUN, created_at__lt=cutoff)
        .exclude(Exists(units.filter(updated_at__gte=cutoff)))
        .filter((~Exists(in_flight) & (Exists(waiting) | ~Exists(unfinished))) | Exists(ready))
        .values_list("pk", flat=True)
    )
    stopping = (
        WorkflowRun.objects.filter(status=RunStatus.STOPPED)
        .filter(Exists(in_flight.filter(updated_at__lt=cutoff)))
        .values_list("pk", flat=True)
    )
    return sorted({*stuck, *stopping})
