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
webhook still finds the unit from the labels but need not read it. One Redis round trip, shared
by concurrent admissions: a script that holds the unit's requests at the chosen site and
queues the decision, or refuses when a concurrent admission changed that site's figures (the
unit is then decided again from the newer ones, which the refusal carries;
``portal.admission.placing``, ``portal.admission.reservations``); a decision without a site is
queued with ``RPUSH``, shared by concurrent admissions. The queue is written later by
``decisions_flush`` (the watcher every second and before it reads a binding's site, the beat
resync).
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
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.db import transaction

from placement import codec, parser, planner
from placement.context import (
    Context,
    ancestor_names,
    ancestor_unit,
    context_read,
    upstream_location,
)
from placement.parser import Resources, Unit, WorkflowInvalid
from portal import labels
from portal.admission.budget import BudgetExceeded, Deadline, statement_timeout
from portal.admission.placing import (
    SNAPSHOT_TTL_S,
    Snapshot,
    Unplaced,
    Whose,
    place,
    snapshot_clear,
    snapshot_get,
)
from portal.models import UnitRun, WorkflowTemplate
from portal.quotas.selectors import quota_sites_of_unit

# The snapshot is the placing module's; these names are the webhook's interface too.
__all__ = [
    "SNAPSHOT_TTL_S",
    "NotAdmissionReview",
    "Snapshot",
    "admission_review",
    "snapshot_clear",
    "snapshot_get",
]

log = logging.getLogger(__name__)

ADMISSION_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
REASON_MAX_CHARS = 1024  # annotations are for humans; the full why is in PlacementDecision


class NotAdmissionReview(ValueError):
    """The body is not an AdmissionReview at all (no request, no uid): answered 400."""


class _Skip(Unplaced):
    """Nothing to place, or nothing we may place: allowed unchanged, with the why logged."""


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
    except Unplaced as exc:
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
    whose = Whose(uid, name, run_id, slug, attempt)
    decision, snap = place(found, whose, dry_run=dry_run, deadline=deadline)
    if not decision.site:
        raise _Skip(f"no eligible site now: {decision.reason}")
    return placement_patch(obj, decision.site, decision.reason, snap.revision)


def _context_from_database(run_id: int, slug: str, attempt: int, deadline: Deadline) -> Context:
    """The unit, its project, its upstream units' sites and sizes and what its ancestors read,
    from the database (three queries): for step workflows that carry no placement context."""
    with transaction.atomic():
        statement_timeout(deadline)
        unit = (
            UnitRun.objects.select_related("run__project")
            .only("id", "name", "attempt", "spec", "upstream", "run__id", "run__project__name")
            .filter(run_id=run_id, slug=slug)
            # The sites its quotas admitted it for, in the same query.
            .annotate(quota_sites=quota_sites_of_unit())
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
    # The sites its quotas admitted it for, as the context annotation says them.
    sites = getattr(unit, "quota_sites", None)
    return Context(
        codec.unit_from_dict(unit.spec),
        project,
        upstream,
        ancestors,
        tuple(sites) if isinstance(sites, list) and sites else None,
    )


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
    decision, snap = place(
        Context(unit, None, {}, ()), Whose(uid, name), dry_run=dry_run, deadline=deadline
    )
    if not decision.site:
        raise _Skip(f"no eligible site now: {decision.reason}")
    return placement_patch(obj, decision.site, decision.reason, snap.revision)
