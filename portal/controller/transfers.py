"""Transfer units: a step whose site cannot read the repository an upstream output
is in reads a copy a *transfer unit* made at a relay site that can.

When the advance is about to create a unit placed at submission and one of its producers'
repositories is out of its site's reach, ``route`` picks the relay (``placement/planner/
relays.py``: reads the producer's repository, is read by the unit's site, fastest by the links,
within the residency regions of what the producer's outputs derive from) and inserts the unit
``<producer>-copy-<relay>`` at it, or reuses the one already there: copies are replicas, so
every reader relayed through that site (a 50-item fan-out) shares one transfer. The reader
names its copies in ``spec.via`` (producer → copy) and waits for them (``hold``); its inputs
are then the copy's outputs (``outputs_through_copies``). A transfer is a unit like any other:
decided (a decision row with its reason and estimate), created, watched, retried, stopped and
failed over (to another relay, ``relay_again``); its step workflow (``workflow``) reads each of
the producer's artifacts through a pre-signed GET and writes it into the relay's repository.
What it moved and how long it took are kept on it (``measure``), beside the estimate, and feed
the link's observed bandwidth (an exponentially weighted mean the planner estimates with).
Copies are step outputs of the run: the run's artifact GC deletes them with the rest.
A unit the webhook places has no site yet: a folder it reads, which no pre-signed URL names,
is copied as one tgz at the producer's own site (``route_at_runtime``), read from anywhere.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F

from placement import codec, manifests, parser, planner
from placement.context import upstream_location
from placement.planner import relays
from portal import state
from portal.choices import FINAL_UNIT, DecisionSource, UnitKind, UnitPhase, UnitTiming
from portal.controller.common import ancestors, event
from portal.karmada import client
from portal.models import PlacementDecision, UnitRun, WorkflowRun
from portal.planning import planner_snapshot
from portal.selectors import upstream_outputs
from portal.selectors.transfers import transfer_measured
from sites.models import SiteLink

log = logging.getLogger(__name__)

TRANSFER = "transfer"
# The weight of the newest transfer in a link's observed bandwidth.
EWMA_ALPHA = 0.3
# Smaller copies measure the step's overhead and Argo's whole-second timestamps, not the link:
# they are recorded, and the link learns nothing from them.
MIN_OBSERVED_BYTES = 64 * 1024 * 1024
# The size assumed for a producer whose outputs' size is unknown (the planner's figure).
ASSUMED_BYTES = planner.ASSUMED_UPSTREAM_BYTES


def is_transfer(unit: UnitRun) -> bool:
    return unit.kind == UnitKind.TRANSFER


@dataclass(frozen=True)
class RelayDecision:
    """A transfer's placement: the relay (None: none can) and why."""

    site: str | None
    reason: str


@dataclass
class Routed:
    """What ``route`` did for one unit: ``cut`` producers' sites no relay can bridge (the unit
    must go elsewhere); ``added`` copy units inserted; ``moved`` whether anything changed."""

    cut: list[str] = field(default_factory=list)
    added: list[UnitRun] = field(default_factory=list)
    moved: bool = False


def _regions(unit: UnitRun, units: Sequence[UnitRun], datasets: planner.DataCatalogue) -> set[str]:
    """The regions the unit's inputs may be in: the intersection of the residency of every
    bound dataset it or its ancestors read (empty set: unbound)."""
    found: list[frozenset[str]] = []
    for u in [codec.unit_from_dict(unit.spec), *ancestors(unit, units)]:
        found += [d.residency for d in datasets.read_by(u) if d.residency]
    return set(frozenset.intersection(*found)) if found else set()


def _size(producer: UnitRun) -> int:
    """The producer's outputs' size as the planner knows it (reported, else declared, else
    the planner's assumed size)."""
    found = upstream_location(producer.site, producer.outputs, producer.spec).bytes
    return ASSUMED_BYTES if found is None else found


FolderOf = Callable[[Mapping[str, Any]], list[str] | None]


