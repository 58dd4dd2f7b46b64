"""Reads for runs: who may see what."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import BigIntegerField, F, OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from placement import manifests
from placement.manifests import GlobalOutputs
from placement.parser import Resources, parse_arguments
from portal import presign
from portal.choices import ACTIVE_RUN, FINAL_UNIT, RunStatus, UnitPhase
from portal.models import RunEvent, UnitRun, WorkflowRun
from portal.outputs import preview
from sites.models import Project, Site


def runs_visible_to(user: Any) -> QuerySet[WorkflowRun]:
    """Staff see every run; others the runs they own and those of their projects."""
    runs = WorkflowRun.objects.select_related("project", "owner")
    if not user.is_authenticated:
        return runs.none()
    if user.is_staff:
        return runs
    return runs.filter(Q(owner=user) | Q(project__members=user)).distinct()


def projects_of(user: Any) -> QuerySet[Project]:
    if user.is_staff:
        return Project.objects.all()
    return Project.objects.filter(members=user)


# --- one unit: its attempts, what it waits for, what it took and made ----------------------


@dataclass(frozen=True)
class Attempt:
    number: int
    site: str
    workflow: str
    phase: str
    started_at: datetime | None
    finished_at: datetime | None
    ended: str  # "" for the current attempt; "failed over", "retried"
    why: str

    @property
    def current(self) -> bool:
        return not self.ended


BLOCKED_SHOWN = 5


def failovers_blocked(run: WorkflowRun) -> tuple[list[RunEvent], int]:
    """The run's units that wait at a closed site (not ready or cordoned) because no other
    site could take them, each with its latest "failover-blocked" event (the first
    ``BLOCKED_SHOWN``), and how many there are. Empty once the site opens again or the unit
    moves: a later "failover" event, or the unit's site usable, ends the block."""
    closed = list(
        Site.objects.filter(Q(ready=False) | Q(cordoned=True)).values_list("name", flat=True)
    )
    if not closed or run.status not in ACTIVE_RUN:
        return [], 0
    waiting = run.units.filter(
        site__in=closed, phase__in=[UnitPhase.PENDING, UnitPhase.RUNNING]
    ).values("pk")
    latest = (
        RunEvent.objects.filter(
            run=run, unit__in=waiting, kind__in=["failover-blocked", "failover"]
        )
        .order_by("unit_id", "-created_at", "-id")
        .distinct("unit_id")
    )
    blocked = [e for e in latest.select_related("unit") if e.kind == "failover-blocked"]
    blocked.sort(key=lambda e: (e.unit.position if e.unit else 0, e.pk))
    return blocked[:BLOCKED_SHOWN], len(blocked)


def unit_by_key(run: WorkflowRun, key: str) -> UnitRun:
    """A unit of ``run`` by name, or by slug (names of loop items may hold a slash, which a
    URL path segment cannot). Raises ``UnitRun.DoesNotExist``."""
    units = run.units.select_related("run")
    found = units.filter(name=key).first() or units.filter(slug=key).first()
    if found is None:
        raise UnitRun.DoesNotExist(key)
    return found


def unit_attempts(unit: UnitRun, events: list[RunEvent] | None = None) -> list[Attempt]:
    """Every attempt of the unit, oldest first: the ended ones from the events that ended
    them (failover, retry), the current one from the unit itself."""
    if events is None:
        events = list(unit.events.filter(kind__in=ENDED_ATTEMPT_KINDS).order_by("created_at", "id"))
    ended: dict[int, Attempt] = {}
    for e in events:
        rec = (e.data or {}).get("ended_attempt")
        if not isinstance(rec, dict) or not isinstance(rec.get("attempt"), int):
            continue
        started = parse_datetime(rec["started_at"]) if rec.get("started_at") else None
        ended[rec["attempt"]] = Attempt(
            number=rec["attempt"],
            site=str(rec.get("site") or ""),
            workflow=str(rec.get("workflow") or ""),
            phase=str(rec.get("phase") or ""),
            started_at=started,
            finished_at=e.created_at,
            ended=str(rec.get("ended") or "ended"),
            why=str(rec.get("why") or rec.get("message") or ""),
        )
    out = [ended[n] for n in sorted(ended) if n < unit.attempt]
    out.append(
        Attempt(
            number=unit.attempt,
            site=unit.site,
            workflow=unit.workflow_name,
            phase=unit.phase,
            started_at=unit.started_at,
            finished_at=unit.finished_at,
            ended="",
            why="",
        )
    )
    return out


