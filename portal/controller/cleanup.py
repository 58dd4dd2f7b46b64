"""The lifetime of a step workflow (DESIGN section 3): once the portal has recorded a unit's
outcome and outputs, it keeps the step's logs (``keep_logs``) and deletes the step workflow on
karmada-apiserver, and Karmada removes the member's copy with its Work. A finished copy left
at a member is a hazard, not a convenience: if the member deletes it (a ``ttlStrategy``,
Argo's controller defaults, ``argo delete``), Karmada re-creates it from its Work and the step
runs again.

Deletion is idempotent (a 404 counts as done) and done by the resync, so a worker that dies
between the delete and the bookkeeping only makes the next resync delete nothing.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from portal.choices import ACTIVE_RUN, FINAL_UNIT, UnitKind, UnitPhase
from portal.controller import keep_logs
from portal.karmada import client, errors, resources
from portal.models import UnitRun

log = logging.getLogger(__name__)

# Deleted per pass: a backlog (the portal down for a day) drains over a few resyncs instead of
# holding one task for minutes.
BATCH = 500


def step_workflows_cleanup(*, keep_seconds: int | None = None) -> int:
    """Delete the step workflows of units whose outcome was recorded more than
    ``PORTAL_KEEP_FINISHED_SECONDS`` ago, each once its logs are kept (``keep_logs``), and those
    of attempts a failover superseded (their first delete may have failed). Returns how many
    were deleted now."""
    keep = settings.PORTAL_KEEP_FINISHED_SECONDS if keep_seconds is None else keep_seconds
    now = timezone.now()
    cutoff = now - timedelta(seconds=keep)
    give_up = now - timedelta(seconds=settings.PORTAL_LOG_KEEP_GIVE_UP_SECONDS)
    done = 0
    # A site that could not give a log this pass is not asked again in it, and its step
    # workflows make room in the batch for other sites' (they wait for the next pass).
    silent: set[str] = set()
    tried: list[int] = []
    keeper = keep_logs.Keeper()
    while len(tried) < BATCH:
        finished = list(
            UnitRun.objects.filter(
                phase__in=list(FINAL_UNIT),
                workflow_deleted_at=None,
                finished_at__lte=cutoff,
            )
            .exclude(workflow_name="")
            .exclude(site__in=silent)
            .exclude(pk__in=tried)
            # A run that collects its artifacts (artifactGC) keeps its step workflows until it
            # ends: deleting one is when its member collects, and a later unit may still read
            # them.
            .exclude(run__status__in=ACTIVE_RUN, run__compiled__artifact_gc=True)
            # A copy (transfer unit) is collected with its step workflow: kept while the run
            # is active, since a reader not yet started reads it.
            .exclude(run__status__in=ACTIVE_RUN, kind=UnitKind.TRANSFER)
            .values_list("pk", "workflow_name", "attempt", "site", "finished_at")[
                : BATCH - len(tried)
            ]
        )
        if not finished:
            break
        names = {pk: name for pk, name, *_ in finished}
        before = kept_before(finished)
        ready = [pk for pk, _n, attempt, *_ in finished if (pk, attempt) in before]
        for pk, name, attempt, site, finished_at in finished:
            tried.append(pk)
            if pk in ready or site in silent:
                continue
            late = finished_at is not None and finished_at <= give_up
            if not _logs_read(keeper, pk, name, attempt, site, give_up=late):
                silent.add(site)
            elif keeper.full:
                done += _delete_all(keeper.flush(), names)
        done += _delete_all([*ready, *keeper.flush()], names)
    done += superseded_cleanup()
    return done


def kept_before(finished: list[tuple[Any, ...]]) -> set[tuple[int, int]]:
    return keep_logs.kept_already((pk, attempt) for pk, _n, attempt, *_ in finished)


def _logs_read(
    keeper: keep_logs.Keeper, pk: int, name: str, attempt: int, site: str, *, give_up: bool
) -> bool:
    try:
        return keeper.add(unit_id=pk, attempt=attempt, workflow=name, site=site, give_up=give_up)
    except DatabaseError:
        raise
    except Exception:  # one unit's odd status never stops the others' cleanup
        log.exception("keeping the logs of %s failed; its step workflow is deleted later", name)
        return False


def _delete_all(pks: list[int], names: dict[int, str]) -> int:
    """Delete the step workflows of these units, whose logs are kept (committed)."""
    return sum(_delete(pk, names[pk]) for pk in pks)


def _delete(pk: int, name: str) -> bool:
    try:
        client.delete(resources.WORKFLOW, name)
    except errors.KarmadaError as exc:
        log.warning("could not delete finished step workflow %s: %s", name, exc)
        return False
    UnitRun.objects.filter(pk=pk, workflow_name=name).update(workflow_deleted_at=timezone.now())
    return True


def superseded_remember(unit: UnitRun, name: str) -> None:
    """A superseded attempt's step workflow that could not be deleted yet (Karmada
    unreachable): the resync tries again."""
    names = [*unit.spec.get("superseded_workflows", []), name]
    unit.spec = {**unit.spec, "superseded_workflows": sorted(set(names))}
    UnitRun.objects.filter(pk=unit.pk).update(spec=unit.spec)


def unclaimed_delete(created: list[tuple[UnitRun, str]], claimed: set[int]) -> None:
    """Step workflows created for units that no longer want them: the unit was stopped,
    failed over or ended while its create was in flight, so no advance will ever claim the
    step workflow, and left alone it would run at its site, taking what the site's next
    steps need. Each is deleted (remembered for the resync when Karmada does not answer).
    One its unit holds (a redelivered task's twin created and claimed the same name) or may
    still claim (Pending at the same attempt, no step workflow yet) is left alone."""
    left = [(unit, name) for unit, name in created if unit.pk not in claimed]
    if not left:
        return
    rows = UnitRun.objects.filter(pk__in=[unit.pk for unit, _ in left])
    now = {
        pk: (phase, attempt, held)
        for pk, phase, attempt, held in rows.values_list("pk", "phase", "attempt", "workflow_name")
    }
    for unit, name in left:
        phase, attempt, held = now.get(unit.pk, ("", 0, ""))
        if held == name or (phase == UnitPhase.PENDING and attempt == unit.attempt and not held):
            continue
        log.info("%s: deleting step workflow %s, created after its unit moved on", unit.name, name)
        try:
            client.delete(resources.WORKFLOW, name)
        except errors.KarmadaError as exc:
            log.info("could not delete unclaimed step workflow %s: %s", name, exc)
            if unit.pk in now:
                superseded_remember(unit, name)


def superseded_cleanup() -> int:
    done = 0
    for unit in UnitRun.objects.filter(spec__has_key="superseded_workflows")[:BATCH]:
        left = []
        for name in unit.spec.get("superseded_workflows") or []:
            try:
                client.delete(resources.WORKFLOW, name)
            except errors.KarmadaError as exc:
                log.warning("could not delete superseded step workflow %s: %s", name, exc)
                left.append(name)
                continue
            done += 1
        spec = {k: v for k, v in unit.spec.items() if k != "superseded_workflows"}
        if left:
            spec["superseded_workflows"] = left
        UnitRun.objects.filter(pk=unit.pk).update(spec=spec)
    return done


def step_workflows_delete(names: list[str]) -> None:
    """The step workflows of a deleted run; a 404 counts as done, so doing it twice is
    harmless."""
    for name in names:
        client.delete(resources.WORKFLOW, name)
