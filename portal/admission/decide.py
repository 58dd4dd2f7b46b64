"""Runtime placement: the admission webhook's decision (DESIGN sections 3 and 5).

karmada-apiserver sends an ``admission.k8s.io/v1`` AdmissionReview on CREATE of a Workflow; we
answer one with the same uid, always ``allowed: true``, and a JSONPatch adding the site label and
the reason annotation when we place it:

* a step workflow labelled ``<domain>/placement=runtime``: its unit is decided now, with the
  sites where its upstream units actually ran, the bytes they produced and the fleet as
  ``portal.planning.planner_snapshot`` gives it to every decider (``strict_capacity``: free
  GPUs, CPU and memory must fit now, after what every other decision holds);
* a Workflow created directly on Karmada (no ``<domain>/managed``): placed whole by the rules;
* anything that already has ``<domain>/site``: allowed unchanged.

The webhook never stands in the way. Any error and any decision that runs past
``PORTAL_WEBHOOK_BUDGET_MS`` answers allowed with no patch (the fallback policy then places a
step workflow) and logs why. Only a body that is not an AdmissionReview raises
``NotAdmissionReview`` (answered 400).

Queries per admission (hot path, fleet snapshot warm): none. A runtime step workflow carries
its placement context (annotation ``<domain>/placement-context``, written by the worker: the
unit's needs, its project, where its upstream units ran and the bytes they produced), so the
webhook still finds the unit from the labels but need not read it. One Redis round trip: a
script that holds the unit's requests at the chosen site and queues the decision, or refuses
when a concurrent admission changed that site's figures (the unit is then decided again from
the newer ones, which the refusal carries; ``portal.admission.reservations``); a decision
without a site is queued with ``RPUSH``, shared by concurrent admissions. The queue is
written later by ``decisions_flush`` (the watcher every second and before it reads a binding's
site, the beat resync).
A step workflow without a usable context (an older portal's) costs three queries (statement
timeout, the unit, its upstream units); with no queue configured (the embedded demo) or Redis
unreachable, the decision is written at once (four more; without a queue, decided and written
one at a time per process on a fleet read afresh, so the next one sees its site). A direct
Workflow costs none, or one when it references the catalogue.

The database part of the snapshot (``portal.planning.PlannerBase``: sites, links, rules,
datasets, what placed units hold, and the active rule revision) is read at most once per
``SNAPSHOT_TTL_S`` per process: capacity comes from the watcher's Cluster sync, which is itself
seconds old, and what decisions of that second hold is in Redis: read once after each
refresh, then as each take answers it (the take checks the chosen site's figures, so a copy a
few admissions old never places a unit where the room is gone). Each queued decision carries
what it was decided from (its placement context, the revision, the snapshot's digest, the
snapshot itself once per snapshot and process, and what other decisions held beside it), which
the drain records for replay: nothing more on the request path than a larger entry.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import redis
from django.conf import settings
from django.db import transaction

from placement import codec, parser, planner
from placement.context import (
    Context,
    ancestor_names,
    ancestor_unit,
    context_doc,
    context_read,
    upstream_location,
)
from placement.parser import Resources, Unit, WorkflowInvalid
from placement.revisions.replay import snapshot_body, snapshot_digest
from placement.revisions.selectors import active_revision_id
from placement.selectors import planner_inputs_clear
from portal import labels
from portal.admission import reservations
from portal.admission.budget import BudgetExceeded, Deadline, statement_timeout
from portal.admission.queue import decision_entry, decision_record, planning_entry, queue_client
from portal.models import UnitRun, WorkflowTemplate
from portal.planning import PlannerBase, PlannerSnapshot, planner_base, planner_snapshot

log = logging.getLogger(__name__)

ADMISSION_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
SNAPSHOT_TTL_S = 1.0
REASON_MAX_CHARS = 1024  # annotations are for humans; the full why is in PlacementDecision


class NotAdmissionReview(ValueError):
    """The body is not an AdmissionReview at all (no request, no uid): answered 400."""


class _Skip(Exception):
    """Nothing to place, or nothing we may place: allowed unchanged, with the why logged."""


# --------------------------------------------------------------------------------------------
# The fleet snapshot: a brief per-process cache of what every decision reads


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The database part of every decision's inputs (``portal.planning.PlannerBase``), kept
    for up to ``SNAPSHOT_TTL_S``; each decision adds what other decisions hold in Redis."""

    base: PlannerBase
    taken_at: float
    # The rule revision active when it was read, and the fleet and datasets as replay
    # records them (``placement.revisions.replay``), with their digest.
    revision: int | None = None
    body: Mapping[str, Any] = dataclasses.field(default_factory=dict, repr=False)
    digest: str = ""
    # Set once a decision queued with the body: later entries carry only the digest, and are
    # queued after one carrying the body. Once per snapshot, not per digest, so a body the
    # drain lost is sent again at the next refresh.
    body_queued: threading.Event = dataclasses.field(default_factory=threading.Event)

    @property
    def fleet(self) -> planner.Fleet:
        return self.base.fleet

    @property
    def rules(self) -> planner.RuleBook:
        return self.base.rules

    @property
    def datasets(self) -> planner.DataCatalogue:
        return self.base.datasets


