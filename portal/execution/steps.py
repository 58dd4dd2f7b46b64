"""Building step workflows: one Argo Workflow per unit attempt, created on karmada-apiserver
with the upstream outputs filled into its arguments."""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from placement import codec, manifests, planner
from placement.context import context_annotation
from placement.manifests import GlobalOutputs
from placement.parser import ParsedWorkflow
from placement.revisions.selectors import active_revision_id, submission_revision_id
from portal import labels, presign, state
from portal.choices import UnitPhase, UnitTiming
from portal.execution import gates, transfers
from portal.execution.common import SiteState, ancestors, event, sites_state, upstream_where
from portal.karmada import client, errors, resources
from portal.models import RunEvent, UnitRun, WorkflowRun
from portal.planning import planner_snapshot
from portal.quotas import selectors as quota_selectors
from portal.selectors import (
    artifact_stores,
    run_global_outputs,
    run_variables_of,
    upstream_outputs,
)


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


@dataclass(frozen=True)
class RunWide:
    """What every step workflow of a run carries from the whole run: ``{{workflow.*}}``
    variables and the global outputs produced so far."""

    variables: dict[str, str]
    global_outputs: GlobalOutputs


def run_wide_of(run: WorkflowRun, units: Iterable[UnitRun]) -> RunWide:
    units = list(units)
    return RunWide(
        variables=run_variables_of(run, units, namespace=client.namespace()),
        global_outputs=run_global_outputs(run, units),
    )


def step_workflow_for(
    run: WorkflowRun,
    unit: UnitRun,
    units: Iterable[UnitRun],
    sites: Mapping[str, SiteState] | None = None,
    *,
    outputs: Mapping[str, manifests.TaskOutputs] | None = None,
    run_wide: RunWide | None = None,
) -> dict[str, Any]:
    """The unit's step workflow; ``outputs`` are ``upstream_outputs(units)`` and ``run_wide``
    ``run_wide_of(run, units)`` when the caller has them already: an advance computes them
    once for all the units it submits (each reads every unit of the run: per unit, that was
    quadratic in a fan-out's size)."""
    units = list(units)  # read more than once below
    if run_wide is None:
        run_wide = run_wide_of(run, units)
    outputs = upstream_outputs(units) if outputs is None else outputs
    if transfers.is_transfer(unit):
        body = transfers.workflow(run, unit, units, outputs)
        signed_inputs(body["spec"], gates.deadline_left(run), unit.site or None)
        return body
    # A producer it reads through a copy (its site cannot read the producer's repository).
    outputs = transfers.outputs_through_copies(unit, units, outputs, outputs)
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
        namespace=client.namespace(),
        site=site,
        reason=unit.reason or "placed at runtime",
        workflow_parameters=run.compiled.get("parameters") or {},
        outputs=outputs,
        domain=settings.PORTAL_LABEL_DOMAIN,
        image_mirror=mirror or None,
        run_vars=run_wide.variables,
        globals_=run_wide.global_outputs,
    )
    # The run's deadline, locks and artifact GC are the portal's, not each member's.
    exit_unit = unit.spec.get("kind") == "exit"
    left = None if exit_unit else gates.deadline_left(run)
    body["spec"] = manifests.run_level_spec(body["spec"], deadline_left=left)
    signed_inputs(body["spec"], left, unit.site or None)
    if not site:
        context = context_annotation(
            project=run.project.name if run.project_id and run.project else None,
            unit_spec=unit.spec,
            units=units,
            sites=quota_selectors.admitted_sites(unit),
        )
        if context is not None:
            body["metadata"]["annotations"][labels.key(labels.PLACEMENT_CONTEXT)] = context
    if unit.spec.get("kind") == "exit":
        # Inside the step workflow Argo would answer with the step workflow's own status.
        status = str(unit.spec.get("workflow_status", ""))
        for key in ("templates", "arguments"):
            if key in body["spec"]:
                text = json.dumps(body["spec"][key]).replace("{{workflow.status}}", status)
                body["spec"][key] = json.loads(text)
    return body


# The repositories' keys, read from their Secrets on karmada-apiserver, cached a minute.
_KEYS = presign.KeyCache(client.secret_data)


