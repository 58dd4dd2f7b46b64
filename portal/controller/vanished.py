"""Step workflows that vanished from karmada-apiserver: deleted there (``kubectl delete``, an
operator's clean-up) or lost with Karmada's state (etcd restored from an older snapshot). No
binding will ever report such a unit's end, so without this it stays Running for ever, its
run with it, holding its locks.

The resync lists every ResourceBinding; a unit in flight whose step workflow has no binding in
that list, and that a GET then answers 404 for, is gone (the GET is what tells a step workflow
created after the list, or whose binding Karmada has not made yet, from one that vanished).
What happens next is the run's retry policy, read as Argo reads it for a pod deleted under a
node (``docs/tolerating-pod-deletion.md``: "To retry pods that were deleted, set
``retryStrategy.retryPolicy: OnError``"): the unit's template's ``retryStrategy`` (else
``spec.templateDefaults``', else ``spec.retryStrategy``) with ``retryPolicy`` ``Always``,
``OnError`` or ``OnTransientError`` and a ``limit`` not yet reached by earlier vanished
attempts gives the unit a new attempt (a new step workflow name); otherwise the unit ends in
Error with why. Either way the unit's locks are released at once (``locks.release_unit``):
a new attempt asks for them again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from portal import state
from portal.choices import ACTIVE_RUN, RunStatus, UnitPhase
from portal.controller import locks
from portal.controller.common import event
from portal.karmada import client, errors, resources
from portal.models import RunEvent, UnitRun, WorkflowRun

log = logging.getLogger(__name__)

EVENT = "unit-vanished"
# Step workflows looked up per resync: Karmada losing its whole state must not turn one resync
# into ten thousand GETs; the next resyncs go on where this one stopped.
BATCH = 200
# Argo's policies that retry an errored node (``RetryPolicyOnFailure``, the default, retries
# only a failed one); a step workflow taken away is an error of the platform, not the step's.
RETRIED = ("Always", "OnError", "OnTransientError")


def retry_strategy(run: WorkflowRun, unit: UnitRun) -> Mapping[str, Any] | None:
    """The retryStrategy that governs the unit, as Argo resolves it: the template's own
    (``templateDefaults`` merged under it), else the workflow's ``spec.retryStrategy``."""
    spec = run.compiled.get("spec") or {}
    template = (run.compiled.get("templates") or {}).get(unit.template) or {}
    defaults = spec.get("templateDefaults") if isinstance(spec, Mapping) else None
    for source in (template, defaults, spec):
        found = source.get("retryStrategy") if isinstance(source, Mapping) else None
        if isinstance(found, Mapping):
            return found
    return None


def _limit(strategy: Mapping[str, Any]) -> int | None:
    raw = strategy.get("limit")
    if raw is None:
        return None  # Argo: no limit retries for ever
    try:
        return max(int(str(raw).strip()), 0)
    except ValueError:
        return 0


def retry_verdict(run: WorkflowRun, unit: UnitRun, vanished_before: int) -> str | None:
    """None when the unit may run again; else why not (for its message)."""
    if run.status not in ACTIVE_RUN:
        return f"the run is {run.status.lower()}"
    strategy = retry_strategy(run, unit)
    if strategy is None:
        return "it has no retryStrategy"
    # As Argo 3.5: with an expression and no policy the expression decides; the portal cannot
    # evaluate it for an attempt that left no node, so the policy it implies (Always) does.
    policy = str(strategy.get("retryPolicy") or ("Always" if strategy.get("expression") else ""))
    if policy not in RETRIED:
        return f"its retryPolicy {policy or 'OnFailure'} does not retry errors"
    limit = _limit(strategy)
    if limit is not None and vanished_before >= limit:
        return f"its retryStrategy limit ({limit}) is reached"
    return None


def vanished_check(seen: set[str], listed_at: datetime) -> list[int]:
    """Units in flight whose step workflow was submitted well before the binding list started
    (``listed_at``) and has neither a binding in it (``seen``: the bound workflows' names) nor
    an object on karmada-apiserver. Returns the runs to advance."""
    # A step workflow only just created may have no binding yet (Karmada's detector lags
    # under a fan-out): looking each up would spend the resync's GETs on units that are fine.
    grace = timedelta(seconds=settings.PORTAL_STALE_SECONDS)
    candidates = (
        UnitRun.objects.filter(
            phase__in=[UnitPhase.PENDING, UnitPhase.RUNNING],
            submitted_at__lt=listed_at - grace,
            run__status__in=[*ACTIVE_RUN, RunStatus.STOPPED],
        )
        .exclude(workflow_name="")
        .order_by("submitted_at", "pk")
        .values_list("pk", "workflow_name")
    )
    missing = [pk for pk, name in candidates.iterator() if name not in seen][:BATCH]
    runs: set[int] = set()
    for unit in UnitRun.objects.filter(pk__in=missing).select_related("run"):
        try:
            client.get(resources.WORKFLOW, unit.workflow_name)
            continue  # there: its binding comes later
        except errors.NotFound:
            pass
        except errors.TransientError as exc:
            log.warning("vanished step workflows not checked: %s", exc)
            break
        if unit_vanished(unit.run, unit):
            runs.add(unit.run_id)
    return sorted(runs)


def unit_vanished(run: WorkflowRun, unit: UnitRun) -> bool:
    """Record why the unit's step workflow is gone and run it again or end it, as its retry
    policy says. False when the unit had moved on meanwhile (nothing changed)."""
    name = unit.workflow_name
    why = (
        f"step workflow {name} and its ResourceBinding are gone from karmada-apiserver "
        "(deleted there, or lost with Karmada's state)"
    )
    before = RunEvent.objects.filter(unit=unit, kind=EVENT).count()
    refused = retry_verdict(run, unit, before)
    ended = unit.attempt_record(ended="vanished", why=why)
    if refused is None:
        with transaction.atomic():
            moved = state.units_move(
                UnitRun.objects.filter(pk=unit.pk, attempt=unit.attempt, workflow_name=name),
                UnitPhase.PENDING,
                from_=[unit.phase],
                attempt=unit.attempt + 1,
                workflow_name="",
                submitted_at=None,
                started_at=None,
                message="",
                # The next attempt's binding is compared with nothing folded before: after
                # Karmada lost its state, its resourceVersions may start lower again.
                binding_version="",
                updated_at=timezone.now(),
            )
            said = f"{why}; retryStrategy: attempt {unit.attempt + 1}"
            if moved:
                event(run.pk, EVENT, f"{unit.name}: {said}", unit, data={"ended_attempt": ended})
    else:
        said = f"{why}; not run again: {refused}"
        with transaction.atomic():
            moved = state.unit_move(unit, UnitPhase.ERROR, message=said)
            if moved:
                event(run.pk, EVENT, f"{unit.name}: {said}", unit, data={"ended_attempt": ended})
    if moved:
        # Its locks go now, not when the run's next advance comes round to it; a new attempt
        # asks for them again.
        locks.release_unit(run.pk, unit.name)
    return bool(moved)


def bound_names(bindings: Iterable[Mapping[str, Any]]) -> set[str]:
    """The names of the Workflows that ``bindings`` bind."""
    names = set()
    for binding in bindings:
        resource = (binding.get("spec") or {}).get("resource") or {}
        if resource.get("kind") == "Workflow" and resource.get("name"):
            names.add(str(resource["name"]))
    return names