_snapshot: Snapshot | None = None
_snapshot_lock = threading.Lock()
# Without a queue (the embedded demo) a decision is written at once: one at a time, each
# reading the holds the one before wrote.
_unqueued_lock = threading.Lock()
_TAKE_TRIES = 5
# What decisions hold in Redis as this process last saw it (``_held_now``).
_held: reservations.Held | None = None


def snapshot_get() -> Snapshot:
    """The fleet, rules and datasets, read at most once per ``SNAPSHOT_TTL_S`` per process.

    The RuleBook and DataCatalogue are built once per snapshot, so rule globs are compiled and
    dataset matches memoised across admissions rather than per request.
    """
    global _snapshot
    snap = _snapshot
    if snap is not None and time.monotonic() - snap.taken_at < SNAPSHOT_TTL_S:
        return snap
    # One thread refreshes; the others wait for it rather than stampeding the database.
    with _snapshot_lock:
        snap = _snapshot
        if snap is not None and time.monotonic() - snap.taken_at < SNAPSHOT_TTL_S:
            return snap
        snap = _snapshot_read()
        _snapshot = snap
        return snap


def _snapshot_read() -> Snapshot:
    base = planner_base()
    body = snapshot_body(base.fleet, base.datasets)
    return Snapshot(
        base=base,
        taken_at=time.monotonic(),
        revision=active_revision_id(),
        body=body,
        digest=snapshot_digest(body),
    )


def snapshot_clear() -> None:
    """Forget the snapshot and the tables it was read from (tests; a process that must see a
    change at once)."""
    global _snapshot
    with _snapshot_lock:
        _snapshot = None
    planner_inputs_clear()
    _forget_held()


# --------------------------------------------------------------------------------------------
# AdmissionReview in and out