def signed_inputs(spec: dict[str, Any], deadline_left: float | None, site: str | None) -> None:
    """The step's input artifacts held in a repository of the fleet become pre-signed GETs
    for exactly those objects, valid until the step's deadline (an hour without one): the
    step never holds a repository's keys, whichever site it runs at (issue #28)."""
    arguments = spec.get("arguments")
    if not isinstance(arguments, dict) or not arguments.get("artifacts"):
        return
    if not client.configured():
        # No karmada-apiserver to read the keys from, and none to create the step workflow
        # on: the body is only looked at (a preview of what would be created).
        return
    artifacts = arguments["artifacts"]
    try:
        arguments["artifacts"] = presign.sign_inputs(
            list(artifacts),
            artifact_stores(),
            _KEYS.keys,
            presign.expiry_for(deadline_left),
            site,
        )
    except (KeyError, errors.PermanentError) as exc:
        # The repository's Secret is missing or holds no keys: the step cannot read its input.
        raise CannotSign(f"cannot sign the input artifacts' URLs: {exc}") from exc


class CannotSign(Exception):
    """The keys of a repository an input is in cannot be read from its Secret."""


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
) -> planner.Decision:
    """The planner's decision for a runtime unit from the newest state, capacity a
    preference (not a filter) unless ``strict_capacity`` (as the webhook decides); ``only``:
    the sites it may go to (None: any)."""
    units = list(units)
    upstream = upstream_where(units, succeeded_only=True)
    view = planner_snapshot()
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


def fallback_site(run: WorkflowRun, unit: UnitRun, units: Iterable[UnitRun]) -> str:
    """Where a runtime unit goes if the webhook cannot answer: the planner's choice from the
    newest state among the sites that satisfy every hard constraint (residency, hardware,
    pins, cordons, readiness) and that its project's quotas admitted it for; free capacity
    is a preference here, not a filter, since the unit may wait in the site's queue. Raises
    ``NoEligibleSite`` with the planner's reason."""
    decision = runtime_decision(run, unit, units, quota_selectors.admitted_sites(unit))
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


