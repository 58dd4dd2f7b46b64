"""Advancing a run: skip or omit what can no longer run, expand withParam, create the step
workflows of units whose dependencies are done, run the exit handler, settle the status."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from django.conf import settings

from placement import manifests
from portal.choices import ACTIVE_RUN, FINAL_UNIT, RunStatus, UnitPhase, UnitTiming
from portal.controller import gates, kept, outcome, submit, transfers, workqueue
from portal.controller.common import (
    SiteState,
    site_unusable_why,
    site_usable,
    sites_state,
)
from portal.controller.depends import held_back, task_phases
from portal.controller.exit_handler import create_exit_unit, exit_after_stop, exit_pending
from portal.controller.expand import expand
from portal.controller.failover import failover_unit
from portal.controller.status import mark_running, run_refresh_status, settle_groups, shutdown
from portal.controller.step_workflow import folder_or_none
from portal.models import UnitRun, WorkflowRun
from portal.quotas import admit as quota_admit
from portal.quotas import waking as quota_waking
from portal.selectors import upstream_outputs
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
    sized: bool = False  # ``creating`` has sized the turn's time
    # Asked when the budget is spent: whether the turn may go on for another (nobody waits
    # for it to end, the run is still active). None: it never does.
    go_on: Callable[[], bool] | None = None
    began: float = field(default_factory=time.monotonic)

    def fit(self, units: int) -> None:
        """Size the turn to the run, once its units are read: a turn of a big run may create
        a fifth of them."""
        self.max_creations = max(self.max_creations, units // 5)

    def creating(self) -> None:
        """The turn's first creates are about to be sent: it may last four times what it
        took to come this far (reading the units, and the passes over all of them that
        decide what is ready), so that at most a fifth of a turn is overhead. With a third,
        a 10,000-item fan-out spent a third of its creation re-reading its units; with the
        units kept between turns (``kept``) the read is short but the passes are not, and
        turns sized by the read alone made a 50,000-item fan-out's turns mostly passes.
        Other projects are not kept waiting longer: a project holds one turn at a time, and
        what users wait on goes ahead of turns (``fairness``)."""
        if self.sized:
            return
        self.sized = True
        self.seconds = max(self.seconds, 4 * (time.monotonic() - self.started))
        self.started = time.monotonic()

    def spent(self) -> bool:
        # A turn always creates something: one that only read the units would come back
        # forever without progress.
        if self.creations and (
            self.creations >= self.max_creations or time.monotonic() - self.started >= self.seconds
        ):
            if self._goes_on():
                self.creations, self.started = 0, time.monotonic()
            else:
                self.cut = True
        return self.cut

    def _goes_on(self) -> bool:
        """Another budget, when nobody waits for this one to end and the turn stays inside
        ``PORTAL_ADVANCE_TURN_MAX_SECONDS``: yielding then only made the next turn read the
        run and pass over its units again. Asked once per budget, so a stop or another
        project's turn waits no longer than a budget, as before."""
        if self.go_on is None:
            return False
        elapsed = time.monotonic() - self.began
        if elapsed + self.seconds > settings.PORTAL_ADVANCE_TURN_MAX_SECONDS:
            return False
        return self.go_on()


def run_advance(run_id: int, turn: Turn | None = None) -> bool:
    """Move a run on: skip or omit what can no longer run, expand withParam, create the step
    workflows of every unit whose dependencies are done (within ``turn``), and settle the
    run's status. True when the turn ran out with work left (the caller asks again).

    Callers that may run concurrently for one run go through ``portal.controller.worker``."""
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
    if run.status not in ACTIVE_RUN:
        kept.forget(run)
    if run.status == RunStatus.STOPPED:
        shutdown(run)
        gates.after(run, [])
        exit_after_stop(run)
        return False
    if run.status not in ACTIVE_RUN:
        return False
    units = kept.kept_units_of(run)
    turn.fit(len(units))
    if turn.go_on is None:
        turn.go_on = lambda: _nobody_waits(run)
    _advance_units(run, units, turn)
    settle_groups(units)
    if (
        run.status == RunStatus.PENDING
        and any(u.workflow_name for u in units)
        and not all(u.phase in FINAL_UNIT for u in units)
    ):
        # The common first advance: a step workflow exists and the run cannot have ended, so
        # Pending → Running needs no second read (the update is conditional on Pending anyway).
        mark_running(run.pk)
    elif turn.cut:
        pass  # units are left to create: the run cannot have ended, and its units are many
    else:
        run_refresh_status(run.pk)
    gates.after(run, units)
    _wake_quota_waiters(run)
    if not turn.cut:
        kept.forget(run)
    return turn.cut


def _nobody_waits(run: WorkflowRun) -> bool:
    """Whether the run's turn may go on: no other run waits for a turn, no prompt advance is
    queued or running, and the run was not stopped meanwhile."""
    if not workqueue.nobody_waits(run.project_id or workqueue.NO_PROJECT):
        return False
    return WorkflowRun.objects.filter(pk=run.pk, status__in=ACTIVE_RUN).exists()


def _wake_quota_waiters(run: WorkflowRun) -> None:
    """Units of this run that ended freed quota: the runs queued at those sites advance now
    (a unit's end admits what waits, not the next resync)."""
    for run_id in quota_waking.wake(run):
        try:
            workqueue.add(run_id)
        except Exception:  # noqa: BLE001 - broker down: the resync advances waiting runs
            log.warning("could not wake run %s queued for quota", run_id, exc_info=True)


@dataclass
class _Fleet:
    """What a pass reads of the fleet, once, when a unit first needs it."""

    sites: dict[str, SiteState] | None = None
    blocked: frozenset[tuple[str, str]] | None = None

    def sites_now(self) -> dict[str, SiteState]:
        if self.sites is None:
            self.sites = sites_state()
        return self.sites

    def blocked_now(self) -> frozenset[tuple[str, str]]:
        if self.blocked is None:
            self.blocked = _unreachable_pairs()
        return self.blocked