def review_parse(body: bytes) -> tuple[str, str, dict[str, Any]]:
    """``(apiVersion, uid, request)`` of an AdmissionReview, or ``NotAdmissionReview``."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise NotAdmissionReview(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise NotAdmissionReview("not a JSON object")
    if doc.get("kind") != "AdmissionReview":
        raise NotAdmissionReview("kind is not AdmissionReview")
    api_version = doc.get("apiVersion")
    if api_version not in ADMISSION_VERSIONS:
        raise NotAdmissionReview(f"apiVersion must be one of {', '.join(ADMISSION_VERSIONS)}")
    request = doc.get("request")
    if not isinstance(request, dict):
        raise NotAdmissionReview("no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid or len(uid) > 256:
        raise NotAdmissionReview("request.uid must be a non-empty string")
    return api_version, uid, request


def review_response(
    api_version: str, uid: str, patch: list[dict[str, Any]] | None
) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode("ascii")
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}


def json_pointer(*parts: str) -> str:
    """RFC 6901: ``~`` → ``~0`` then ``/`` → ``~1`` (label keys carry a ``/``)."""
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def placement_patch(
    obj: Mapping[str, Any], site: str, reason: str, revision: int | None = None
) -> list[dict[str, Any]]:
    """Add ``<domain>/site``, ``<domain>/reason`` and (when there is one) the rule revision
    that decided, ``<domain>/rules-revision``, and remove ``<domain>/fallback-site``,
    creating ``metadata.labels`` or ``metadata.annotations`` when absent (a JSONPatch ``add``
    into a missing map fails, and Kubernetes would then reject the whole patch)."""
    site_key, reason_key = labels.key(labels.SITE), labels.key(labels.REASON)
    reason = " ".join(reason.split())[:REASON_MAX_CHARS]
    notes = {reason_key: reason}
    if revision is not None:
        # Replaces the worker's (the revision active when it created the Workflow).
        notes[labels.key(labels.RULES_REVISION)] = str(revision)
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return [
            {
                "op": "add",
                "path": "/metadata",
                "value": {"labels": {site_key: site}, "annotations": notes},
            }
        ]
    ops: list[dict[str, Any]] = []
    fallback_key = labels.key(labels.FALLBACK_SITE)
    meta_labels = meta.get("labels")
    if isinstance(meta_labels, Mapping) and fallback_key in meta_labels:
        # The decision replaces the worker's fallback: with both labels two site policies
        # would select the Workflow.
        ops.append({"op": "remove", "path": json_pointer("metadata", "labels", fallback_key)})
    for field, values in (("labels", {site_key: site}), ("annotations", notes)):
        if isinstance(meta.get(field), Mapping):
            for key, value in values.items():
                ops.append(
                    {"op": "add", "path": json_pointer("metadata", field, key), "value": value}
                )
        else:
            # Absent or null: replace the whole map ("add" replaces an existing null member).
            ops.append({"op": "add", "path": json_pointer("metadata", field), "value": values})
    return ops


# --------------------------------------------------------------------------------------------
# The decision


def admission_review(*, body: bytes, started: float | None = None) -> dict[str, Any]:
    """Answer one AdmissionReview. Raises only ``NotAdmissionReview``; every other failure is
    answered allowed without a patch and logged."""
    started = time.monotonic() if started is None else started
    api_version, uid, request = review_parse(body)
    deadline = Deadline(started, settings.PORTAL_WEBHOOK_BUDGET_MS)
    try:
        patch = _admit(request, deadline, uid)
    except _Skip as exc:
        log.debug("admission %s: allowed unchanged: %s", uid, exc)
        patch = None
    except BudgetExceeded as exc:
        log.warning("admission %s: allowed without placement: %s", uid, exc)
        patch = None
    except Exception:  # never stand in the way: the fallback policy places it
        log.exception("admission %s: allowed without placement after an error", uid)
        patch = None
    return review_response(api_version, uid, patch)


def _admit(request: Mapping[str, Any], deadline: Deadline, uid: str) -> list[dict[str, Any]] | None:
    kind = request.get("kind")
    if request.get("operation") != "CREATE":
        raise _Skip(f"operation {request.get('operation')!r}")
    if not isinstance(kind, Mapping) or (kind.get("group"), kind.get("kind")) != (
        "argoproj.io",
        "Workflow",
    ):
        raise _Skip(f"not an argoproj.io Workflow: {kind!r}")
    obj = request.get("object")
    if not isinstance(obj, Mapping):
        raise _Skip("no object")
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    obj_labels = meta.get("labels")
    obj_labels = obj_labels if isinstance(obj_labels, Mapping) else {}
    if labels.key(labels.SITE) in obj_labels:
        raise _Skip("already has a site")
    dry_run = request.get("dryRun") is True
    name = _workflow_name(request, meta)
    if obj_labels.get(labels.key(labels.PLACEMENT)) == "runtime":
        return _admit_step(request, obj, meta, obj_labels, name, dry_run, deadline, uid)
    if labels.key(labels.MANAGED) in obj_labels:
        # Placed at submission (it would carry a site) or by the fallback policy: not ours.
        raise _Skip("managed and not asking for runtime placement")
    return _admit_direct(obj, name, dry_run, deadline, uid)


def _workflow_name(request: Mapping[str, Any], meta: Mapping[str, Any]) -> str:
    for value in (meta.get("name"), request.get("name"), meta.get("generateName")):
        if isinstance(value, str) and value:
            return value[:253]
    return ""


def _admit_step(
    request: Mapping[str, Any],
    obj: Mapping[str, Any],
    meta: Mapping[str, Any],
    obj_labels: Mapping[str, Any],
    name: str,
    dry_run: bool,
    deadline: Deadline,
    uid: str,
) -> list[dict[str, Any]] | None:
    if request.get("namespace") != settings.KARMADA_NAMESPACE:
        # Only the portal creates step workflows, in its namespace: labels elsewhere are not
        # a reason to touch a run.
        raise _Skip(f"runtime label outside namespace {settings.KARMADA_NAMESPACE}")
    try:
        run_id = int(str(obj_labels.get(labels.key(labels.RUN))))
        attempt = int(str(obj_labels.get(labels.key(labels.ATTEMPT))))
    except ValueError:
        raise _Skip("run or attempt label is not a number") from None
    slug = obj_labels.get(labels.key(labels.UNIT))
    if not isinstance(slug, str) or not slug:
        raise _Skip("no unit label")
    annotations = meta.get("annotations")
    found = (
        context_read(annotations.get(labels.key(labels.PLACEMENT_CONTEXT)), slug)
        if isinstance(annotations, Mapping)
        else None
    )
    if found is None:
        # No (usable) context: a step workflow from an older portal, or edited by hand.
        found = _context_from_database(run_id, slug, attempt, deadline)
    whose = _Whose(uid, name, run_id, slug, attempt)
    decision, snap = _place(found, whose, dry_run=dry_run, deadline=deadline)
    if not decision.site:
        raise _Skip(f"no eligible site now: {decision.reason}")
    return placement_patch(obj, decision.site, decision.reason, snap.revision)


@dataclasses.dataclass(frozen=True)
class _Whose:
    """Whose decision: the admission, the Workflow's name, and its unit (a direct Workflow:
    none)."""

    uid: str
    workflow: str
    run_id: int | None = None
    unit: str | None = None
    attempt: int = 1


def _place(
    found: Context, whose: _Whose, *, dry_run: bool, deadline: Deadline
) -> tuple[planner.Decision, Snapshot]:
    """Decide ``found``'s unit on the planner's snapshot (``portal.planning``) and, unless a
    dry run, hold its capacity and queue the decision in one step: decided again from the
    newer figures when a concurrent admission took the room first."""
    key = reservations.unit_key(whose.run_id, whose.unit, whose.uid)
    client = None if dry_run else queue_client()
    if client is None and not dry_run:
        with _unqueued_lock:
            # Written at once: read fresh, so the next decision sees this one's site.
            snap = _snapshot_read()
            view = planner_snapshot(snap.base)
            deadline.check("reading")
            decision = _decide(found, view)
            deadline.check("deciding")
            _record(_entry(whose, decision), snap, found, view, deadline)
        return decision, snap
    snap = snapshot_get()
    for tries_left in reversed(range(_TAKE_TRIES)):
        held, fresh = _held_now(client, snap)
        view = planner_snapshot(snap.base, excluding=key, held=held)
        deadline.check("reading")
        decision = _decide(found, view)
        deadline.check("deciding")
        if client is None:  # a dry run
            return decision, snap
        entry = _entry(whose, decision)
        if not decision.site:
            if not fresh:  # "no room" is said from Redis's figures, not a copy
                _forget_held()
                continue
            _record(entry, snap, found, view, deadline)
            return decision, snap
        # The site's figures exact while tries are left, then only room enough (under a
        # storm of admissions for one site).
        if _hold(client, key, entry, decision.site, snap, found, view, deadline, tries_left > 0):
            return decision, snap
    raise _Skip(f"capacity taken by concurrent decisions {_TAKE_TRIES} times")


def _held_now(client: redis.Redis | None, snap: Snapshot) -> tuple[reservations.Held | None, bool]:
    """What decisions hold in Redis, and whether read just now: this process's copy (the
    answer of its last take) when read after the snapshot, else read (one round trip). A
    copy's figures for the site a decision picks are checked by the take, which refuses and
    answers the newer ones when they changed."""
    global _held
    held = _held
    if held is not None and held.read_at >= snap.taken_at:
        return held, False
    if client is None:
        return None, True
    try:
        _held = held = reservations.read(client)
    except redis.RedisError:
        return None, True  # planner_snapshot tries once more and says why
    return held, True


def _forget_held() -> None:
    global _held
    _held = None


def _decide(found: Context, view: PlannerSnapshot) -> planner.Decision:
    return planner.decide(
        found.unit,
        view.fleet,
        view.rules,
        view.datasets,
        found.project,
        found.upstream,
        timing="runtime",
        strict_capacity=True,
        # Outputs computed from a residency-bound dataset are bound too, here as in the
        # worker's own planning (its fallback site, failover, withParam items).
        ancestors=found.ancestors,
    )


def _entry(whose: _Whose, decision: planner.Decision) -> dict[str, Any]:
    return decision_entry(
        whose.uid,
        decision,
        whose.workflow,
        run_id=whose.run_id,
        unit=whose.unit,
        attempt=whose.attempt,
    )


def _planning(entry: dict[str, Any], snap: Snapshot, found: Context, view: PlannerSnapshot) -> bool:
    """Add what the decision was decided from (``planning_entry``) to ``entry``: the
    snapshot's body travels with the first entry of each snapshot. True if it carries it."""
    with_body = not snap.body_queued.is_set()
    entry.update(
        planning_entry(
            context_doc(found),
            snap.revision,
            snap.digest,
            snap.body if with_body else None,
            view.pending,
        )
    )
    return with_body


