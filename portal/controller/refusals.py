"""Karmada refusing a step workflow: the binding's ``Scheduled`` condition False (a cordon, a
taint, an affinity no cluster matches, an API the member lacks), or a member that refused the
Work (``aggregatedStatus[].appliedMessage``, with ``FullyApplied`` False). The unit says why
and the run gets an event as soon as the binding shows it; after the site's grace the unit is
placed again at a site that can run it, with a decision saying why.

The binding carries the same text as the Events Karmada records on the Workflow
(``ScheduleBindingFailed`` is the Scheduled condition's message, ``SyncFailed`` the member's
error the Work's ``Applied`` condition quotes), so one watch (bindings) is enough."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import F
from django.db.models.functions import Coalesce
from django.utils import timezone

from portal.choices import ACTIVE_RUN, UnitPhase
from portal.controller.common import event
from portal.models import RunEvent, UnitRun
from sites.models import CORDON_TAINT, Site, untolerated_taint

log = logging.getLogger(__name__)

REFUSED_EVENT = "karmada-refused"
# The scheduler's filter reasons (pkg/scheduler/framework/plugins/*): FitError lists them.
TAINT_REASON = re.compile(r"had untolerated taint \{([^}]*)\}")
AFFINITY_REASON = "did not match the placement cluster affinity constraint"
API_REASON = "did not have the API resource"
# pkg/controllers/cluster/cluster_controller.go (taintClusterByCondition).
HEALTH_TAINTS = {
    "cluster.karmada.io/not-ready": "not ready",
    "cluster.karmada.io/unreachable": "unreachable",
}
POLICY_ANNOTATIONS = (
    ("propagationpolicy.karmada.io/namespace", "propagationpolicy.karmada.io/name"),
    ("", "clusterpropagationpolicy.karmada.io/name"),
)


@dataclass(frozen=True)
class Refusal:
    site: str  # where the portal meant the step to run ("" when it does not know)
    cause: str  # short, for the decision: "cordoned", "site-c refused the Work: ..."
    text: str  # the unit's message: the cause in words, then Karmada's own text
    scheduling: bool  # not scheduled (else: scheduled, the member refused the Work)

    @property
    def replaced_because(self) -> str:
        if self.scheduling:
            where = f" to {self.site}" if self.site else ""
            return f"Karmada could not schedule{where}: {self.cause}"
        return self.cause


def _condition(binding: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    for cond in (binding.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == ctype:
            return cond
    return None


def signature(binding: Mapping[str, Any]) -> tuple[str, ...]:
    """What of a binding says Karmada refuses it (() when nothing does): cheap, for the
    watcher's memory of what it folded."""
    cond = _condition(binding, "Scheduled")
    out: tuple[str, ...] = ()
    if cond is not None and cond.get("status") == "False":
        out = (str(cond.get("reason") or ""), str(cond.get("message") or ""))
    for item in (binding.get("status") or {}).get("aggregatedStatus") or []:
        if isinstance(item, dict) and not item.get("applied") and item.get("appliedMessage"):
            out += (str(item.get("clusterName") or ""), str(item["appliedMessage"]))
    return out


def _policy(binding: Mapping[str, Any]) -> str:
    annotations = (binding.get("metadata") or {}).get("annotations") or {}
    for ns_key, name_key in POLICY_ANNOTATIONS:
        if annotations.get(name_key):
            kind = "PropagationPolicy" if ns_key else "ClusterPropagationPolicy"
            ns = f"{annotations[ns_key]}/" if ns_key and annotations.get(ns_key) else ""
            return f"{kind} {ns}{annotations[name_key]}"
    return "its PropagationPolicy"


def _affinity(binding: Mapping[str, Any]) -> str:
    """The placement's cluster affinity, shortly: clusterNames, labelSelector, exclude."""
    placement = (binding.get("spec") or {}).get("placement") or {}
    groups = placement.get("clusterAffinities") or [placement.get("clusterAffinity") or {}]
    parts = []
    for aff in groups:  # a clusterAffinities term holds its affinity inline
        if not isinstance(aff, dict):
            continue
        if aff.get("clusterNames"):
            parts.append(f"clusterNames {', '.join(map(str, aff['clusterNames']))}")
        selector = aff.get("labelSelector") or {}
        labels = [f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items()]
        labels += [
            f"{e.get('key')} {e.get('operator')} {', '.join(map(str, e.get('values') or []))}"
            for e in selector.get("matchExpressions") or []
            if isinstance(e, dict)
        ]
        if labels:
            parts.append(f"labels {'; '.join(labels)}")
        if aff.get("exclude"):
            parts.append(f"exclude {', '.join(map(str, aff['exclude']))}")
    return "(" + "; ".join(parts) + ")" if parts else ""