def route(
    run: WorkflowRun,
    unit: UnitRun,
    units: list[UnitRun],
    blocked: frozenset[tuple[str, str]],
    folder_of: FolderOf = lambda a: None,
) -> Routed:
    """Copies for every producer of ``unit`` whose repository its site cannot read (each
    producer's copy at the chosen relay), and for every producer at another site whose
    outputs hold an unarchived folder (``folder_of``), which no pre-signed URL names (its copy
    at the unit's own site, one tgz): made or reused, named in the unit's ``spec.via``."""
    out = Routed()
    if not unit.site or is_transfer(unit):
        # A copy reads its producer through pre-signed URLs, one per object, at its relay.
        return out
    by_name = {u.name: u for u in units}
    via = dict((unit.spec or {}).get("via") or {})
    # Only outputs there are to read: a producer without output artifacts (a suspend, a step
    # passing parameters only) needs no copy, wherever it ran.
    producers = [
        p
        for p in (by_name[n] for n in unit.upstream or () if n in by_name)
        if p.site
        and p.site != unit.site
        and p.name not in via
        and (p.outputs or {}).get("artifacts")
    ]
    cut = [p for p in producers if (p.site, unit.site) in blocked]
    folders = [p for p in producers if p not in cut and _holds_folder(p, folder_of)]
    if not cut and not folders:
        return out
    view = planner_snapshot()
    project = run.project.name if run.project_id and run.project else None
    regions = _regions(unit, units, view.datasets.for_project(project))
    for producer in [*cut, *folders]:
        size = _size(producer)
        relay = (
            relays.relay_for(view.fleet, producer.site, unit.site, size, regions)
            if producer in cut
            else unit.site
        )
        if relay is None:
            out.cut.append(producer.site)
            continue
        copy, created = _copy_unit(run, producer, relay, unit.site, size, view.fleet, units)
        if created:
            out.added.append(copy)
            units.append(copy)
        via[producer.name] = copy.name
    out.moved = _via_set(unit, via)
    return out


def route_at_runtime(
    run: WorkflowRun, unit: UnitRun, units: list[UnitRun], folder_of: FolderOf
) -> Routed:
    """Copies for a unit the webhook places (its site unknown until its step workflow is
    admitted): every producer whose outputs hold an unarchived folder, which no pre-signed
    URL names, gets a copy at its own site, writing the folder as one tgz into its own
    repository with its own Secret; the unit reads that one object through a pre-signed GET
    wherever it runs. The copy's repository is the producer's, so what can read it is what
    can read the producer's other outputs. Made or reused (every runtime reader of the
    producer shares it), named in the unit's ``spec.via``."""
    out = Routed()
    if unit.site or is_transfer(unit):
        return out
    by_name = {u.name: u for u in units}
    via = dict((unit.spec or {}).get("via") or {})
    folders = [
        p
        for p in (by_name[n] for n in unit.upstream or () if n in by_name)
        if p.site
        and p.name not in via
        and not is_transfer(p)
        and (p.outputs or {}).get("artifacts")
        and _holds_folder(p, folder_of)
    ]
    if not folders:
        return out
    fleet = planner_snapshot().fleet
    for producer in folders:
        site = str(producer.site)
        why = (
            f"a unit placed at runtime reads {producer.name}'s outputs, which hold a folder "
            "saved unarchived that no pre-signed URL names; "
            f"{site} copies it within its own repository as one tgz, one URL from any site"
        )
        copy, created = _copy_unit(run, producer, site, site, _size(producer), fleet, units, why)
        if created:
            out.added.append(copy)
            units.append(copy)
        via[producer.name] = copy.name
    out.moved = _via_set(unit, via)
    return out


def _holds_folder(producer: UnitRun, folder_of: FolderOf) -> bool:
    """Whether one of the producer's outputs is a folder saved unarchived (asked of its
    repository only for ``archive: none`` outputs: any other is one object)."""
    raw = (producer.outputs or {}).get("artifacts") or []
    if not any("none" in ((a or {}).get("archive") or {}) for a in raw):
        return False
    found = upstream_outputs([producer])
    return any(
        "none" in (a.get("archive") or {}) and bool(folder_of(a))
        for outputs in found.values()
        for a in outputs.artifacts.values()
    )


def _via_set(unit: UnitRun, via: dict[str, str]) -> bool:
    """The unit reads through ``via`` (producer -> copy); whether that changed it."""
    if via == ((unit.spec or {}).get("via") or {}):
        return False
    spec = {**(unit.spec or {}), "via": via}
    # The pages draw the graph from the column: the copy feeds the unit there too.
    drawn = list(dict.fromkeys([*(unit.upstream or ()), *via.values()]))
    if UnitRun.objects.filter(pk=unit.pk, attempt=unit.attempt, workflow_name="").update(
        spec=spec, upstream=drawn
    ):
        unit.spec = spec
        return True
    return False