ENDED_ATTEMPT_KINDS = ("failover", "unit-retried", "unit-vanished")


def ended_attempts_of_run(run: WorkflowRun) -> dict[str, list[Attempt]]:
    """The ended attempts of every unit of the run, by unit name (for the graph and the
    timeline), in one query."""
    out: dict[str, list[Attempt]] = {}
    rows = run.events.filter(kind__in=ENDED_ATTEMPT_KINDS, unit__isnull=False).select_related(
        "unit"
    )
    for e in rows.order_by("created_at", "id"):
        assert e.unit is not None
        for a in unit_attempts(e.unit, [e])[:-1]:
            out.setdefault(e.unit.name, []).append(a)
    return out


def unit_waiting_for(unit: UnitRun, phases: dict[str, str]) -> str:
    """What a pending unit waits for, in words ("" when it is not waiting): the real cause
    where the portal knows it, in this order: upstream units still open; the run stopped or
    suspended; what the worker or the watcher wrote on the unit (a lock, Karmada unreachable,
    the member's reason a pod is Pending, Karmada's refusal); only then where it stands."""
    if unit.phase != UnitPhase.PENDING:
        return ""
    run = unit.run
    if not unit.workflow_name:
        open_ = [u for u in unit.upstream or [] if phases.get(u) not in FINAL_UNIT]
        if open_:
            shown = ", ".join(open_[:5]) + (f" and {len(open_) - 5} more" if len(open_) > 5 else "")
            return f"Waiting for {shown} to finish."
        if run.status == RunStatus.STOPPED:
            return "The run was stopped before this unit started."
    if unit.refused_at is not None and unit.message:
        # Karmada's refusal in words (portal.controller.refusals), the real cause rather than a
        # guess; the unit's message goes on with Karmada's own text.
        cause = unit.message.split(". Karmada: ", 1)[0].rstrip(".")
        return f"Karmada refuses it: {cause}. It is placed elsewhere after the site's grace."
    if unit.message:
        return _as_sentence(unit.message)
    if not unit.workflow_name:
        if run.suspended:
            return "Waiting for the run to be resumed (spec.suspend)."
        return "Ready: the step workflow is being created on Karmada."
    if not unit.site:
        return "Waiting for placement: the admission webhook or the fallback policy picks a site."
    return (
        f"Waiting for {unit.site} to start the step workflow {unit.workflow_name}: "
        "no pod of it has reported a reason yet."
    )


def _as_sentence(message: str) -> str:
    text = message.strip().removeprefix("waiting: ")
    text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


def unit_detail(unit: UnitRun) -> dict[str, Any]:
    """Everything the step panel and the unit's REST representation show."""
    run = unit.run
    events = list(unit.events.order_by("created_at", "id"))
    attempts = unit_attempts(unit, [e for e in events if e.kind in ENDED_ATTEMPT_KINDS])
    phases = dict(run.units.filter(name__in=unit.upstream or []).values_list("name", "phase"))
    decision = (
        unit.decisions.order_by("-attempt", "-created_at", "-id").first() if unit.pk else None
    )
    spec = unit.spec or {}
    outputs = unit.outputs or {}
    shown = preview(outputs, int(settings.PORTAL_OUTPUT_PREVIEW_CHARS))
    return {
        "unit": unit,
        "attempts": attempts,
        "events": events,
        "decision": decision,
        "waiting_for": unit_waiting_for(unit, phases),
        "suspended": unit_suspended(unit),
        # Inputs are upstream outputs filled in: as long, and cut the same way.
        "inputs": preview(
            resolved_inputs(unit, spec.get("arguments") or {}),
            int(settings.PORTAL_OUTPUT_PREVIEW_CHARS),
        ),
        "outputs": shown,
        "exit_code": outputs.get("exitCode"),
        "resources": spec.get("resources") or {},
        "namespace": str(settings.KARMADA_NAMESPACE),
    }


