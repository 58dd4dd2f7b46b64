"""Folding ResourceBindings into units: where a step workflow went, its phase and outputs."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from portal import presign, state
from portal.choices import FINAL_UNIT, DecisionSource, RunStatus, UnitPhase, UnitTiming
from portal.controller import refusals
from portal.controller.common import event
from portal.controller.folded import Folded, seen_of
from portal.controller.status import run_refresh_status
from portal.karmada.node_status import NodeStatusUnreadable, nodes_of
from portal.models import PlacementDecision, UnitRun, WorkflowRun
from portal.outputs import bound_outputs, storable

log = logging.getLogger(__name__)

# How a unit's message starts while the member says why its pod waits.
WAITING_PREFIX = "waiting at "

ARGO_TO_UNIT = {
    "Pending": UnitPhase.PENDING,
    "Running": UnitPhase.RUNNING,
    "Succeeded": UnitPhase.SUCCEEDED,
    "Failed": UnitPhase.FAILED,
    "Error": UnitPhase.ERROR,
}


# The webhook queues its decisions; the controller does not load the webhook's modules, so the
# process that runs it names the function that writes the queued decisions to the database
# (``portal.apps``). It answers None once they are written, else why they could not be read;
# ``wait``: behind a write running elsewhere (a few seconds at most), not instead of it.
DecisionsWriter = Callable[[bool], str | None]
_decisions_writer: DecisionsWriter | None = None


def decisions_writer_set(writer: DecisionsWriter | None) -> None:
    """Name the function that writes the webhook's queued decisions (None: nobody)."""
    global _decisions_writer
    _decisions_writer = writer


def decisions_written(*, wait: bool) -> str | None:
    """Write the webhook's queued decisions: None once done (or with no writer named),
    else why the queue could not be read."""
    return _decisions_writer(wait) if _decisions_writer is not None else None


def _parse_time(value: Any) -> datetime | None:
    return parse_datetime(value) if isinstance(value, str) and value else None


# Node fields later units may read as {{tasks.x.<field>}}, kept beside the outputs.
NODE_FACTS = ("id", "startedAt", "finishedAt", "hostNodeName")
NODE_KEY = "node"


def _outputs_of(name: str, status: Mapping[str, Any]) -> dict[str, Any]:
    """The step workflow's outputs: its root node's (Argo keys the root node by the
    workflow's name), else the entrypoint node's."""
    nodes = nodes_of(status)
    root = nodes.get(name) if isinstance(nodes, dict) else None
    if not isinstance(root, dict) and isinstance(nodes, dict):
        root = next(
            (n for n in nodes.values() if isinstance(n, dict) and not n.get("boundaryID")), None
        )
    outputs = dict((root or {}).get("outputs") or status.get("outputs") or {})
    facts = {k: str(root[k]) for k in NODE_FACTS if isinstance(root, dict) and root.get(k)}
    if isinstance(root, dict) and root.get("podIP"):
        facts["ip"] = str(root["podIP"])  # Argo's {{steps.x.ip}} is the node's podIP
    if facts:
        # {{steps.x.startedAt}}, .finishedAt, .id, .hostNodeName of later units: the node
        # that ran the step, in its step workflow (Argo's own scope keeps these per node).
        outputs[NODE_KEY] = facts
    repository = _repository_of(status)
    if repository:
        outputs[presign.REPOSITORY_KEY] = repository
    return outputs


# Where the step workflow's key-only outputs are: the repository Argo resolved for it
# (``status.artifactRepositoryRef.artifactRepository``, ``ArtifactRepositoryRefStatus`` in
# Argo's workflow_types.go), its location only (no Secret reference is kept).
_REPOSITORY_FIELDS = ("endpoint", "bucket", "region", "insecure")


