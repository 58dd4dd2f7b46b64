"""Creating step workflows: a runtime unit's fallback site decided, the bodies created on
karmada-apiserver (several at once), and the created ones claimed by their units."""

from __future__ import annotations

import concurrent.futures
import functools
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from placement import codec, manifests, planner
from placement.context import ancestor_names
from placement.revisions.selectors import active_revision_id, submission_revision_id
from portal import labels, state
from portal.choices import UnitPhase, UnitTiming
from portal.controller import cleanup
from portal.controller.common import SiteState, ancestors, event, upstream_where
from portal.controller.step_workflow import (
    CannotSign,
    RuntimeInputs,
    RunWide,
    run_wide_of,
    step_workflow_for,
)
from portal.karmada import client, errors, resources
from portal.models import RunEvent, UnitRun, WorkflowRun
from portal.planning import PlannerSnapshot, planner_snapshot
from portal.quotas import selectors as quota_selectors

WAITING = "waiting:"


class NoEligibleSite(Exception):
    """No site satisfies the unit's hard constraints now: it waits unsubmitted."""


def runtime_decision(
    run: WorkflowRun,
    unit: UnitRun,
    units: Iterable[UnitRun],
    only: Iterable[str] | None = None,
    *,
    strict_capacity: bool = False,
    view: PlannerSnapshot | None = None,
) -> planner.Decision:
    """The planner's decision for a runtime unit from the newest state, capacity a
    preference (not a filter) unless ``strict_capacity`` (as the webhook decides); ``only``:
    the sites it may go to (None: any). ``units``: the run's, or at least the unit's
    ancestors (nothing else is read); ``view``: the planner's snapshot, when the caller took
    one for several units."""
    units = list(units)
    upstream = upstream_where(units, succeeded_only=True)
    view = planner_snapshot() if view is None else view
    allowed = None if only is None else set(only)
    return planner.decide(
        codec.unit_from_dict(unit.spec),
        view.fleet,
        view.rules,
        view.datasets,
        project=run.project.name if run.project_id and run.project else None,
        upstream_sites=upstream,
        exclude_sites=()
        if allowed is None
        else [s.name for s in view.fleet.sites if s.name not in allowed],
        timing="runtime",
        strict_capacity=strict_capacity,
        ancestors=ancestors(unit, units),
        # As the webhook: the step workflow is built, its inputs are read where they are.
        relays=False,
    )


def fallback_site(
    run: WorkflowRun,
    unit: UnitRun,
    units: Iterable[UnitRun],
    runtime: RuntimeInputs | None = None,
    view: PlannerSnapshot | None = None,
) -> str:
    """Where a runtime unit goes if the webhook cannot answer: the planner's choice from the
    newest state among the sites that satisfy every hard constraint (residency, hardware,
    pins, cordons, readiness) and that its project's quotas admitted it for; free capacity
    is a preference here, not a filter, since the unit may wait in the site's queue. Raises
    ``NoEligibleSite`` with the planner's reason. ``runtime`` and ``view``: the unit's
    ancestors and admitted sites, and the snapshot, when the caller has them."""
    if runtime is None:
        runtime = RuntimeInputs(list(units), quota_selectors.admitted_sites(unit))
    decision = runtime_decision(run, unit, runtime.related, runtime.admitted, view=view)
    if decision.site is None:
        raise NoEligibleSite(decision.reason)
    return decision.site


class Revisions:
    """The rule revision a step workflow came from (annotation ``<domain>/rules-revision``):
    the submission's for a unit placed at submission and still at that site, the one active
    now for the others (a runtime unit's fallback site is decided now, from the newest state;
    the webhook's patch replaces it with the revision active when it decides; a failover's
    site was decided from the active one). Each is read once, when first needed."""

    def __init__(self, run: WorkflowRun) -> None:
        self.run_id = run.pk
        self.read: dict[str, int | None] = {}

    def next_chunk(self) -> None:
        """A pass's next chunk reads the active revision again (a rule change between two
        chunks is seen by the second, as each runtime unit's fallback site is); the
        submission's never changes."""
        self.read.pop("active", None)

    def of(self, unit: UnitRun) -> int | None:
        submitted = (
            bool(unit.site) and unit.timing == UnitTiming.SUBMIT and unit.site == unit.planned_site
        )
        which = "submission" if submitted else "active"
        if which not in self.read:
            self.read[which] = (
                submission_revision_id(self.run_id) if submitted else active_revision_id()
            )
        return self.read[which]

    def annotate(self, body: dict[str, Any], unit: UnitRun) -> None:
        revision = self.of(unit)
        if revision is not None:
            body["metadata"]["annotations"][labels.key(labels.RULES_REVISION)] = str(revision)