def unit_suspended(unit: UnitRun) -> bool:
    """A running unit whose template is (or holds) an Argo ``suspend`` template: while it
    runs, it waits for someone to resume it ("waiting for approval")."""
    if unit.phase != UnitPhase.RUNNING:
        return False
    suspend = unit.run.suspend_templates
    keys = (unit.spec or {}).get("templates") or [unit.template]
    return any(k in suspend for k in keys)


def run_outputs(run: WorkflowRun, limit: int | None = None) -> dict[str, Any]:
    """The run's outputs (``outputs_summary``), read in one query."""
    rows = run.units.order_by("position", "id").values("name", "upstream", "phase", "outputs")
    return outputs_summary([dict(r) for r in rows], limit)


def outputs_summary(rows: list[dict[str, Any]], limit: int | None = None) -> dict[str, Any]:
    """Global outputs (output parameters and artifacts with a ``globalName``, as Argo lifts
    them into the workflow's ``status.outputs``) and the final steps' outputs (units no other
    unit depends on), at most ``limit`` of those; ``rows``: name, upstream, phase, outputs."""
    needed = {d for r in rows for d in (r["upstream"] or [])}
    params: dict[str, Any] = {}
    artifacts: dict[str, Any] = {}
    final = []
    for r in rows:
        out = r["outputs"] or {}
        for p in out.get("parameters") or []:
            if isinstance(p, dict) and p.get("globalName"):
                params[p["globalName"]] = {"name": p["globalName"], "value": p.get("value")}
        out = preview(out, int(settings.PORTAL_OUTPUT_PREVIEW_CHARS))
        for a in out.get("artifacts") or []:
            if isinstance(a, dict) and a.get("globalName"):
                artifacts[a["globalName"]] = {**a, "name": a["globalName"]}
        if r["name"] not in needed and (
            out.get("parameters") or out.get("artifacts") or out.get("result")
        ):
            final.append({"unit": r["name"], "phase": r["phase"], "outputs": out})
    shown = preview(
        {"parameters": list(params.values())}, int(settings.PORTAL_OUTPUT_PREVIEW_CHARS)
    )
    return {
        "global": {"parameters": shown["parameters"], "artifacts": list(artifacts.values())},
        "final": final[:limit] if limit is not None else final,
        "final_total": len(final),
    }


def artifact_stores() -> dict[str, dict[str, Any]]:
    """Each site's artifact repository as its operators set it in the inventory
    (``overrides["artifact_store"]``: ``endpoint``, ``bucket``, ``credentials_secret``)."""
    return {
        name: dict((overrides or {}).get("artifact_store") or {})
        for name, overrides in Site.objects.order_by().values_list("name", "overrides")
        if (overrides or {}).get("artifact_store")
    }


def _full_location(
    artifact: Mapping[str, Any], store: Mapping[str, Any], recorded: Mapping[str, Any] | None
) -> dict[str, Any]:
    """An output as where it is: its own full location when Argo recorded one, else its key
    in the repository its step workflow used (``recorded``), else in its site's repository of
    the inventory (``store``). No Secret reference: a reader gets a pre-signed URL for the
    object (``portal/presign.py``), never the repository's keys."""
    where = presign.location_of(artifact, recorded, store)
    s3 = artifact.get("s3")
    if where is None or not isinstance(s3, Mapping):
        return dict(artifact)
    full = {k: v for k, v in s3.items() if k not in ("accessKeySecret", "secretKeySecret")}
    full.update(endpoint=where.endpoint, bucket=where.bucket, key=where.key, region=where.region)
    return {**artifact, "s3": full}