def _repository_of(status: Mapping[str, Any]) -> dict[str, Any]:
    ref = status.get("artifactRepositoryRef")
    repo = ref.get("artifactRepository") if isinstance(ref, Mapping) else None
    s3 = repo.get("s3") if isinstance(repo, Mapping) else None
    if not isinstance(s3, Mapping):
        return {}
    found = {k: s3[k] for k in _REPOSITORY_FIELDS if k in s3}
    return {"s3": found} if found.get("endpoint") and found.get("bucket") else {}


def _ran_again(unit: UnitRun, member: Mapping[str, Any], *, recorded_here: bool = False) -> bool:
    """The member reports a run that started after the recorded one ended or, when the
    outcome was recorded from the member (``recorded_here``: the unit's start is the member's
    own ``startedAt``), a run with another start. Argo sets ``startedAt`` once per workflow
    object, and timestamps have whole seconds: a copy re-created and finished within the
    second of the recorded end is told apart only by its start."""
    started = _parse_time(member.get("startedAt"))
    if started is None:
        return False
    if unit.finished_at and started > unit.finished_at:
        return True
    return recorded_here and unit.started_at is not None and started != unit.started_at


def _version(value: Any) -> int | None:
    """A resourceVersion as a number, or None. An apiserver's resourceVersions of one
    resource type compare as integers (KEP-5504, stable in Kubernetes 1.35: etcd's revision);
    anything else is only ever compared for equality."""
    text = str(value or "")
    return int(text) if text.isdecimal() and len(text) <= 32 else None


def _older(unit: UnitRun, version: str) -> bool:
    """The binding is a state before the one this unit was last folded from: the watch
    delivers every state in order, and lags under a fan-out (a step's binding changes a
    dozen times), while the resync's list reads the newest state, so the watch's older
    states of a unit can arrive after the resync recorded its outcome."""
    seen, folded = _version(version), _version(unit.binding_version)
    return seen is not None and folded is not None and seen <= folded


def _waiting_message(site: str, member: Mapping[str, Any]) -> str:
    """Why the step waits: the message of a pod node still Pending (Argo copies the
    kubelet's or the scheduler's reason into it: getPendingReason in
    workflow/controller/operator.go), e.g. a Secret volume that cannot be mounted or a
    PersistentVolumeClaim that does not exist. '' when no pod waits."""
    try:
        nodes = nodes_of(member)
    except NodeStatusUnreadable:
        return ""
    for node in nodes.values():
        if (
            isinstance(node, dict)
            and node.get("type") == "Pod"
            and node.get("phase") == "Pending"
            and node.get("message")
        ):
            name = node.get("displayName") or node.get("name") or "a pod"
            text = f"{WAITING_PREFIX}{site or 'its site'}: {name}: {node['message']}"
            return str(storable(text[:2000]))
    return ""


def _note_waiting(unit: UnitRun, site: str, member: Mapping[str, Any], version: str) -> None:
    """Carry the member's pending reason into the unit's message, and clear it once no pod
    waits. Only a message of its own kind is replaced: others say more (a failure)."""
    if unit.message and not unit.message.startswith(WAITING_PREFIX):
        return
    message = _waiting_message(site, member)
    if message == unit.message:
        return
    changed = UnitRun.objects.filter(
        pk=unit.pk,
        attempt=unit.attempt,
        phase__in=[UnitPhase.PENDING, UnitPhase.RUNNING],
        message=unit.message,
    ).update(message=message, binding_version=version, updated_at=timezone.now())
    if changed:
        # No event per unit: a fan-out waiting for capacity would write thousands.
        unit.message = message
        unit.binding_version = version


def _bound_workflow(binding: Mapping[str, Any]) -> str:
    """The name of the Workflow a ResourceBinding binds ('' for any other kind)."""
    resource = (binding.get("spec") or {}).get("resource") or {}
    return str(resource.get("name") or "") if resource.get("kind") == "Workflow" else ""


