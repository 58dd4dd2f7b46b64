"""Runtime placement: the admission webhook's decisions (DESIGN sections 3 and 5, issue 6).

karmada-apiserver sends an ``admission.k8s.io/v1`` AdmissionReview on CREATE of a Workflow; we
answer one with the same uid, always ``allowed: true``, and a JSONPatch adding the site label and
the reason annotation when we place it:

* a step workflow labelled ``<domain>/placement=runtime``: its unit is decided now, with the
  sites where its upstream units actually ran, the bytes they produced and the fleet as last
  synced (``strict_capacity``: free CPU and memory must fit now);
* a Workflow created directly on Karmada (no ``<domain>/managed``): placed whole by the rules;
* anything that already has ``<domain>/site``: allowed unchanged.

The webhook never stands in the way. Any error and any decision that runs past
``PORTAL_WEBHOOK_BUDGET_MS`` answers allowed with no patch (the fallback policy then places a
step workflow) and logs why. Only a body that is not an AdmissionReview raises
``NotAdmissionReview`` (answered 400).

Queries per admission (hot path, fleet snapshot warm): none. A runtime step workflow carries
its placement context (annotation ``<domain>/placement-context``, written by the worker: the
unit's needs, its project, where its upstream units ran and the bytes they produced), so the
webhook still finds the unit from the labels but need not read it; and the decision is queued
with one Redis command (``RPUSH``, shared by concurrent admissions) for ``decisions_flush`` to
write later (the watcher every second and before it reads a binding's site, the beat resync).
A step workflow without a usable context (an older portal's) costs three queries (statement
timeout, the unit, its upstream units); with no queue configured (the embedded demo) or Redis
unreachable, the decision is written at once (four more). A direct Workflow costs none, or one
when it references the catalogue.

The snapshot of sites, links, rules and datasets (5 queries) is rebuilt at most once per
``SNAPSHOT_TTL_S`` per process: capacity comes from the watcher's Cluster sync, which is itself
seconds old, so a second of staleness changes nothing a decision could see.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, cast

import redis
from django.conf import settings
from django.db import DataError, IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from placement import codec, parser, planner
from placement.parser import Arguments, Resources, Unit, UnitKind, WorkflowInvalid
from placement.selectors import dataset_inputs, fleet_state, rule_inputs
from portal import labels
from portal.choices import DecisionSource, UnitTiming
from portal.models import PlacementDecision, UnitRun, WorkflowTemplate

log = logging.getLogger(__name__)

ADMISSION_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
SNAPSHOT_TTL_S = 1.0
REASON_MAX_CHARS = 1024  # annotations are for humans; the full why is in PlacementDecision


class NotAdmissionReview(ValueError):
    """The body is not an AdmissionReview at all (no request, no uid): answered 400."""


class BudgetExceeded(Exception):
    """The decision ran past ``PORTAL_WEBHOOK_BUDGET_MS``."""


class _Skip(Exception):
    """Nothing to place, or nothing we may place: allowed unchanged, with the why logged."""


# --------------------------------------------------------------------------------------------
# The fleet snapshot: a brief per-process cache of what every decision reads


@dataclasses.dataclass(frozen=True)
class Snapshot:
    fleet: planner.Fleet
    rules: planner.RuleBook
    datasets: planner.DataCatalogue
    taken_at: float


_snapshot: Snapshot | None = None
_snapshot_lock = threading.Lock()


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
        snap = Snapshot(
            fleet=fleet_state(),
            rules=planner.RuleBook(rule_inputs()),
            datasets=planner.DataCatalogue(dataset_inputs()),
            taken_at=time.monotonic(),
        )
        _snapshot = snap
        return snap


def snapshot_clear() -> None:
    """Forget the snapshot (tests; a process that must see a change at once)."""
    global _snapshot
    with _snapshot_lock:
        _snapshot = None


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


def placement_patch(obj: Mapping[str, Any], site: str, reason: str) -> list[dict[str, Any]]:
    """Add ``<domain>/site`` and ``<domain>/reason``, creating ``metadata.labels`` or
    ``metadata.annotations`` when absent (a JSONPatch ``add`` into a missing map fails, and
    Kubernetes would then reject the whole patch)."""
    site_key, reason_key = labels.key(labels.SITE), labels.key(labels.REASON)
    reason = " ".join(reason.split())[:REASON_MAX_CHARS]
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return [
            {
                "op": "add",
                "path": "/metadata",
                "value": {"labels": {site_key: site}, "annotations": {reason_key: reason}},
            }
        ]
    ops: list[dict[str, Any]] = []
    for field, key, value in (("labels", site_key, site), ("annotations", reason_key, reason)):
        if isinstance(meta.get(field), Mapping):
            ops.append({"op": "add", "path": json_pointer("metadata", field, key), "value": value})
        else:
            # Absent or null: replace the whole map ("add" replaces an existing null member).
            ops.append(
                {"op": "add", "path": json_pointer("metadata", field), "value": {key: value}}
            )
    return ops


# --------------------------------------------------------------------------------------------
# The decision


class _Deadline:
    def __init__(self, started: float, budget_ms: int) -> None:
        self.at = started + budget_ms / 1000.0

    def remaining_ms(self) -> int:
        return int((self.at - time.monotonic()) * 1000)

    def check(self, stage: str) -> None:
        if time.monotonic() > self.at:
            raise BudgetExceeded(f"budget of {settings.PORTAL_WEBHOOK_BUDGET_MS} ms spent {stage}")


def admission_review(*, body: bytes, started: float | None = None) -> dict[str, Any]:
    """Answer one AdmissionReview. Raises only ``NotAdmissionReview``; every other failure is
    answered allowed without a patch and logged."""
    started = time.monotonic() if started is None else started
    api_version, uid, request = review_parse(body)
    deadline = _Deadline(started, settings.PORTAL_WEBHOOK_BUDGET_MS)
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


def _admit(
    request: Mapping[str, Any], deadline: _Deadline, uid: str
) -> list[dict[str, Any]] | None:
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


def _statement_timeout(deadline: _Deadline) -> None:
    """Bound every query of this admission by what is left of the budget (PostgreSQL only):
    a slow or locked database must not hold the answer until Karmada's own 3 s timeout.

    The commit does not wait for the WAL flush either: a decision is a record of why, and the
    unit's site is read back from Karmada's binding by the watcher, so losing the last few
    milliseconds of decisions in a database crash loses nothing that matters, while waiting
    for fsync was half of every admission's time."""
    remaining = deadline.remaining_ms()
    if remaining <= 0:
        deadline.check("before reading")
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT set_config('statement_timeout', %s, true), "
                "set_config('synchronous_commit', 'off', true)",
                [str(max(remaining, 1))],
            )