def _is_ours(obj: Mapping[str, Any], run: WorkflowRun, unit: UnitRun) -> bool:
    have = (obj.get("metadata") or {}).get("labels") or {}
    return (
        have.get(labels.key(labels.RUN)) == str(run.pk)
        and have.get(labels.key(labels.UNIT)) == unit.slug
        and have.get(labels.key(labels.ATTEMPT)) == str(unit.attempt)
    )


def _wait_for_a_site(run: WorkflowRun, unit: UnitRun, why: str) -> None:
    """Leave the unit Pending and unsubmitted, saying why; the resync advances the run again
    (``stale_runs``) and the next attempt to submit decides from the newest state."""
    reason = f"{WAITING} no site satisfies its hard constraints now ({why})"
    if unit.reason == reason:
        return
    unit.reason = reason
    UnitRun.objects.filter(pk=unit.pk, attempt=unit.attempt).update(
        reason=reason, updated_at=timezone.now()
    )
    event(run.pk, "unit-waiting", f"{unit.name}: {reason}", unit)


def _waiting_for_karmada(run: WorkflowRun, unit: UnitRun, exc: errors.KarmadaError) -> None:
    """A unit that cannot be created while Karmada is unreachable stays Pending, and the run
    page and the API say why: its message, and one event per outage (not one per retry)."""
    message = f"waiting for Karmada: {exc.message}"[:2000]
    said = (
        UnitRun.objects.filter(
            pk=unit.pk, attempt=unit.attempt, workflow_name="", phase=UnitPhase.PENDING
        )
        .exclude(message__startswith="waiting for Karmada:")
        .update(message=message)
    )
    unit.message = message
    if said:
        event(run.pk, "karmada-unavailable", f"{unit.name}: {message}", unit)


def _create(body: dict[str, Any], run: WorkflowRun, unit: UnitRun) -> str | None:
    """Create one step workflow (in a pool thread: Karmada only, no database). None when it
    exists now and is ours; else why the unit cannot run. ``TransientError`` goes up."""
    name = body["metadata"]["name"]
    try:
        client.create(resources.WORKFLOW, body)
    except errors.AlreadyExists:
        if not _is_ours(client.get(resources.WORKFLOW, name), run, unit):
            return f"a foreign Workflow {name} already exists"
    except errors.PermanentError as exc:
        return f"Karmada refused the step workflow: {exc}"
    return None


def submit_units(
    run: WorkflowRun,
    ready: Sequence[UnitRun],
    units: Iterable[UnitRun],
    sites: Mapping[str, SiteState] | None,
    outputs: Mapping[str, manifests.TaskOutputs],
) -> int:
    """Create the step workflows of many units at once, as a fan-out needs: bodies built
    here, the creates ``PORTAL_CREATE_CONCURRENCY`` at a time against Karmada (each
    idempotent, with the gateway's backoff on 429/5xx), then one conditional UPDATE that
    claims every created unit still Pending at the same attempt, and their events in one
    INSERT. Returns how many were claimed. A unit whose body cannot be built, or that Karmada
    refuses for good, ends in Error with why. Karmada unreachable: what was created is
    claimed, the first unit left says why, and ``TransientError`` goes up for the task to
    back off."""
    return creates_finish(run, creates_start(run, ready, units, sites, outputs))


@dataclass
class Creates:
    """A chunk's creates in flight (``creates_start``), claimed by ``creates_finish``: the
    advance builds the next chunk's bodies while Karmada answers these."""

    bodies: list[tuple[UnitRun, dict[str, Any]]]
    futures: list[concurrent.futures.Future[str | None]] | None = None