def bindings_observe(
    bindings: Iterable[Mapping[str, Any]], folded: Folded | None = None
) -> set[int]:
    """``binding_observe`` for many bindings (the resync's list, the watcher's batch): their
    units in one query, each binding on its own (one that fails is logged and the others
    are folded). Returns the runs with a unit that ended."""
    named = []
    for binding in bindings:
        name = _bound_workflow(binding)
        if name and not (folded is not None and folded.unchanged(name, seen_of(binding))):
            named.append((binding, name))
    if not named:
        return set()
    rows = UnitRun.objects.filter(workflow_name__in={name for _, name in named}).defer(
        *UNREAD_BY_FOLDS
    )
    units = {u.workflow_name: u for u in rows.order_by("-pk")}  # the lowest pk wins
    ended = set()
    named = _starts_folded(named, units, folded)
    for binding, name in named:
        unit = units.get(name)
        if unit is None:
            continue
        try:
            run_id = binding_observe(binding, unit, folded)
        except Exception:
            log.exception("%s: folding its binding failed", name)
            continue
        if run_id is not None:
            ended.add(run_id)
    return ended


def _starts_folded(
    named: list[tuple[Mapping[str, Any], str]],
    units: Mapping[str, UnitRun],
    folded: Folded | None,
) -> list[tuple[Mapping[str, Any], str]]:
    """Fold at once the bindings whose only news is that their Pending unit started (what
    ``_fold`` would do for each: the move, its event, the run's status); returns the others,
    for ``binding_observe``. If the bulk move fails, every binding is returned."""
    starts: list[tuple[UnitRun, Any, str]] = []
    plain: list[tuple[str, tuple[str, Any, tuple[str, ...]]]] = []
    rest = []
    for binding, name in named:
        unit, seen = units.get(name), seen_of(binding)
        start = None if unit is None else _plain_start(binding, seen, name, unit)
        if unit is None or start is None:
            rest.append((binding, name))
            continue
        starts.append((unit, *start))
        plain.append((name, seen))
    if not starts:
        return rest
    try:
        moved = state.units_start(starts)
    except Exception:
        log.exception("starting %d units at once failed: folding them one by one", len(starts))
        return named
    for run_id in sorted({u.run_id for u in moved}):
        if _run_status(run_id) == RunStatus.PENDING:
            run_refresh_status(run_id)
    if folded is not None:
        for name, seen in plain:
            folded.remember(name, seen)
    return rest


def _plain_start(
    binding: Mapping[str, Any], seen: tuple[str, Any, tuple[str, ...]], name: str, unit: UnitRun
) -> tuple[Any, str] | None:
    """``(startedAt, resourceVersion)`` when folding ``binding`` (``seen``: its ``seen_of``)
    into ``unit`` would only move it from Pending to Running: its own binding, at the site it
    was placed at, not refused, no pod waiting, not older than what was folded; None else."""
    site, member, _ = seen
    if (
        unit.phase != UnitPhase.PENDING
        or name != unit.workflow_name
        or not site
        or site != unit.site
        or unit.message
        or unit.refused_at is not None
        or not isinstance(member, dict)
        or ARGO_TO_UNIT.get(str(member.get("phase") or "")) != UnitPhase.RUNNING
    ):
        return None
    version = str((binding.get("metadata") or {}).get("resourceVersion") or "")
    if _older(unit, version) or refusals.refusal_of(binding, site) is not None:
        return None
    if _waiting_message(site, member):
        return None
    return _parse_time(member.get("startedAt")), version


# A unit's JSON columns, which folding a binding never reads: decoding the spec of every
# binding's unit was most of the watcher's time under a 10,000-item fan-out.
UNREAD_BY_FOLDS = ("spec", "outputs", "upstream")