def _advance_units(run: WorkflowRun, units: list[UnitRun], turn: Turn) -> None:
    """Pass over the units until a pass changes nothing (``units`` grows with expanded items
    and the exit handler, and a pass sees what it added), or the turn is spent."""
    fleet = _Fleet()
    allowed = outcome.continues(run)
    progressed = True
    while progressed and not turn.cut:
        settle_groups(units)
        # Once per pass, not per unit (that was quadratic in a fan-out's size): a unit
        # submitted in this pass depends only on units that had ended when the pass began.
        outputs = upstream_outputs(units)
        ready, progressed = _ready_units(run, units, outputs, allowed, fleet)
        ready, ended = gates.admit(run, units, ready)
        progressed |= ended
        # Over its project's quota at its site: queued, not pushed to Karmada.
        ready = quota_admit.admit(run, ready, units)
        _create_chunks(run, ready, units, fleet, outputs, turn)
        if turn.cut:
            return
        if (
            not progressed
            and exit_pending(run, units)
            and all(u.phase in FINAL_UNIT for u in units)
        ):
            exit_unit = create_exit_unit(run, units)
            if exit_unit is not None and exit_unit not in units:
                units.append(exit_unit)
                progressed = True


def _create_chunks(
    run: WorkflowRun,
    ready: list[UnitRun],
    units: list[UnitRun],
    fleet: _Fleet,
    outputs: Mapping[str, manifests.TaskOutputs],
    turn: Turn,
) -> None:
    """Create ``ready`` in chunks, the turn checked between them: a fan-out's thousands of
    ready units are created over several turns, other runs' advances in between. A chunk's
    bodies are built while the chunk before it is being created (building them was a third
    of what the advance did between two chunks' creates)."""
    in_flight: submit.Creates | None = None
    if not ready:
        return
    turn.creating()
    shared = submit.pass_shared(run, units)
    try:
        for start in range(0, len(ready), CREATE_CHUNK):
            if turn.spent():
                break
            chunk = ready[start : start + CREATE_CHUNK][: turn.max_creations - turn.creations]
            turn.creations += len(chunk)
            sent = submit.creates_start(run, chunk, units, fleet.sites, outputs, shared)
            previous, in_flight = in_flight, sent
            if previous is not None:
                submit.creates_finish(run, previous)
    finally:
        # Claimed whatever happened to the chunk before it: a create that Karmada made is
        # recorded (or, after a crash, found again by name and claimed by the next advance).
        if in_flight is not None:
            submit.creates_finish(run, in_flight)


def _ready_units(
    run: WorkflowRun,
    units: list[UnitRun],
    outputs: Mapping[str, manifests.TaskOutputs],
    allowed: Mapping[str, frozenset[str]],
    fleet: _Fleet,
) -> tuple[list[UnitRun], bool]:
    """One pass: the pending units that may be created now, and whether the pass moved
    anything (units held back, expanded, placed elsewhere, copies routed)."""
    phases = task_phases(units)
    ready: list[UnitRun] = []
    progressed = False
    for unit in units:  # grows with expanded items: the pass sees them
        if unit.phase != UnitPhase.PENDING or unit.workflow_name or unit.expanded:
            continue
        held = held_back(run, unit, phases, outputs, allowed)
        if held is not None:
            progressed |= held
            continue
        if unit.spec.get("with_param"):
            units.extend(expand(run, unit, units))
            progressed = True
            continue
        elsewhere, moved = _placed_elsewhere(run, unit, units, fleet)
        progressed |= moved
        if elsewhere:
            continue
        waits = transfers.hold(unit, units)
        if waits is not None:
            progressed |= waits
            continue
        ready.append(unit)
    return ready, progressed


def _placed_elsewhere(
    run: WorkflowRun, unit: UnitRun, units: list[UnitRun], fleet: _Fleet
) -> tuple[bool, bool]:
    """Whether a unit placed at submission went to another site (its own is closed, or
    cannot read its upstream outputs and no relay can copy them there), and whether
    anything moved (copies routed for it, also for a unit the webhook places)."""
    sites = fleet.sites_now()
    if (
        unit.timing == UnitTiming.SUBMIT
        and not site_usable(unit.site, sites)
        and failover_unit(run, unit, units, reason=site_unusable_why(unit.site, sites))
    ):
        fleet.sites = None  # failover may have read newer state; read again when needed
        return True, True
    if not unit.upstream:
        return False, False
    if unit.timing != UnitTiming.SUBMIT:
        # Placed by the webhook: its site is unknown, so a folder is copied where it is.
        routed = transfers.route_at_runtime(run, unit, units, folder_or_none)
        return False, routed.moved or bool(routed.added)
    # Upstream outputs its site cannot read: a copy at a relay that can, else the unit goes
    # elsewhere.
    routed = transfers.route(run, unit, units, fleet.blocked_now(), folder_or_none)
    cut = sorted(set(routed.cut))
    if cut and failover_unit(
        run,
        unit,
        units,
        reason=f"site {unit.site} cannot reach the artifact repository of "
        f"{', '.join(cut)}, where its upstream outputs are, and no site can "
        "relay them",
    ):
        fleet.sites = None
        return True, True
    return False, routed.moved or bool(routed.added)


def _unreachable_pairs() -> frozenset[tuple[str, str]]:
    """(source, target) site pairs whose link says steps at target cannot read source's
    artifact repository."""
    return frozenset(
        SiteLink.objects.filter(artifacts_reachable=False)
        .order_by()
        .values_list("source__name", "target__name")
    )