@dataclass
class PassShared:
    """What every chunk of one pass reads of the whole run, taken once when the pass creates
    its first chunk: the ``{{workflow.*}}`` variables and global outputs (``run_wide_of``, two
    walks over every unit) and the rule revisions. Per chunk of fifty, those walks were a
    quarter of the advancing thread's time in a 10,000-item fan-out. Like ``upstream_outputs``,
    taken once per pass: what a unit of the pass reads had ended when the pass began.

    For runtime units (their fallback site and placement context), the run's units by name
    and each one's upstream, once per pass; the planner's snapshot and the sites their quotas
    admitted, once per chunk. A runtime fan-out cost 14 ms of the worker a unit, each unit
    reading the snapshot and its admitted sites (twice) from the database and indexing every
    unit of the run three times."""

    units: list[UnitRun]
    run_wide: RunWide
    revisions: Revisions
    view: PlannerSnapshot | None = None
    admitted: dict[int, list[str] | None] = field(default_factory=dict)

    def next_chunk(self, ready: Sequence[UnitRun]) -> None:
        """Before a chunk's bodies: the active revision, the snapshot and the admitted sites
        read again for it (a rule change or a quota admission between two chunks reaches the
        second)."""
        self.revisions.next_chunk()
        self.view = None
        self.admitted = quota_selectors.admitted_sites_of(ready)

    @functools.cached_property
    def by_name(self) -> dict[str, UnitRun]:
        """The run's units by name, indexed when the pass's first runtime unit needs them."""
        return {u.name: u for u in self.units}

    @functools.cached_property
    def upstream_of(self) -> dict[str, Any]:
        return {n: u.upstream for n, u in self.by_name.items()}

    def runtime_inputs(self, unit: UnitRun) -> RuntimeInputs:
        """A runtime unit's ancestors' rows (what its context and fallback read of the run)
        and its admitted sites (read for its chunk)."""
        names = ancestor_names(unit.upstream or (), self.upstream_of)
        return RuntimeInputs([self.by_name[n] for n in names], self.admitted.get(unit.pk))

    def snapshot(self) -> PlannerSnapshot:
        if self.view is None:
            self.view = planner_snapshot()
        return self.view


def pass_shared(run: WorkflowRun, units: Iterable[UnitRun]) -> PassShared:
    units = units if isinstance(units, list) else list(units)
    return PassShared(units, run_wide_of(run, units), Revisions(run))


def creates_start(
    run: WorkflowRun,
    ready: Sequence[UnitRun],
    units: Iterable[UnitRun],
    sites: Mapping[str, SiteState] | None,
    outputs: Mapping[str, manifests.TaskOutputs],
    shared: PassShared | None = None,
) -> Creates:
    """The ready units' bodies built and, with a pool of create threads, their creates sent.
    ``shared``: the pass's, when it creates in chunks."""
    units = list(units)
    if shared is None:
        shared = pass_shared(run, units)
    shared.next_chunk(ready)
    bodies = _bodies(run, ready, units, sites, outputs, shared)
    if not bodies or settings.PORTAL_CREATE_CONCURRENCY <= 1:
        return Creates(bodies)
    pool = _create_pool(settings.PORTAL_CREATE_CONCURRENCY)
    return Creates(bodies, [pool.submit(_create, b, run, u) for u, b in bodies])


def creates_finish(run: WorkflowRun, creates: Creates) -> int:
    """Wait for the chunk's creates, end the refused units, claim the created ones; a
    transient error goes up once what was created is claimed."""
    if not creates.bodies:
        return 0
    created: list[tuple[UnitRun, str]] = []
    transient: tuple[UnitRun, errors.TransientError] | None = None
    for unit, body, why, failure in _created(run, creates):
        if failure is not None:
            transient = transient or (unit, failure)
        elif why is not None:
            state.unit_move(unit, UnitPhase.ERROR, message=why)
        else:
            created.append((unit, body["metadata"]["name"]))
    claimed = _claim(run, created)
    cleanup.unclaimed_delete(created, claimed)
    if transient is not None:
        _waiting_for_karmada(run, *transient)
        raise transient[1]
    return len(claimed)


def _bodies(
    run: WorkflowRun,
    ready: Sequence[UnitRun],
    units: list[UnitRun],
    sites: Mapping[str, SiteState] | None,
    outputs: Mapping[str, manifests.TaskOutputs],
    shared: PassShared,
) -> list[tuple[UnitRun, dict[str, Any]]]:
    """The step workflows to create: each ready unit's body, annotated with its rule
    revision. A unit whose body cannot be built ends in Error; a runtime unit no site can
    take now waits unsubmitted."""
    bodies: list[tuple[UnitRun, dict[str, Any]]] = []
    for unit in ready:
        runtime = None if unit.site else shared.runtime_inputs(unit)
        try:
            body = step_workflow_for(
                run,
                unit,
                units,
                sites,
                outputs=outputs,
                run_wide=shared.run_wide,
                runtime=runtime,
            )
        except manifests.Unresolved as exc:
            state.unit_move(unit, UnitPhase.ERROR, message=f"cannot resolve arguments: {exc}")
            continue
        except CannotSign as exc:
            state.unit_move(unit, UnitPhase.ERROR, message=str(exc))
            continue
        if not unit.site:
            # A runtime step carries a fallback site that satisfies every hard constraint,
            # so it never lands where it must not with the webhook down.
            try:
                fallback = fallback_site(run, unit, units, runtime, shared.snapshot())
            except NoEligibleSite as exc:
                _wait_for_a_site(run, unit, str(exc))
                continue
            body["metadata"]["labels"][labels.key(labels.FALLBACK_SITE)] = fallback
        shared.revisions.annotate(body, unit)
        bodies.append((unit, body))
    return bodies