def binding_observe(
    binding: Mapping[str, Any], unit: UnitRun | None = None, folded: Folded | None = None
) -> int | None:
    """Fold a ResourceBinding's state into its unit (read by name unless given). Returns the
    run id when the unit ended (the caller enqueues the run's next step), else None. With
    ``folded``, a binding whose site and member status are what was last folded is skipped."""
    name = _bound_workflow(binding)
    if not name:
        return None
    seen = seen_of(binding)
    site, member, refused = seen
    if not site and not isinstance(member, dict) and not refused:
        return None  # created, not scheduled yet: nothing to fold in, so nothing to read
    if folded is not None and folded.unchanged(name, seen):
        return None
    if unit is None:
        rows = UnitRun.objects.filter(workflow_name=name).defer(*UNREAD_BY_FOLDS)
        unit = rows.order_by("pk").first()
    if unit is None:
        return None
    run_id = _fold(binding, name, site, member, unit)
    if folded is not None:
        folded.remember(name, seen)
    return run_id


def _fold(
    binding: Mapping[str, Any], name: str, site: str, member: Any, unit: UnitRun
) -> int | None:
    if site and site != unit.site:
        _unit_placed(unit, site)
    if name == unit.workflow_name:  # not an old attempt's binding
        refusals.refusal_note(unit, binding, site)
    if not isinstance(member, dict):
        return None
    phase = ARGO_TO_UNIT.get(str(member.get("phase") or ""), None)
    version = str((binding.get("metadata") or {}).get("resourceVersion") or "")
    if _older(unit, version):
        log.debug("%s: binding %s is older than the state already folded in", name, version)
        return None
    if unit.phase in FINAL_UNIT:
        _after_outcome(unit, name, site, member, phase, version)
        return None
    _note_waiting(unit, site or unit.site, member, version)
    if phase is None or phase == unit.phase:
        return None
    fields: dict[str, Any] = {}
    started = _parse_time(member.get("startedAt"))
    finished = _parse_time(member.get("finishedAt"))
    if started:
        fields["started_at"] = started
    message = (
        storable(str(member.get("message") or ""))
        if phase in (UnitPhase.FAILED, UnitPhase.ERROR)
        else ""
    )
    if phase in FINAL_UNIT:
        fields["finished_at"] = finished or timezone.now()
        phase, message = _ended(name, member, phase, message, fields, site or unit.site)
    if phase == UnitPhase.PENDING:
        return None
    fields["binding_version"] = version
    changed = state.unit_move(unit, phase, message=message, **fields)
    if changed and _run_status(unit.run_id) == RunStatus.PENDING:
        run_refresh_status(unit.run_id)
    elif changed and phase in FINAL_UNIT and not _unfinished(unit.run_id):
        # The run's last unit ended: its status is settled here, from the database alone,
        # instead of after an advance that waits for a worker process (a one-step run behind
        # a fan-out's turns waited seconds for it). The advance still follows: an exit
        # handler, or anything else left, is its to do, and settling twice changes nothing.
        run_refresh_status(unit.run_id)
    return unit.run_id if changed and phase in FINAL_UNIT else None


def _ended(
    name: str,
    member: Mapping[str, Any],
    phase: UnitPhase,
    message: str,
    fields: dict[str, Any],
    site: str,
) -> tuple[UnitPhase, str]:
    """An ended step's outputs into ``fields``, bounded; the phase and message it ends with
    (a success whose outputs the portal cannot keep or read is no success)."""
    try:
        outputs, too_large = bound_outputs(
            _outputs_of(name, member), int(settings.PORTAL_MAX_PARAMETER_BYTES)
        )
        fields["outputs"] = outputs
        if too_large and phase == UnitPhase.SUCCEEDED:
            # A member may report anything: a value the portal does not keep cannot be
            # passed on, so the step cannot count as done.
            return UnitPhase.FAILED, too_large
        if too_large:
            return phase, f"{message}; {too_large}" if message else too_large
    except NodeStatusUnreadable as exc:
        # Its outputs are lost to the portal: a success it cannot read is no success.
        site_name = site or "its site"
        message = (
            f"{site_name}: {exc}; the portal cannot read this step's outputs. "
            f"Turn off Argo's nodeStatusOffLoad at {site_name}."
        )
        log.error("%s: %s", name, message)
        return UnitPhase.ERROR, message
    return phase, message


