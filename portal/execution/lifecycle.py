"""The lifetime of a step workflow (DESIGN section 3): once the portal has recorded a unit's
outcome and outputs, it deletes the step workflow on karmada-apiserver, and Karmada removes the
member's copy with its Work. A finished copy left at a member is a hazard, not a convenience:
if the member deletes it (a ``ttlStrategy``, Argo's controller defaults, ``argo delete``),
Karmada re-creates it from its Work and the step runs again.

Deletion is idempotent (a 404 counts as done) and done by the resync, so a worker that dies
between the delete and the bookkeeping only makes the next resync delete nothing.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from portal import gateway
from portal.choices import ACTIVE_RUN, FINAL_UNIT
from portal.models import UnitRun

log = logging.getLogger(__name__)

# Deleted per pass: a backlog (the portal down for a day) drains over a few resyncs instead of
# holding one task for minutes.
BATCH = 500


def step_workflows_cleanup(*, keep_seconds: int | None = None) -> int:
    """Delete the step workflows of units whose outcome was recorded more than
    ``PORTAL_KEEP_FINISHED_SECONDS`` ago, and those of attempts a failover superseded (their
    first delete may have failed). Returns how many were deleted now."""
    keep = settings.PORTAL_KEEP_FINISHED_SECONDS if keep_seconds is None else keep_seconds
    cutoff = timezone.now() - timedelta(seconds=keep)
    done = 0
    finished = (
        UnitRun.objects.filter(
            phase__in=list(FINAL_UNIT),
            workflow_deleted_at=None,
            finished_at__lte=cutoff,
        )
        .exclude(workflow_name="")
        # A run that collects its artifacts (artifactGC) keeps its step workflows until it
        # ends: deleting one is when its member collects, and a later unit may still read them.
        .exclude(run__status__in=ACTIVE_RUN, run__compiled__artifact_gc=True)
        .values_list("pk", "workflow_name")[:BATCH]
    )
    for pk, name in finished:
        try:
            gateway.delete(gateway.WORKFLOW, name)
        except gateway.KarmadaError as exc:
            log.warning("could not delete finished step workflow %s: %s", name, exc)
            continue
        UnitRun.objects.filter(pk=pk, workflow_name=name).update(workflow_deleted_at=timezone.now())
        done += 1
    done += superseded_cleanup()
    return done


def superseded_remember(unit: UnitRun, name: str) -> None:
    """A superseded attempt's step workflow that could not be deleted yet (Karmada
    unreachable): the resync tries again."""
    names = [*unit.spec.get("superseded_workflows", []), name]
    unit.spec = {**unit.spec, "superseded_workflows": sorted(set(names))}
    UnitRun.objects.filter(pk=unit.pk).update(spec=unit.spec)


def superseded_cleanup() -> int:
    done = 0
    for unit in UnitRun.objects.filter(spec__has_key="superseded_workflows")[:BATCH]:
        left = []
        for name in unit.spec.get("superseded_workflows") or []:
            try:
                gateway.delete(gateway.WORKFLOW, name)
            except gateway.KarmadaError as exc:
                log.warning("could not delete superseded step workflow %s: %s", name, exc)
                left.append(name)
                continue
            done += 1
        spec = {k: v for k, v in unit.spec.items() if k != "superseded_workflows"}
        if left:
            spec["superseded_workflows"] = left
        UnitRun.objects.filter(pk=unit.pk).update(spec=spec)
    return done