def _record(
    entry: dict[str, Any],
    snap: Snapshot,
    found: Context,
    view: PlannerSnapshot,
    deadline: Deadline,
) -> None:
    """Queue a decision that holds nothing (no site), or write it at once without a queue."""
    with_body = _planning(entry, snap, found, view)
    decision_record(entry, deadline)
    if with_body:
        snap.body_queued.set()


def _hold(
    client: redis.Redis,
    key: str,
    entry: dict[str, Any],
    site: str,
    snap: Snapshot,
    found: Context,
    view: PlannerSnapshot,
    deadline: Deadline,
    exact: bool,
) -> bool:
    """Hold the unit's requests at ``site`` and queue the decision, if the room the decision
    saw there is still free (``exact``: and nothing else changed there); False when another
    admission took it meanwhile."""
    global _held
    with_body = _planning(entry, snap, found, view)
    held = reservations.Reservation(key, str(entry["uid"]), site, found.unit.resources)
    try:
        taken, _held = reservations.take(
            client,
            held,
            room=view.room(site),
            since=snap.base.stamp,
            entry=json.dumps(entry, separators=(",", ":")),
            seen=view.pending.get(site, Resources()) if exact else None,
        )
    except redis.RedisError as exc:
        # Redis down: the database takes the decision at once (the unit then holds there).
        log.warning("reservations unreachable (%s); recording the decision at once", exc)
        decision_record(entry, deadline)
        taken = True
    if taken and with_body:
        snap.body_queued.set()
    return taken