def _task_outputs(
    unit: UnitRun, stores: Mapping[str, Mapping[str, Any]] | None = None
) -> manifests.TaskOutputs:
    out = unit.outputs or {}
    store = (stores or {}).get(unit.site) or {}
    return manifests.TaskOutputs(
        phase=unit.phase,
        parameters={
            str(p.get("name")): str(p.get("value", ""))
            for p in out.get("parameters") or []
            if isinstance(p, dict)
        },
        result=out.get("result"),
        artifacts={
            str(a.get("name")): _full_location(a, store, out.get(presign.REPOSITORY_KEY))
            for a in out.get("artifacts") or []
            if isinstance(a, dict)
        },
        exit_code=out.get("exitCode"),
        extra={str(k): str(v) for k, v in (out.get("node") or {}).items()},
        template=unit.spec.get("template") or unit.template,
    )


def upstream_outputs(
    units: Iterable[UnitRun], stores: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, manifests.TaskOutputs]:
    """Outputs by task name; an expanded task (withItems/withParam) aggregates its items.
    Artifacts carry the full location in their producing site's repository (``stores``: by
    site, read from the inventory when not given)."""
    if stores is None:
        stores = artifact_stores()
    by_task: dict[str, list[UnitRun]] = {}
    for u in units:
        if u.expanded:
            continue  # a group row: its items carry the outputs
        by_task.setdefault(u.spec.get("task") or u.name, []).append(u)
    out: dict[str, manifests.TaskOutputs] = {}
    for task, rows in by_task.items():
        expanded = any(r.spec.get("item_index") is not None for r in rows)
        if expanded:
            rows.sort(key=lambda r: r.spec.get("item_index") or 0)
            out[task] = manifests.aggregate_outputs([_task_outputs(r, stores) for r in rows])
        else:
            out[task] = _task_outputs(rows[0], stores)
    return out


def resolved_inputs(unit: UnitRun, arguments: dict[str, Any]) -> dict[str, Any]:
    """The unit's arguments with what they refer to filled in where it is known, by the same
    substitution the worker uses to build the step workflow (upstream outputs, aggregated for
    a looped producer; workflow parameters; the unit's loop item). A reference to an output not
    produced yet stays as written. Artifacts taken ``from`` an upstream step get that
    artifact's full location in its producing site's repository."""
    upstream = [str(n) for n in unit.upstream or []]
    rows = unit.run.units.filter(Q(name__in=upstream) | Q(spec__task__in=upstream))
    spec = unit.spec or {}
    return manifests.resolve_arguments(
        parse_arguments(arguments),
        (unit.run.compiled or {}).get("parameters") or {},
        upstream_outputs(rows),
        item=spec.get("item"),
        has_item=spec.get("item_index") is not None,
        strict=False,
    )