def submit_unit(
    run: WorkflowRun,
    unit: UnitRun,
    units: Iterable[UnitRun],
    sites: Mapping[str, SiteState] | None = None,
    *,
    outputs: Mapping[str, manifests.TaskOutputs] | None = None,
) -> bool:
    """Create the unit's step workflow (idempotent). False when the API refused it for good:
    the unit is then in Error with the API's message. Karmada unreachable: the unit says so
    (message and event) and ``TransientError`` goes up for the task to back off."""
    try:
        body = step_workflow_for(run, unit, units, sites, outputs=outputs)
    except manifests.Unresolved as exc:
        state.unit_move(unit, UnitPhase.ERROR, message=f"cannot resolve arguments: {exc}")
        return False
    except CannotSign as exc:
        state.unit_move(unit, UnitPhase.ERROR, message=str(exc))
        return False
    if not unit.site:
        # A runtime step must never land where it must not, even with the webhook down.
        try:
            fallback = fallback_site(run, unit, units)
        except NoEligibleSite as exc:
            _wait_for_a_site(run, unit, str(exc))
            return True
        body["metadata"]["labels"][labels.key(labels.FALLBACK_SITE)] = fallback
    Revisions(run).annotate(body, unit)
    name = body["metadata"]["name"]
    try:
        client.create(resources.WORKFLOW, body)
    except errors.TransientError as exc:
        _waiting_for_karmada(run, unit, exc)
        raise
    except errors.AlreadyExists:
        existing = client.get(resources.WORKFLOW, name)
        if not _is_ours(existing, run, unit):
            state.unit_move(
                unit, UnitPhase.ERROR, message=f"a foreign Workflow {name} already exists"
            )
            return False
    except errors.PermanentError as exc:
        state.unit_move(unit, UnitPhase.ERROR, message=f"Karmada refused the step workflow: {exc}")
        return False
    claimed = UnitRun.objects.filter(
        pk=unit.pk, attempt=unit.attempt, workflow_name="", phase=UnitPhase.PENDING
    ).update(workflow_name=name, submitted_at=timezone.now(), updated_at=timezone.now(), message="")
    if claimed:
        if unit.reason.startswith(WAITING):
            unit.reason = "placed at runtime"
            UnitRun.objects.filter(pk=unit.pk).update(reason=unit.reason)
        unit.workflow_name = name
        unit.message = ""
        where = f"at {unit.site}" if unit.site else "for runtime placement"
        event(run.pk, "unit-submitted", f"{unit.name}: step workflow {name} created {where}", unit)
    return True


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
    """``submit_unit`` for many units at once, as a fan-out needs: bodies built here, the
    creates ``PORTAL_CREATE_CONCURRENCY`` at a time against Karmada (each idempotent, with
    the gateway's backoff on 429/5xx), then one conditional UPDATE that claims every created
    unit still Pending at the same attempt, and their events in one INSERT. Returns how many
    were claimed. Karmada unreachable: what was created is claimed, the first unit left says
    why, and ``TransientError`` goes up for the task to back off."""
    bodies: list[tuple[UnitRun, dict[str, Any]]] = []
    units = list(units)  # read for every unit below
    run_wide = run_wide_of(run, units)
    revisions = Revisions(run)
    for unit in ready:
        try:
            body = step_workflow_for(run, unit, units, sites, outputs=outputs, run_wide=run_wide)
        except manifests.Unresolved as exc:
            state.unit_move(unit, UnitPhase.ERROR, message=f"cannot resolve arguments: {exc}")
            continue
        except CannotSign as exc:
            state.unit_move(unit, UnitPhase.ERROR, message=str(exc))
            continue
        if not unit.site:
            # As submit_unit: a runtime step carries a fallback site that satisfies every
            # hard constraint, so it never lands where it must not with the webhook down.
            try:
                fallback = fallback_site(run, unit, units)
            except NoEligibleSite as exc:
                _wait_for_a_site(run, unit, str(exc))
                continue
            body["metadata"]["labels"][labels.key(labels.FALLBACK_SITE)] = fallback
        revisions.annotate(body, unit)
        bodies.append((unit, body))
    if not bodies:
        return 0
    workers = max(1, min(settings.PORTAL_CREATE_CONCURRENCY, len(bodies)))
    created: list[tuple[UnitRun, str]] = []
    refused: list[tuple[UnitRun, str]] = []
    transient: tuple[UnitRun, errors.KarmadaError] | None = None
    results: list[tuple[UnitRun, dict[str, Any], str | None, errors.TransientError | None]] = []
    if workers == 1:
        for unit, body in bodies:
            try:
                results.append((unit, body, _create(body, run, unit), None))
            except errors.TransientError as exc:
                results.append((unit, body, None, exc))
                break
    else:
        with concurrent.futures.ThreadPoolExecutor(workers, "karmada-create") as pool:
            futures = [(u, b, pool.submit(_create, b, run, u)) for u, b in bodies]
            for unit, body, future in futures:
                try:
                    results.append((unit, body, future.result(), None))
                except errors.TransientError as exc:
                    results.append((unit, body, None, exc))
    for unit, body, why, failure in results:
        if failure is not None:
            transient = transient or (unit, failure)
        elif why is not None:
            refused.append((unit, why))
        else:
            created.append((unit, body["metadata"]["name"]))
    for unit, why in refused:
        state.unit_move(unit, UnitPhase.ERROR, message=why)
    claimed = _claim(run, created)
    if transient is not None:
        _waiting_for_karmada(run, *transient)
        raise transient[1]
    return claimed


def _claim(run: WorkflowRun, created: Sequence[tuple[UnitRun, str]]) -> int:
    """Record the created step workflows on their units: only a unit still Pending, at the
    same attempt and with no step workflow yet (a redelivered task claims nothing twice)."""
    if not created:
        return 0
    # The claim and its events commit together: a worker killed between them would leave
    # units claimed that the run's history never mentions.
    with transaction.atomic():
        return _claim_in_transaction(run, created)


def _claim_in_transaction(run: WorkflowRun, created: Sequence[tuple[UnitRun, str]]) -> int:
    now = timezone.now()
    if connection.vendor == "postgresql":
        values = ", ".join(["(%s, %s, %s)"] * len(created))
        params: list[Any] = [now, now]
        for unit, name in created:
            params += [unit.pk, unit.attempt, name]
        params.append(UnitPhase.PENDING)
        table = UnitRun._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} AS u SET workflow_name = v.name, submitted_at = %s, "
                f"updated_at = %s, message = '' FROM (VALUES {values}) AS v(id, attempt, name) "
                "WHERE u.id = v.id AND u.attempt = v.attempt AND u.workflow_name = '' "
                "AND u.phase = %s RETURNING u.id",
                params,
            )
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
    return len(ids)