def _context_from_database(run_id: int, slug: str, attempt: int, deadline: Deadline) -> Context:
    """The unit, its project, its upstream units' sites and sizes and what its ancestors read,
    from the database (three queries): for step workflows that carry no placement context."""
    with transaction.atomic():
        statement_timeout(deadline)
        unit = (
            UnitRun.objects.select_related("run__project")
            .only("id", "name", "attempt", "spec", "upstream", "run__id", "run__project__name")
            .filter(run_id=run_id, slug=slug)
            .first()
        )
        if unit is None:
            raise _Skip(f"no unit {slug!r} in run {run_id}")
        if unit.attempt != attempt:
            raise _Skip(f"attempt {attempt} is not the current one ({unit.attempt})")
        rows: dict[str, tuple[Any, ...]] = {}
        if unit.upstream:
            # Every unit's upstream, site and what it read (not whole specs): the ancestors
            # are the transitive upstream. order_by(): the model's default ordering would join
            # the run table for nothing.
            for name, *rest in (
                UnitRun.objects.filter(run_id=run_id)
                .order_by()
                .values_list(
                    "name",
                    "upstream",
                    "site",
                    "outputs",
                    "spec__output_bytes",
                    "spec__datasets",
                    "spec__data_refs",
                )
            ):
                rows[name] = tuple(rest)
    upstream: dict[str, planner.Upstream] = {}
    for name in unit.upstream or ():
        row = rows.get(name)
        if row is not None and row[1]:
            upstream[name] = upstream_location(row[1], row[2], {"output_bytes": row[3]})
    names = ancestor_names(unit.upstream or (), {n: r[0] for n, r in rows.items()})
    ancestors = tuple(ancestor_unit(n, rows[n][4] or (), rows[n][5] or ()) for n in sorted(names))
    project = unit.run.project.name if unit.run.project else None
    return Context(codec.unit_from_dict(unit.spec), project, upstream, ancestors)