Created = tuple[UnitRun, dict[str, Any], str | None, errors.TransientError | None]


def _created(run: WorkflowRun, creates: Creates) -> list[Created]:
    """Each body created (``_create``): with its unit, why Karmada refused it (None:
    created) or the transient error that stopped it. One at a time (no futures), the first
    transient error ends the creates; in a pool, every create is tried."""
    results: list[Created] = []
    if creates.futures is None:
        for unit, body in creates.bodies:
            try:
                results.append((unit, body, _create(body, run, unit), None))
            except errors.TransientError as exc:
                results.append((unit, body, None, exc))
                break
        return results
    for (unit, body), future in zip(creates.bodies, creates.futures, strict=True):
        try:
            results.append((unit, body, future.result(), None))
        except errors.TransientError as exc:
            results.append((unit, body, None, exc))
    return results


_pool: tuple[int, int, concurrent.futures.ThreadPoolExecutor] | None = None
_pool_lock = threading.Lock()


def _create_pool(workers: int) -> concurrent.futures.ThreadPoolExecutor:
    """The process's pool of create threads, kept between chunks: each thread keeps its
    Karmada client and its kept-alive connection (a pool per chunk of 50 built four clients
    and opened four connections every chunk). A forked worker process makes its own."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[:2] != (os.getpid(), workers):
            _pool = (
                os.getpid(),
                workers,
                concurrent.futures.ThreadPoolExecutor(workers, "karmada-create"),
            )
        return _pool[2]


def _claim(run: WorkflowRun, created: Sequence[tuple[UnitRun, str]]) -> set[int]:
    """Record the created step workflows on their units: only a unit still Pending, at the
    same attempt and with no step workflow yet (a redelivered task claims nothing twice)."""
    if not created:
        return set()
    # The claim and its events commit together: a worker killed between them would leave
    # units claimed that the run's history never mentions.
    with transaction.atomic():
        return _claim_in_transaction(run, created)


def claim_statement(created: Sequence[tuple[UnitRun, str]], now: Any) -> tuple[str, list[Any]]:
    """The claim as one PostgreSQL UPDATE and its parameters: each created unit's step
    workflow recorded only where the unit is still Pending, at the same attempt, with none.

    The guards are one ``IS TRUE`` term so that the rows are found by primary key alone. As
    separate terms the planner could drive the UPDATE from the ``workflow_name`` or
    ``(site, phase)`` index instead: a fan-out's thousands of units are inserted after the
    table's statistics were taken, which then count almost no unclaimed Pending rows, and every
    chunk's claim walked all of them (and their dead versions) joined with the chunk's ids:
    60% of the advance's time in a 10,000-item fan-out, growing with the units still to
    claim."""
    values = ", ".join(["(%s, %s, %s)"] * len(created))
    params: list[Any] = [now, now]
    for unit, name in created:
        params += [unit.pk, unit.attempt, name]
    params.append(UnitPhase.PENDING)
    sql = (
        f"UPDATE {UnitRun._meta.db_table} AS u SET workflow_name = v.name, submitted_at = %s, "
        f"updated_at = %s, message = '' FROM (VALUES {values}) AS v(id, attempt, name) "
        "WHERE u.id = v.id AND (u.attempt = v.attempt AND u.workflow_name = '' "
        "AND u.phase = %s) IS TRUE RETURNING u.id"
    )
    return sql, params


def _claim_in_transaction(run: WorkflowRun, created: Sequence[tuple[UnitRun, str]]) -> set[int]:
    now = timezone.now()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(*claim_statement(created, now))
            ids = {row[0] for row in cursor.fetchall()}
    else:
        ids = {
            unit.pk
            for unit, name in created
            if UnitRun.objects.filter(
                pk=unit.pk, attempt=unit.attempt, workflow_name="", phase=UnitPhase.PENDING
            ).update(workflow_name=name, submitted_at=now, updated_at=now, message="")
        }
    events = []
    placed_at_runtime = [u.pk for u, _ in created if u.pk in ids and u.reason.startswith(WAITING)]
    if placed_at_runtime:
        UnitRun.objects.filter(pk__in=placed_at_runtime).update(reason="placed at runtime")
    for unit, name in created:
        if unit.pk not in ids:
            continue
        unit.workflow_name, unit.message = name, ""
        if unit.pk in placed_at_runtime:
            unit.reason = "placed at runtime"
        where = f"at {unit.site}" if unit.site else "for runtime placement"
        events.append(
            RunEvent(
                run_id=run.pk,
                unit=unit,
                kind="unit-submitted",
                message=f"{unit.name}: step workflow {name} created {where}",
            )
        )
    RunEvent.objects.bulk_create(events, batch_size=500)
    return ids