def _copy_unit(
    run: WorkflowRun,
    producer: UnitRun,
    relay: str,
    target: str,
    size: int,
    fleet: planner.Fleet,
    units: Iterable[UnitRun],
    why: str = "",
) -> tuple[UnitRun, bool]:
    name = relays.copy_name(producer.name, relay)
    existing = next((u for u in units if u.name == name), None)
    if existing is not None:
        return existing, False
    plan = relays.transfer(fleet, producer.site, relay, target, size)
    why = why or (
        # A folder at a repository the reader's site reads: copied where it is read.
        f"{producer.site}'s outputs hold a folder saved unarchived, which no pre-signed URL "
        f"names; {relay} reads that repository and copies the folder into its own as one tgz"
        if relay == target
        else f"{target} cannot read the artifact repository of {producer.site}; "
        f"{relay} reads it and {target} reads {relay}"
    )
    reason = (
        f"transfer: {why}: "
        f"estimated {planner.human_bytes(size)} in {plan.seconds:.1f}s, cost {plan.cost:.2f}"
    )
    unit, spec = _copy_spec(name, producer, relay, target, size, plan)
    try:
        with transaction.atomic():
            row, created = UnitRun.objects.get_or_create(
                run=run,
                name=name,
                defaults={
                    "slug": unit.slug,
                    "template": TRANSFER,
                    "position": producer.position,
                    "upstream": [producer.name],
                    "timing": UnitTiming.SUBMIT,
                    "site": relay,
                    "planned_site": relay,
                    "reason": reason,
                    "spec": spec,
                    "kind": UnitKind.TRANSFER,
                },
            )
    except IntegrityError:  # another advance made it meanwhile
        return UnitRun.objects.get(run=run, name=name), False
    if created:
        PlacementDecision.objects.create(
            run=run,
            unit=row,
            attempt=row.attempt,
            source=DecisionSource.TRANSFER,
            timing=UnitTiming.SUBMIT,
            site=relay,
            reason=reason,
        )
        event(run.pk, "transfer-planned", f"{name}: {reason}", row)
    return row, created


def _copy_spec(
    name: str, producer: UnitRun, relay: str, target: str, size: int, plan: relays.Transfer
) -> tuple[parser.Unit, dict[str, Any]]:
    """The copy unit as the parser would have made it, and its stored spec (what it copies,
    from where, for whom, and the estimate)."""
    unit = parser.Unit(
        name=name,
        slug=manifests.label_value(name)[:63],
        kind="workflow",  # the spec's kind says transfer; the parser knows three kinds
        task=name,
        template=TRANSFER,
        templates=(TRANSFER,),
        upstream=(producer.name,),
        depends="",
        when=None,
        arguments=parser.Arguments(),
        labels={},
        images=(manifests.TRANSFER_IMAGE,),
        resources=parser.Resources(),
        datasets=(),
        data_refs=(),
    )
    spec = {
        **codec.unit_to_dict(unit),
        "kind": TRANSFER,
        "transfer": {
            "producer": producer.name,
            "from": producer.site,
            "to": relay,
            "for": target,
            "estimate": {"bytes": size, "seconds": round(plan.seconds, 3), "cost": plan.cost},
        },
    }
    return unit, spec


def hold(unit: UnitRun, units: Sequence[UnitRun]) -> bool | None:
    """None when every copy the unit reads through has succeeded (it may start); otherwise
    whether holding it moved it: a copy that ended without success ends the unit in Error
    with the transfer's message (an expired or tampered URL: S3's own error)."""
    via = (unit.spec or {}).get("via") or {}
    if not via:
        return None
    by_name = {u.name: u for u in units}
    for producer, name in via.items():
        copy = by_name.get(name)
        if copy is None:
            continue
        if copy.phase == UnitPhase.SUCCEEDED:
            observe(copy)  # once per attempt: the link's observed bandwidth learns from it
            continue
        if copy.phase in FINAL_UNIT:
            why = copy.message or copy.phase
            return state.unit_move(
                unit,
                UnitPhase.ERROR,
                message=f"transfer {name} of {producer}'s outputs to {copy.site} failed: {why}",
            )
        return False
    return None


def outputs_through_copies(
    unit: UnitRun,
    tasks: Mapping[str, str],
    outputs: Mapping[str, manifests.TaskOutputs],
    copies: Mapping[str, manifests.TaskOutputs],
) -> Mapping[str, manifests.TaskOutputs]:
    """The upstream outputs ``unit`` reads: a producer it reads through a copy gives the
    copy's artifacts (the same names) and its own parameters. ``tasks``: the run's units'
    tasks by unit name (``RunWide.tasks``); ``copies``: the copy units' outputs by name."""
    via = (unit.spec or {}).get("via") or {}
    if not via:
        return outputs
    out = dict(outputs)
    for producer, name in via.items():
        task = tasks.get(producer, producer)
        base, copy = out.get(task), copies.get(name)
        if base is None or copy is None:
            continue
        out[task] = manifests.TaskOutputs(
            phase=base.phase,
            parameters=base.parameters,
            result=base.result,
            artifacts={**base.artifacts, **_copied(base.artifacts, copy.artifacts)},
            exit_code=base.exit_code,
            extra=base.extra,
            template=base.template,
        )
    return out