def held_reservations() -> dict[str, Resources]:
    """What active runs hold per site and no member reports yet (one aggregate query):

    * units placed at a site and still Pending;
    * units the portal saw start after the site's last resourceSummary change
      (``Site.summary_at``), for at most one status period (``KARMADA_CLUSTER_STATUS_SECONDS``):
      their pods are in the member's next summary, not in the figures the planner reads. A
      summary unchanged for a whole period after a start already counted it.

    placement/planner/reservations.py says when a reservation ends."""

    def total(field: str) -> Coalesce:
        return Coalesce(Sum(Cast(KT(f"spec__resources__{field}"), BigIntegerField())), 0)

    period = timedelta(seconds=settings.KARMADA_CLUSTER_STATUS_SECONDS)
    summary_at = Site.objects.filter(name=OuterRef("site")).values("summary_at")[:1]
    unreported = Q(phase=UnitPhase.RUNNING, updated_at__gt=timezone.now() - period) & (
        Q(summary_at__isnull=True) | Q(updated_at__gt=F("summary_at"))
    )
    rows = (
        UnitRun.objects.filter(run__status__in=ACTIVE_RUN)
        .exclude(site="")
        .filter(phase__in=[UnitPhase.PENDING, UnitPhase.RUNNING])
        .annotate(summary_at=Subquery(summary_at))
        .filter(Q(phase=UnitPhase.PENDING) | unreported)
        .values("site")
        .annotate(cpu=total("cpu_millicores"), memory=total("memory_bytes"), gpus=total("gpus"))
    )
    return {
        r["site"]: Resources(
            cpu_millicores=int(r["cpu"]), memory_bytes=int(r["memory"]), gpus=int(r["gpus"])
        )
        for r in rows
    }


def units_held(units: Iterable[UnitRun]) -> dict[str, Resources]:
    """What ``units`` (of an active run) hold per site as Pending units, the part of
    ``held_reservations`` a decider's writes move. A started step's short hold is the
    database's alone: every decider reads it with its next fleet."""
    out: dict[str, Resources] = {}
    for u in units:
        if u.phase != UnitPhase.PENDING or not u.site:
            continue
        # ``asked``: the resources annotated by a read that defers the spec (the watcher's).
        asked = (
            u.__dict__["asked"] if "asked" in u.__dict__ else (u.spec or {}).get("resources")
        ) or {}
        r = out.get(u.site, Resources())
        out[u.site] = Resources(
            cpu_millicores=r.cpu_millicores + int(asked.get("cpu_millicores") or 0),
            memory_bytes=r.memory_bytes + int(asked.get("memory_bytes") or 0),
            gpus=r.gpus + int(asked.get("gpus") or 0),
        )
    return out


def run_global_outputs(run: WorkflowRun, units: Iterable[Any] | None = None) -> GlobalOutputs:
    """The run's global outputs (``globalName``) from its ended units, in the order they ended
    (a later value wins, as in Argo). ``units`` defaults to the run's (prefetched) units."""
    rows = list(run.units.all() if units is None else units)
    ended = sorted(
        (u for u in rows if u.phase == "Succeeded" or (u.outputs and u.finished_at)),
        key=lambda u: (u.finished_at is None, u.finished_at or run.created_at, u.pk or 0),
    )
    templates = (run.compiled or {}).get("templates") or {}
    return manifests.global_outputs(
        [
            (u.outputs or {}, templates.get((u.spec or {}).get("template") or u.template))
            for u in ended
        ]
    )


def run_variables_of(run: WorkflowRun, units: Iterable[Any], *, namespace: str) -> dict[str, str]:
    """``{{workflow.name}}``, ``uid``, ``labels.x`` ... with the run's values.
    The uid is derived from the run (stable, unique), so no migration is needed for it."""
    c = run.compiled
    created = run.created_at or timezone.now()
    started = run.started_at or created
    failures = [
        {
            "displayName": u.name,
            "message": u.message,
            "templateName": u.template,
            "phase": u.phase,
            "podName": u.workflow_name,
            "finishedAt": u.finished_at.strftime("%Y-%m-%dT%H:%M:%SZ") if u.finished_at else None,
        }
        for u in units
        if u.phase in ("Failed", "Error")
    ]
    return manifests.run_variables(
        name=run.name,
        namespace=c.get("namespace") or namespace,
        uid=str(uuid.uuid5(uuid.NAMESPACE_URL, f"portal-run:{run.pk}:{run.name}")),
        created=created,
        labels=c.get("labels") or {},
        annotations=c.get("annotations") or {},
        duration_seconds=max(0.0, (timezone.now() - started).total_seconds()),
        failures=failures,
    )