def _run_status(run_id: int) -> str | None:
    """The run's status alone: ``unit.run`` read the whole row, its manifest and compiled
    form included (megabytes of JSON for a big fan-out), once per unit that started."""
    return WorkflowRun.objects.filter(pk=run_id).values_list("status", flat=True).first()


def _unfinished(run_id: int) -> bool:
    return UnitRun.objects.filter(run_id=run_id).exclude(phase__in=list(FINAL_UNIT)).exists()


def _after_outcome(
    unit: UnitRun,
    name: str,
    site: str,
    member: Mapping[str, Any],
    phase: str | None,
    version: str,
) -> None:
    """A binding seen after the unit's outcome was recorded. Newer than the state it was
    recorded from and disagreeing with it (or started after the recorded end): a member
    deleted its finished copy and Karmada re-created it from its Work, or an attempt ran
    twice; the recorded outcome stands, this one is not counted. Without a comparable version
    (an outcome the portal decided itself) only a start after the recorded end says so."""
    if phase is None:
        return
    comparable = _version(version) is not None and _version(unit.binding_version) is not None
    if comparable and phase == unit.phase and not _ran_again(unit, member, recorded_here=True):
        return  # the same outcome, seen again (labels, a finalizer, the deletion)
    if not comparable and not _ran_again(unit, member):
        log.debug("%s: member still reports %s after the recorded %s", name, phase, unit.phase)
        return
    log.warning(
        "%s: ignored a re-run of an already recorded attempt %s at %s (now %s, recorded %s)",
        name,
        unit.attempt,
        site or "?",
        member.get("phase"),
        unit.phase,
    )


def _unit_placed(unit: UnitRun, site: str) -> None:
    """Karmada scheduled the step workflow. A runtime unit that the webhook did not place
    (unreachable, too slow) was placed by the fallback policy: record that decision.

    The webhook queues its decision before it answers, so before the binding exists: the queue
    is written first (``decisions_written``), and then a webhook decision is in the database
    if there was one."""
    queue_read = True
    if unit.timing == UnitTiming.RUNTIME:
        unreadable = decisions_written(wait=True)
        if unreadable is not None:
            queue_read = False
            log.warning("%s: decision queue unreadable (%s)", unit.workflow_name, unreadable)
        unit.refresh_from_db(fields=["site", "reason"])
        if unit.site == site:
            return  # placed by the webhook, as its decision says
    changed = state.unit_place(
        UnitRun.objects.filter(pk=unit.pk, attempt=unit.attempt),
        site,
        from_sites=[unit.site],
        updated_at=timezone.now(),
    )
    if not changed:
        return
    had_decision = PlacementDecision.objects.filter(
        unit=unit, attempt=unit.attempt, site=site
    ).exists()
    # No ``holds_changed`` here: what a unit asks for is in its spec, which the folds never
    # read (under a big fan-out that read is what the watcher spent its time on). A site that
    # Karmada's fallback policy chose reaches the webhook with its next fleet read.
    unit.site = site
    if not had_decision and not queue_read:
        # A webhook decision may still be queued: do not call it the fallback policy's.
        log.warning("%s: placed at %s; not known yet by whom", unit.workflow_name, site)
    elif not had_decision:
        reason = (
            f"fallback site: the placement webhook did not answer; {site} was chosen by the "
            "worker when the step was created, as a site satisfying every hard constraint"
            if unit.timing == UnitTiming.RUNTIME
            else "fallback policy: Karmada chose a ready site (the placement webhook did not)"
        )
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
    event(unit.run_id, "unit-placed", f"{unit.name}: scheduled at {site}", unit)