def _copied(
    produced: Mapping[str, Mapping[str, Any]], copied: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """Each copied artifact as its reader takes it: the producer's artifact (its archive,
    mode, ...) at the copy's location. An object was copied as it is, so it is read as the
    producer's would have been; a folder was copied as one tgz (the copy recorded no
    ``archive: none``), which the reader's Argo unpacks into the folder when told nothing."""
    out: dict[str, Any] = {}
    for name, copy in copied.items():
        base = produced.get(name)
        if base is None:
            out[name] = copy
            continue
        kept = {k: v for k, v in base.items() if k not in _LOCATIONS}
        if "none" not in (copy.get("archive") or {}):
            kept.pop("archive", None)
        out[name] = {**kept, **{k: v for k, v in copy.items() if k in _LOCATIONS}}
    return out


# An artifact's location fields (Argo's ArtifactLocation), the rest being how it is read.
_LOCATIONS = ("s3", "http", "gcs", "azure", "oss", "hdfs", "git", "raw", "artifactory")


def workflow(
    run: WorkflowRun,
    unit: UnitRun,
    units: Sequence[UnitRun],
    outputs: Mapping[str, manifests.TaskOutputs],
    folder_of: Callable[[Mapping[str, Any]], list[str] | None] = lambda a: None,
) -> dict[str, Any]:
    """The transfer unit's step workflow: the producer's artifacts (full locations, signed
    into pre-signed GETs by the caller like any step's inputs) copied into its site's
    repository. ``folder_of``: the relative paths of an ``archive: none`` output's objects
    when it is a folder (listed at its repository), else None."""
    info = (unit.spec or {}).get(TRANSFER) or {}
    producer = next((u for u in units if u.name == info.get("producer")), None)
    task = str((producer.spec or {}).get("task") or producer.name) if producer else ""
    found = outputs.get(task)
    artifacts = [{**dict(a), "name": str(n)} for n, a in (found.artifacts if found else {}).items()]
    if not artifacts:
        raise manifests.Unresolved([f"tasks.{task}.outputs.artifacts"])
    # Only an unarchived output may be a folder (a default one is one tgz object).
    folders = {
        str(a["name"]): files
        for a in artifacts
        if "none" in (a.get("archive") or {}) and (files := folder_of(a))
    }
    return manifests.transfer_workflow(
        codec.unit_from_dict(unit.spec),
        artifacts,
        run_name=run.name,
        run_id=run.pk,
        attempt=unit.attempt,
        namespace=client.namespace(),
        site=unit.site,
        reason=unit.reason,
        domain=settings.PORTAL_LABEL_DOMAIN,
        folders=folders,
    )


def observe(unit: UnitRun) -> None:
    """Fold a succeeded transfer's bandwidth into its link's observed mean, once per attempt
    (``spec.transfer.observed``: a conditional update)."""
    info = (unit.spec or {}).get(TRANSFER) or {}
    if unit.phase != UnitPhase.SUCCEEDED or info.get("observed") == unit.attempt:
        return
    if info.get("from") == unit.site:
        return  # a copy within its own site's repository crossed no link
    found = transfer_measured(unit)
    if not found["measured"] or found["seconds"] is None:
        return
    if int(found["bytes"]) < MIN_OBSERVED_BYTES:
        return
    spec = {**unit.spec, TRANSFER: {**info, "observed": unit.attempt}}
    if not UnitRun.objects.filter(pk=unit.pk, spec=unit.spec).update(spec=spec):
        return
    unit.spec = spec
    # Whole-second timestamps: a copy under a second counts as one second.
    mbps = max(int(found["bytes"]), 1) * 8 / 1e6 / max(float(found["seconds"]), 1.0)
    link = SiteLink.objects.filter(source__name=found["from"], target__name=unit.site)
    with transaction.atomic():
        row = link.select_for_update().first()
        if row is None:
            return
        old = row.observed_mbps
        new = mbps if old is None else EWMA_ALPHA * mbps + (1 - EWMA_ALPHA) * old
        SiteLink.objects.filter(pk=row.pk).update(
            observed_mbps=new, observed_transfers=F("observed_transfers") + 1
        )


def relay_again(run: WorkflowRun, unit: UnitRun, units: Sequence[UnitRun], lost: str) -> str | None:
    """Another relay for a transfer whose site was lost (failover), or None."""
    info = (unit.spec or {}).get(TRANSFER) or {}
    view = planner_snapshot()
    project = run.project.name if run.project_id and run.project else None
    by_name = {u.name: u for u in units}
    producer = by_name.get(str(info.get("producer")))
    regions = _regions(producer, units, view.datasets.for_project(project)) if producer else set()
    return relays.relay_for(
        view.fleet,
        str(info.get("from")),
        str(info.get("for")),
        int((info.get("estimate") or {}).get("bytes") or 0),
        regions,
        exclude=[lost],
    )