def whole_unit(parsed: parser.ParsedWorkflow) -> Unit:
    """One unit covering the whole workflow: a Workflow created directly on Karmada runs at one
    site. Requests are the largest of any unit (its pods run one after another or side by side
    within one site's capacity check either way); data read is the union of everything read."""

    def union(values: Any) -> tuple[str, ...]:
        return tuple(dict.fromkeys(v for group in values for v in group))

    units = parsed.units
    name = parsed.name or (parsed.generate_name or "workflow")
    unit_labels: dict[str, str] = {}
    for u in units:
        unit_labels.update(u.labels)
    unit_labels.update(parsed.labels)
    return Unit(
        name=name,
        slug=name,
        kind="workflow",
        task=parsed.entrypoint,
        template=parsed.entrypoint,
        templates=union(u.templates for u in units) or (parsed.entrypoint,),
        upstream=(),
        depends="",
        when=None,
        arguments=parsed.arguments,
        labels=unit_labels,
        images=union(u.images for u in units),
        resources=Resources(
            cpu_millicores=max((u.resources.cpu_millicores for u in units), default=0),
            memory_bytes=max((u.resources.memory_bytes for u in units), default=0),
            gpus=max((u.resources.gpus for u in units), default=0),
        ),
        datasets=union(u.datasets for u in units),
        data_refs=union(u.data_refs for u in units),
    )


def _admit_direct(
    obj: Mapping[str, Any], name: str, dry_run: bool, deadline: Deadline, uid: str
) -> list[dict[str, Any]] | None:
    catalogue: dict[str, Any] = {}
    if parser.uses_catalogue(obj.get("spec")):
        with transaction.atomic():
            statement_timeout(deadline)
            # A Workflow created directly on karmada-apiserver is of no project: it resolves
            # the fleet-wide catalogue only (``portal.catalogue``).
            catalogue = dict(
                WorkflowTemplate.objects.filter(project__isnull=True).values_list(
                    "name", "manifest"
                )
            )
    try:
        parsed = parser.parse_workflow(
            obj,
            catalogue,
            # As portal.services.parser_limits(), which this module must not import (it would
            # load the gateway into the webhook).
            limits=parser.Limits(
                max_body_bytes=settings.PORTAL_MAX_BODY_BYTES,
                max_units=settings.PORTAL_MAX_UNITS,
                max_dependency_edges=settings.PORTAL_MAX_DEPENDENCY_EDGES,
                max_pods_per_unit=settings.PORTAL_MAX_PODS_PER_UNIT,
                unknown_loop_items=settings.PORTAL_UNKNOWN_LOOP_ITEMS,
            ),
            domain=settings.PORTAL_LABEL_DOMAIN,
        )
    except WorkflowInvalid as exc:
        e = exc.errors[0]
        raise _Skip(f"workflow does not parse: {e.path or '<document>'}: {e.message}") from None
    unit = whole_unit(parsed)
    decision, snap = _place(
        Context(unit, None, {}, ()), _Whose(uid, name), dry_run=dry_run, deadline=deadline
    )
    if not decision.site:
        raise _Skip(f"no eligible site now: {decision.reason}")
    return placement_patch(obj, decision.site, decision.reason, snap.revision)