def upstream_bytes(outputs: Any) -> int | None:
    """Bytes an upstream unit produced: the sum of its output artifacts' ``size`` when every
    artifact states one, 0 when it produced no artifacts, None when unknown (the planner then
    assumes a size, so a fast link still counts)."""
    if not isinstance(outputs, Mapping) or not outputs:
        return None
    artifacts = outputs.get("artifacts")
    if artifacts is None:
        return 0
    if not isinstance(artifacts, list):
        return None
    total = 0
    for a in artifacts:
        size = a.get("size") if isinstance(a, Mapping) else None
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            return None
        total += size
    return total


def _admit_step(
    request: Mapping[str, Any],
    obj: Mapping[str, Any],
    meta: Mapping[str, Any],
    obj_labels: Mapping[str, Any],
    name: str,
    dry_run: bool,
    deadline: _Deadline,
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
    found = context_read(meta.get("annotations"), slug)
    if found is None:
        # No (usable) context: a step workflow from an older portal, or edited by hand.
        found = _context_from_database(run_id, slug, attempt, deadline)
    unit, project, upstream = found
    snap = snapshot_get()
    deadline.check("reading")
    decision = planner.decide(
        unit,
        snap.fleet,
        snap.rules,
        snap.datasets,
        project,
        upstream,
        timing="runtime",
        strict_capacity=True,
    )
    deadline.check("deciding")
    if not dry_run:
        decision_record(
            _entry(uid, decision, name, run_id=run_id, unit=slug, attempt=attempt), deadline
        )
    if not decision.site:
        raise _Skip(f"no eligible site now: {decision.reason}")
    return placement_patch(obj, decision.site, decision.reason)


def _context_from_database(
    run_id: int, slug: str, attempt: int, deadline: _Deadline
) -> tuple[Unit, str | None, dict[str, planner.Upstream]]:
    """The unit, its project and its upstream units' sites and bytes, read from the database
    (three queries): for step workflows that carry no placement context."""
    with transaction.atomic():
        _statement_timeout(deadline)
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
        upstream: dict[str, planner.Upstream] = {}
        if unit.upstream:
            # order_by(): the model's default ordering would join the run table for nothing.
            for up_name, up_site, up_outputs in (
                UnitRun.objects.filter(run_id=run_id, name__in=list(unit.upstream))
                .order_by()
                .values_list("name", "site", "outputs")
            ):
                if up_site:
                    upstream[up_name] = planner.Upstream(up_site, upstream_bytes(up_outputs))
    project = unit.run.project.name if unit.run.project else None
    return codec.unit_from_dict(unit.spec), project, upstream


# --------------------------------------------------------------------------------------------
# The placement context: what the worker knew when it created the step workflow

CONTEXT_VERSION = 1
CONTEXT_MAX_CHARS = 32 * 1024  # well inside the 256 KiB Kubernetes allows all annotations
# What planner.decide reads of a unit (codec names); arguments and items can be large and the
# planner reads neither.
_CONTEXT_UNIT_KEYS = (
    "name",
    "slug",
    "kind",
    "task",
    "template",
    "templates",
    "upstream",
    "depends",
    "labels",
    "images",
    "resources",
    "datasets",
    "data_refs",
)


def context_annotation(
    *, project: str | None, unit_spec: Mapping[str, Any], units: Iterable[Any]
) -> str | None:
    """The ``<domain>/placement-context`` annotation of a runtime step workflow: the unit's
    needs and where its upstream units ran and what they produced. They have all ended when it
    is created, so this is the newest state of them; capacity and cordons still come from the
    fleet snapshot at admission. None when it would be too large (the webhook then reads the
    database)."""
    needed = set(unit_spec.get("upstream") or ())
    upstream = {
        u.name: [u.site, upstream_bytes(u.outputs)] for u in units if u.name in needed and u.site
    }
    doc = {
        "v": CONTEXT_VERSION,
        "project": project,
        "unit": {k: unit_spec[k] for k in _CONTEXT_UNIT_KEYS if k in unit_spec},
        "upstream": upstream,
    }
    text = json.dumps(doc, separators=(",", ":"), sort_keys=True)
    return text if len(text) <= CONTEXT_MAX_CHARS else None


class _Malformed(Exception):
    """A placement context field of the wrong type."""


def _str(d: Mapping[str, Any], key: str, default: str | None = None) -> str:
    value = d.get(key, default)
    if type(value) is not str:
        raise _Malformed(key)
    return value


def _strs(d: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = d.get(key, [])
    if type(value) is not list or not all(type(v) is str for v in value):
        raise _Malformed(key)
    return tuple(value)


def _context_unit(d: Any) -> Unit:
    """A Unit from the context's codec dict (without arguments: the planner reads none), every
    field the planner reads checked for its type (``_Malformed``): the annotation is text that
    anyone allowed to create Workflows in the namespace could have written."""
    if type(d) is not dict:
        raise _Malformed("unit")
    name, template = _str(d, "name"), _str(d, "template")
    kind = _str(d, "kind", "task")
    if kind not in ("task", "step", "workflow"):
        raise _Malformed("kind")
    unit_labels = d.get("labels", {})
    if type(unit_labels) is not dict or not all(type(v) is str for v in unit_labels.values()):
        raise _Malformed("labels")
    r = d.get("resources", {})
    if type(r) is not dict or not all(type(v) is int and v >= 0 for v in r.values()):
        raise _Malformed("resources")
    return Unit(
        name=name,
        slug=_str(d, "slug"),
        kind=cast(UnitKind, kind),
        task=_str(d, "task", name),
        template=template,
        templates=_strs(d, "templates") or (template,),
        upstream=_strs(d, "upstream"),
        depends=_str(d, "depends", ""),
        when=None,
        arguments=_NO_ARGUMENTS,
        labels=unit_labels,
        images=_strs(d, "images"),
        resources=Resources(
            cpu_millicores=r.get("cpu_millicores", 0),
            memory_bytes=r.get("memory_bytes", 0),
            gpus=r.get("gpus", 0),
        ),
        datasets=_strs(d, "datasets"),
        data_refs=_strs(d, "data_refs"),
    )


_NO_ARGUMENTS = Arguments()


def context_read(
    annotations: Any, slug: str
) -> tuple[Unit, str | None, dict[str, planner.Upstream]] | None:
    """The unit, project and upstream of a step workflow's placement context; None when it is
    absent, not well-formed, or about another unit than the labels name (the caller then reads
    the database)."""
    if not isinstance(annotations, Mapping):
        return None
    text = annotations.get(labels.key(labels.PLACEMENT_CONTEXT))
    if not isinstance(text, str) or len(text) > CONTEXT_MAX_CHARS:
        return None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("v") != CONTEXT_VERSION:
        return None
    project = doc.get("project")
    if project is not None and not isinstance(project, str):
        return None
    ups = doc.get("upstream")
    if not isinstance(ups, dict):
        return None
    upstream: dict[str, planner.Upstream] = {}
    for up_name, value in ups.items():
        if not (isinstance(value, list) and len(value) == 2):
            return None
        site, nbytes = value
        if not isinstance(site, str) or not site:
            return None
        if nbytes is not None and (type(nbytes) is not int or nbytes < 0):
            return None
        upstream[up_name] = planner.Upstream(site, nbytes)
    try:
        unit = _context_unit(doc.get("unit"))
    except _Malformed:
        return None
    if unit.slug != slug:
        return None
    return unit, project, upstream


# --------------------------------------------------------------------------------------------
# Recording decisions: queued by the admission, written by whoever drains the queue

_DRAIN_BATCH = 500
_DRAIN_LOCK_TTL_S = 60  # longer than any batch takes; a drainer that died frees it after this
_PUSH_TIMEOUT_S = 0.25  # an unreachable Redis costs an admission little of its budget
_DRAIN_TIMEOUT_S = 5.0
# Trim only while this drainer still holds the lock: one whose lock expired mid-batch must
# not trim entries another drainer has read meanwhile (it leaves them; their uids dedupe).
_TRIM_IF_OWNER = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    redis.call('ltrim', KEYS[2], ARGV[2], -1)
    return 1
end
return 0
"""
_RELEASE_IF_OWNER = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
"""
_clients: dict[tuple[str, float], redis.Redis] = {}
_clients_lock = threading.Lock()


class QueueUnavailable(Exception):
    """The decision queue (Redis) did not answer; queued decisions wait for the next drain."""


def _queue(timeout: float = _PUSH_TIMEOUT_S) -> redis.Redis | None:
    """The Redis client of ``PORTAL_DECISION_QUEUE_URL`` (one pool per process and timeout),
    or None when there is no queue (the embedded demo)."""
    url = settings.PORTAL_DECISION_QUEUE_URL
    if not url:
        return None
    client = _clients.get((url, timeout))
    if client is None:
        with _clients_lock:
            client = _clients.get((url, timeout))
            if client is None:
                client = redis.Redis.from_url(
                    url, socket_timeout=timeout, socket_connect_timeout=timeout
                )
                _clients[(url, timeout)] = client
    return client


def _queue_key() -> str:
    return str(settings.PORTAL_DECISION_QUEUE_KEY)


def _entry(
    uid: str,
    decision: planner.Decision,
    workflow_name: str,
    *,
    run_id: int | None = None,
    unit: str | None = None,
    attempt: int = 1,
) -> dict[str, Any]:
    """A queued decision: whose (run id and unit slug, as the labels say; none for a direct
    Workflow), what was decided and when."""
    return {
        "uid": uid,
        "run": run_id,
        "unit": unit,
        "attempt": attempt,
        "workflow": workflow_name,
        "site": decision.site or "",
        "reason": decision.reason,
        "candidates": [c.as_dict() for c in decision.candidates],
        "at": time.time(),
    }


class _Pushes:
    """Group commit of queue entries: the admission that finds no push in flight pushes its
    entry together with every entry queued meanwhile, in one RPUSH; the others wait for the
    push that carries theirs. Under load one round trip to Redis carries several decisions
    (half the Redis work per admission in the benchmark); every admission still answers only
    once its own entry is in Redis, or falls back when that push failed."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        # (client, key, entry, outcome): outcome gets None once pushed, the error if not.
        self.pending: list[tuple[redis.Redis, str, str, list[BaseException | None]]] = []
        self.busy = False


_pushes = _Pushes()


def _group_push(client: redis.Redis, key: str, text: str) -> None:
    """RPUSH ``text`` to ``key``, batched with concurrent callers; raises ``redis.RedisError``
    when the push that carried it failed."""
    g = _pushes
    outcome: list[BaseException | None] = []
    with g.cond:
        g.pending.append((client, key, text, outcome))
        while not outcome and g.busy:
            g.cond.wait()
        if outcome:  # pushed (or not) by another caller
            if outcome[0] is not None:
                raise redis.RedisError(f"queue push failed: {outcome[0]}")
            return
        g.busy = True
        batch, g.pending = g.pending, []
    error: BaseException | None = None
    try:
        # One list per (client, key): only tests change the queue while admissions run.
        lists: dict[tuple[int, str], tuple[redis.Redis, list[str]]] = {}
        for c, k, t, _ in batch:
            lists.setdefault((id(c), k), (c, []))[1].append(t)
        for (_, k), (c, texts) in lists.items():
            c.rpush(k, *texts)
    except BaseException as exc:
        error = exc
        raise
    finally:
        with g.cond:
            for *_, o in batch:
                o.append(error)
            g.busy = False
            g.cond.notify_all()


def decision_record(entry: dict[str, Any], deadline: _Deadline | None = None) -> None:
    """Queue one decision (one Redis command), or write it at once when there is no queue or
    it does not answer. Queued entries are written by ``decisions_flush``.

    A push that succeeded is answered with the patch even if it ended past the budget: the
    push is bounded by ``_PUSH_TIMEOUT_S``, so the answer still reaches karmada-apiserver
    well within its 3 s, and the entry cannot be taken back without racing a drainer."""
    client = _queue()
    if client is not None:
        try:
            _group_push(client, _queue_key(), json.dumps(entry, separators=(",", ":")))
            return
        except redis.RedisError as exc:  # Redis down: the database still takes it
            log.warning("decision queue unreachable (%s); recording the decision at once", exc)
    with transaction.atomic():
        if deadline is not None:
            _statement_timeout(deadline)
        _store([entry])
        if deadline is not None:
            # Past the budget now, Karmada may have given up on us: roll back, so the
            # database never says a site the Workflow did not get.
            deadline.check("recording")


def decisions_flush(*, wait: bool = False, limit: int | None = None) -> int:
    """Write the queued decisions to the database; returns how many entries were taken.

    Safe to run anywhere, any number of times: a lock keeps two drainers from trimming each
    other's entries; entries are trimmed only after their transaction committed, and only
    while the lock is still ours; a drainer that dies in between leaves entries that the next
    one writes again without duplicates (decisions are unique by their AdmissionReview uid).
    An empty queue costs one Redis command and no lock: entries leave the list only after they
    are committed, so an empty list means every decision queued so far is in the database.

    ``wait``: when another drain is running, wait for it (up to 5 s) and drain after it; the
    watcher does, before it decides whether the fallback policy placed a unit. ``limit``: at
    most this many entries (default: what was queued when it started). Raises
    ``QueueUnavailable`` when Redis does not answer; does nothing without a queue."""
    client = _queue(_DRAIN_TIMEOUT_S)
    if client is None:
        return 0
    key = _queue_key()
    lock_key = f"{key}:drain-lock"
    try:
        queued = cast(int, client.llen(key))
        if not queued:
            return 0
        token = uuid.uuid4().hex
        give_up = time.monotonic() + (5.0 if wait else 0.0)
        while not client.set(lock_key, token, nx=True, ex=_DRAIN_LOCK_TTL_S):
            if time.monotonic() >= give_up:
                return 0  # another drainer has it
            time.sleep(0.01)
        try:
            todo = queued if limit is None else limit
            taken = 0
            while taken < todo:
                raw = cast(list[bytes], client.lrange(key, 0, min(_DRAIN_BATCH, todo - taken) - 1))
                if not raw:
                    break
                _store_batch(_entries_of(raw))
                if not client.eval(_TRIM_IF_OWNER, 2, lock_key, key, token, str(len(raw))):
                    log.warning("decision drain outlived its lock; leaving the rest to others")
                    break
                taken += len(raw)
            return taken
        finally:
            client.eval(_RELEASE_IF_OWNER, 1, lock_key, token)
    except redis.RedisError as exc:
        raise QueueUnavailable(str(exc)) from exc


def _entries_of(raw: Iterable[bytes]) -> list[dict[str, Any]]:
    entries = []
    for item in raw:
        try:
            entry = json.loads(item)
        except ValueError:
            log.error("dropping a queued decision that is not JSON: %r", item[:200])
            continue
        if isinstance(entry, dict) and isinstance(entry.get("uid"), str) and entry["uid"]:
            entries.append(entry)
        else:
            log.error("dropping a queued decision without uid: %r", item[:200])
    return entries


def _store_batch(entries: list[dict[str, Any]]) -> None:
    """One transaction for the batch. If the database refuses the batch's data, each entry
    alone, so one bad entry (logged and dropped) never blocks the queue behind it; any other
    error (the database is down) propagates and the batch stays queued."""
    if not entries:
        return
    try:
        with transaction.atomic():
            _synchronous_commit_off()
            _store(entries)
        return
    except (IntegrityError, DataError, ValueError, TypeError, KeyError):
        if len(entries) == 1:
            log.exception("dropping a queued decision the database refused: %r", entries[0])
            return
    for entry in entries:
        _store_batch([entry])


def _synchronous_commit_off() -> None:
    """A decision is a record of why (see ``_statement_timeout``): no need to wait for fsync."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit = off")


def _store(entries: list[dict[str, Any]]) -> None:
    """Write decisions and, for the unit's current attempt, its site and reason: one query for
    the units, one insert, one update per unit placed, whatever the number of entries. An
    entry whose run is gone is dropped; one for an attempt that is no longer current is kept
    (it says what that attempt's Workflow got) but leaves the unit alone."""
    wanted = {
        (e["run"], e["unit"])
        for e in entries
        if type(e.get("run")) is int and isinstance(e.get("unit"), str)
    }
    units: dict[tuple[int, str], tuple[int, int]] = {}
    if wanted:
        match = Q()
        for run_id, slug in wanted:
            match |= Q(run_id=run_id, slug=slug)
        for pk, run_id, slug, current in (
            UnitRun.objects.filter(match).order_by().values_list("id", "run_id", "slug", "attempt")
        ):
            units[(run_id, slug)] = (pk, current)
    rows = []
    placed: dict[int, tuple[int, str, str]] = {}  # unit → the last decision of its attempt
    for e in entries:
        found = None
        if e.get("run") is not None:
            found = units.get((e["run"], str(e.get("unit"))))
            if found is None:
                log.info("dropping a queued decision for a unit that is gone: %s", e["uid"])
                continue
        at = e.get("at")
        site = str(e.get("site") or "")
        reason = str(e.get("reason") or "")
        attempt = int(e.get("attempt") or 1)
        rows.append(
            PlacementDecision(
                run_id=e["run"] if found else None,
                unit_id=found[0] if found else None,
                workflow_name=str(e.get("workflow") or "")[:253],
                attempt=attempt,
                source=DecisionSource.WEBHOOK,
                timing=UnitTiming.RUNTIME,
                site=site,
                reason=reason,
                candidates=e.get("candidates") or [],
                admission_uid=e["uid"],
                created_at=(
                    datetime.fromtimestamp(at, tz=UTC)
                    if isinstance(at, int | float)
                    else timezone.now()
                ),
            )
        )
        if found and site and found[1] == attempt:
            placed[found[0]] = (attempt, site, reason)
    PlacementDecision.objects.bulk_create(rows, ignore_conflicts=True)
    for pk, (attempt, site, reason) in placed.items():
        # Only the current attempt (a retry or failover that started meanwhile wins), and not
        # over another site (an entry drained again after Karmada's binding said otherwise).
        UnitRun.objects.filter(pk=pk, attempt=attempt, site__in=["", site]).update(
            site=site, reason=reason
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
    obj: Mapping[str, Any], name: str, dry_run: bool, deadline: _Deadline, uid: str
) -> list[dict[str, Any]] | None:
    catalogue: dict[str, Any] = {}
    if parser.uses_catalogue(obj.get("spec")):
        with transaction.atomic():
            _statement_timeout(deadline)
            catalogue = dict(WorkflowTemplate.objects.values_list("name", "manifest"))
    try:
        parsed = parser.parse_workflow(
            obj,
            catalogue,
            limits=parser.Limits(
                max_body_bytes=settings.PORTAL_MAX_BODY_BYTES,
                max_units=settings.PORTAL_MAX_UNITS,
            ),
            domain=settings.PORTAL_LABEL_DOMAIN,
        )
    except WorkflowInvalid as exc:
        e = exc.errors[0]
        raise _Skip(f"workflow does not parse: {e.path or '<document>'}: {e.message}") from None
    snap = snapshot_get()
    deadline.check("reading")
    decision = planner.decide(
        whole_unit(parsed),
        snap.fleet,
        snap.rules,
        snap.datasets,
        None,
        timing="runtime",
        strict_capacity=True,
    )
    deadline.check("deciding")
    if not dry_run:
        decision_record(_entry(uid, decision, name), deadline)
    if not decision.site:
        raise _Skip(f"no eligible site now: {decision.reason}")
    return placement_patch(obj, decision.site, decision.reason)


# --------------------------------------------------------------------------------------------
# Registration


def webhook_url() -> str:
    """``PORTAL_WEBHOOK_URL`` with the token as a path segment: karmada-apiserver's
    ``clientConfig.url`` cannot carry headers, so the URL is the credential (keep the printed
    configuration as secret as the token)."""
    url = settings.PORTAL_WEBHOOK_URL
    token = settings.PORTAL_WEBHOOK_TOKEN
    if not token:
        return url
    return f"{url.rstrip('/')}/{token}/"


def webhook_configuration() -> dict[str, Any]:
    """The MutatingWebhookConfiguration for karmada-apiserver (DESIGN section 3)."""
    from placement.manifests import webhook_configuration as build

    return build(
        webhook_url(),
        ca_bundle=settings.PORTAL_WEBHOOK_CA_BUNDLE or None,
        domain=settings.PORTAL_LABEL_DOMAIN,
    )


def webhook_register() -> dict[str, Any]:
    """Create or replace the configuration on karmada-apiserver; returns what was applied."""
    from portal import gateway

    body = webhook_configuration()
    gateway.apply_mutating_webhook(body)
    return body