def _taint_cause(site: str, message: str) -> tuple[str, str] | None:
    """(cause, words) for a site the scheduler refused for a taint: the Site's taints as the
    watcher last saw the Cluster, else the taint Karmada's message names."""
    taint = ""
    if site:
        taints = Site.objects.filter(name=site).values_list("taints", flat=True).first()
        taint = untolerated_taint(taints)
    if not taint:
        found = TAINT_REASON.search(message)
        if found is None:
            return None
        taint = found.group(1)
    key = taint.split(":", 1)[0].split("=", 1)[0]
    where = site or "its site"
    if key == CORDON_TAINT:
        return "cordoned", f"{where} is cordoned ({CORDON_TAINT})"
    if key in HEALTH_TAINTS:
        # The cluster controller's taints for a Cluster not Ready or not reporting.
        return HEALTH_TAINTS[key], f"{where} is {HEALTH_TAINTS[key]} ({key})"
    words = f"{where} has the taint {taint}, which steps do not tolerate"
    return f"untolerated taint {taint}", words


def refusal_of(binding: Mapping[str, Any], site: str) -> Refusal | None:
    """Why Karmada refuses the binding's Workflow, for a step meant for ``site``; None when it
    does not."""
    cond = _condition(binding, "Scheduled")
    if cond is not None and cond.get("status") == "False":
        reason = str(cond.get("reason") or "")
        message = str(cond.get("message") or "")
        karmada = f"Karmada: Scheduled=False, {reason}: {message}"
        tainted = _taint_cause(site, message) if "untolerated taint" in message else None
        if tainted is not None:
            cause, words = tainted
        elif AFFINITY_REASON in message:
            affinity = _affinity(binding)
            cause = "no cluster matches the affinity"
            words = f"no cluster matches the affinity {affinity} of {_policy(binding)}".replace(
                "  ", " "
            )
        elif API_REASON in message:
            cause = "the Workflow API is not enabled there"
            words = (
                f"{site or 'the site'} does not serve argoproj.io/v1alpha1 Workflow "
                "(Argo's CRD is not installed there)"
            )
        else:
            cause, words = reason or "not scheduled", "Karmada could not schedule it"
        return Refusal(site, cause, f"{words}. {karmada}"[:2000], scheduling=True)
    for item in (binding.get("status") or {}).get("aggregatedStatus") or []:
        if isinstance(item, dict) and not item.get("applied") and item.get("appliedMessage"):
            cluster = str(item.get("clusterName") or site or "its site")
            words = f"{cluster} refused the Work: {item['appliedMessage']}"
            return Refusal(cluster, words[:300], words[:2000], scheduling=False)
    return None


def refusal_note(unit: UnitRun, binding: Mapping[str, Any], site: str) -> None:
    """Carry a refusal into the Pending unit's message (with an event, once per distinct
    message), or clear it once Karmada accepts the step."""
    if unit.phase != UnitPhase.PENDING:
        return
    refusal = refusal_of(binding, site or unit.site)
    now = timezone.now()
    mine = UnitRun.objects.filter(
        pk=unit.pk,
        attempt=unit.attempt,
        workflow_name=unit.workflow_name,
        phase=UnitPhase.PENDING,
        message=unit.message,
    )
    if refusal is None:
        if unit.refused_at is not None and mine.update(refused_at=None, message="", updated_at=now):
            unit.refused_at, unit.message = None, ""
        return
    if unit.message == refusal.text and unit.refused_at is not None:
        return
    if mine.update(message=refusal.text, refused_at=Coalesce(F("refused_at"), now), updated_at=now):
        unit.message = refusal.text
        unit.refused_at = unit.refused_at or now
        event(
            unit.run_id,
            REFUSED_EVENT,
            f"{unit.name}: {refusal.text}",
            unit,
            data={"site": refusal.site, "because": refusal.replaced_because},
        )


def _grace(site: str, graces: Mapping[str, int | None]) -> timedelta:
    seconds = graces.get(site)
    if seconds is None:
        seconds = int(settings.PORTAL_FAILOVER_GRACE_SECONDS)
    return timedelta(seconds=seconds)


def refusals_replace() -> list[int]:
    """Units Karmada has refused for longer than their site's grace are placed again
    elsewhere (a new attempt, decision "re-placed: ..."). Returns the runs to advance."""
    from portal.controller.failover import failover_unit

    refused = UnitRun.objects.filter(
        refused_at__isnull=False, phase=UnitPhase.PENDING, run__status__in=ACTIVE_RUN
    ).exclude(workflow_name="")
    if not refused.exists():
        return []
    graces = dict(Site.objects.values_list("name", "refusal_grace_seconds"))
    now = timezone.now()
    runs: set[int] = set()
    for unit in refused.select_related("run", "run__project"):
        assert unit.refused_at is not None
        if unit.refused_at > now - _grace(unit.site, graces):
            continue
        last = (
            RunEvent.objects.filter(run_id=unit.run_id, unit=unit, kind=REFUSED_EVENT)
            .order_by("-created_at", "-id")
            .values_list("data", flat=True)
            .first()
        ) or {}
        because = str(last.get("because") or f"Karmada refused the step at {unit.site}")
        units = list(unit.run.units.all())
        if failover_unit(unit.run, unit, units, reason=because, replaced=True):
            runs.add(unit.run_id)
    return sorted(runs)
