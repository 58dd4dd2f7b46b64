"""Impact replay: the recorded planning inputs of past decisions planned again under two
configurations (the active one and a draft), and what would move.

Each submission records the fleet as the planner saw it (capacity as held by other runs,
links) and the datasets (``PlanningSnapshot``), its parsed units and its project
(``PlanningRecord``); so does each webhook decision (its unit, with where its upstream units
ran and what its ancestors read), written when the decision queue is drained. Replay lays
each configuration's operator fields (cordons, labels, capabilities, links, residency) and
rules over that snapshot and calls the same ``planner.plan`` (``planner.decide`` for a webhook
decision): nothing read from the clock or the live tables, so the answer is the same
each time it is asked.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from placement import codec, planner
from placement.context import CONTEXT_VERSION, Context, context_from_doc
from placement.parser import Resources, Unit
from placement.revisions import config as cfg
from placement.revisions.models import PlanningRecord, PlanningSnapshot
from placement.revisions.selectors import active_revision_id

DEFAULT_LIMIT = 1000
GB = 10**9


# Recording -----------------------------------------------------------------------------------


def snapshot_body(fleet: planner.Fleet, datasets: planner.DataCatalogue) -> dict[str, Any]:
    sites = []
    for s in fleet.ordered_sites:
        row = dataclasses.asdict(s)
        row["labels"] = dict(s.labels)
        row["capabilities"] = sorted(s.capabilities)
        sites.append(row)
    links = [dataclasses.asdict(ln) for ln in fleet.links]
    data = []
    for d in datasets.datasets:
        data.append(
            {
                "name": d.name,
                "uri_prefix": d.uri_prefix,
                "bytes": d.bytes,
                "residency": sorted(d.residency),
                "replicas": [dataclasses.asdict(r) for r in d.replicas],
                "project": d.project,
            }
        )
    return {"sites": sites, "links": links, "datasets": data}


def new_planning_record(
    *,
    run_id: int,
    project: str | None,
    units: Sequence[Unit],
    fleet: planner.Fleet,
    datasets: planner.DataCatalogue,
    unit_docs: Sequence[Mapping[str, Any]] | None = None,
) -> PlanningRecord:
    """What a submission was planned from (inside its transaction): its snapshot stored (once
    per digest) and its record, unsaved; the caller inserts it (a 10,000-item fan-out's
    record holds every unit: the portal streams it, ``portal.bulk.insert_big``).
    ``unit_docs``: the units as ``codec.unit_to_dict`` gives them, when the caller has them."""
    body = snapshot_body(fleet, datasets)
    snapshot, _ = PlanningSnapshot.objects.get_or_create(
        digest=snapshot_digest(body), defaults={"body": body}
    )
    docs = list(unit_docs) if unit_docs is not None else [codec.unit_to_dict(u) for u in units]
    return PlanningRecord(
        run_id=run_id,
        project=project or "",
        revision_id=active_revision_id(),
        snapshot=snapshot,
        units=docs,
        n_units=len(units),
    )


def snapshot_digest(body: Mapping[str, Any]) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class RuntimeInput:
    """What one webhook decision was made from: its AdmissionReview uid, the run (None for a
    Workflow created directly), the placement context (``placement.context.context_doc``),
    the revision then active and the snapshot's digest (its body when the caller has it)."""

    uid: str
    run_id: int | None
    context: Mapping[str, Any]
    revision_id: int | None
    digest: str
    body: Mapping[str, Any] | None
    at: datetime


def runtime_records(inputs: Sequence[RuntimeInput]) -> int:
    """Record webhook decisions' planning inputs (the decision queue's drain, inside its
    transaction): snapshots stored once per digest, one record per decision, a decision
    recorded twice (a drain repeated) stored once. A decision whose snapshot body never
    reached the database (its carrier entry was dropped) is left out. Returns how many."""
    if not inputs:
        return 0
    bodies = {i.digest: i.body for i in inputs if i.body is not None}
    known = dict(
        PlanningSnapshot.objects.filter(digest__in={i.digest for i in inputs}).values_list(
            "digest", "pk"
        )
    )
    missing = [PlanningSnapshot(digest=d, body=b) for d, b in bodies.items() if d not in known]
    if missing:
        PlanningSnapshot.objects.bulk_create(missing, ignore_conflicts=True)
        known.update(
            PlanningSnapshot.objects.filter(digest__in=[m.digest for m in missing]).values_list(
                "digest", "pk"
            )
        )
    rows = []
    for i in inputs:
        snapshot_id = known.get(i.digest)
        if snapshot_id is None:
            continue
        ctx = i.context
        rows.append(
            PlanningRecord(
                run_id=i.run_id,
                project=ctx.get("project") or "",
                revision_id=i.revision_id,
                snapshot_id=snapshot_id,
                units=[ctx["unit"]],
                n_units=1,
                admission_uid=i.uid,
                context={k: ctx[k] for k in ("upstream", "ancestors", "held") if k in ctx},
                created_at=i.at,
            )
        )
    PlanningRecord.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)


# Inputs under a configuration ------------------------------------------------------------------


def rules_of(config: Mapping[str, Any]) -> planner.RuleBook:
    return planner.RuleBook(
        planner.Rule(
            id=r["name"],
            name=r["name"],
            effect=r["effect"],
            selector=planner.Selector.from_dict(r["selector"] or {}),
            timing=r["timing"],
            params=r["parameters"] or {},
            weight=float(r["weight"]),
            order=int(r["order"]),
            enabled=bool(r["enabled"]),
        )
        for r in config["rules"]
    )


def inputs_under(
    body: Mapping[str, Any], config: Mapping[str, Any]
) -> tuple[planner.Fleet, planner.DataCatalogue]:
    """The recorded fleet and datasets with ``config``'s operator fields laid over them."""
    sites_cfg = {s["name"]: s for s in config["sites"]}
    sites = []
    for row in body["sites"]:
        over = sites_cfg.get(row["name"], {})
        sites.append(
            planner.SiteState(
                **{
                    **row,
                    "labels": dict(over.get("labels", row["labels"])),
                    "capabilities": frozenset(over.get("capabilities", row["capabilities"])),
                    "cordoned": bool(over.get("cordoned", row["cordoned"])),
                }
            )
        )
    links = tuple(
        planner.Link(
            source=ln["source"],
            target=ln["target"],
            bandwidth_mbps=float(ln["bandwidth_mbps"]),
            cost_per_gb=float(ln["cost_per_gb"]),
            latency_ms=float(ln["latency_ms"]),
            artifacts_reachable=bool(ln["artifacts_reachable"]),
        )
        for ln in config["links"]
    )
    residency = {d["name"]: d["residency"] for d in config["datasets"]}
    datasets = [
        planner.DatasetInfo(
            name=d["name"],
            uri_prefix=d["uri_prefix"],
            bytes=d["bytes"],
            residency=frozenset(residency.get(d["name"], d["residency"])),
            replicas=tuple(planner.Replica(**r) for r in d["replicas"]),
            project=d["project"],
        )
        for d in body["datasets"]
    ]
    return planner.Fleet(sites=tuple(sites), links=links), planner.DataCatalogue(datasets)


# Replay ------------------------------------------------------------------------------------------


def records_select(
    *,
    limit: int = DEFAULT_LIMIT,
    project: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[PlanningRecord]:
    """The newest records holding the last ``limit`` decisions (whole submissions)."""
    qs = PlanningRecord.objects.select_related("snapshot").order_by("-created_at", "-id")
    if project:
        qs = qs.filter(project=project)
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    if until is not None:
        qs = qs.filter(created_at__lt=until)
    out: list[PlanningRecord] = []
    total = 0
    for record in qs.iterator(chunk_size=200):
        if total >= limit:
            break
        out.append(record)
        total += record.n_units
    return out


def replay(
    *,
    base: Mapping[str, Any],
    draft: Mapping[str, Any],
    limit: int = DEFAULT_LIMIT,
    project: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> dict[str, Any]:
    records = records_select(limit=limit, project=project, since=since, until=until)
    return replay_records(
        [
            (
                r.run_id,
                r.project or None,
                r.snapshot_id,
                r.snapshot.body,
                r.units,
                r.context if r.admission_uid else None,
            )
            for r in records
        ],
        base=base,
        draft=draft,
        limit=limit,
    )


# (run, project, snapshot id, snapshot body, units, context): context None for a submission's
# plan, the upstream and ancestors of a webhook decision's one unit otherwise.
Recorded = tuple[
    int | None,
    str | None,
    int,
    Mapping[str, Any],
    Sequence[Mapping[str, Any]],
    Mapping[str, Any] | None,
]


def replay_records(
    records: Iterable[Recorded],
    *,
    base: Mapping[str, Any],
    draft: Mapping[str, Any],
    limit: int = DEFAULT_LIMIT,
) -> dict[str, Any]:
    """Plan each record's units under ``base`` and ``draft``; report what moves. Pure."""
    base, draft = cfg.canonical(base), cfg.canonical(draft)
    books = (rules_of(base), rules_of(draft))
    inputs: dict[int, tuple[tuple[Any, Any], tuple[Any, Any]]] = {}
    tally = _Tally(
        inbound_before=_inbound_cost(base["links"]), inbound=_inbound_cost(draft["links"])
    )
    for run_id, project, snap_id, body, unit_dicts, context in records:
        if tally.decisions >= limit:
            break
        pair = inputs.get(snap_id)
        if pair is None:
            pair = inputs[snap_id] = (inputs_under(body, base), inputs_under(body, draft))
        (fleet_a, data_a), (fleet_b, data_b) = pair
        if context is not None:
            found = _runtime_context(project, unit_dicts, context)
            if found is None:
                continue
            tally.decisions += 1
            tally.runs += 1
            held = held_of(context)
            decided = (
                _decide_runtime(
                    found, planner.PlannerView.holding(fleet_a, books[0], data_a, held)
                ),
                _decide_runtime(
                    found, planner.PlannerView.holding(fleet_b, books[1], data_b, held)
                ),
            )
        else:
            units = [codec.unit_from_dict(dict(u)) for u in unit_dicts][: limit - tally.decisions]
            tally.decisions += len(units)
            tally.runs += 1
            decided = (
                planner.plan(units, fleet_a, books[0], data_a, project=project).decisions,
                planner.plan(units, fleet_b, books[1], data_b, project=project).decisions,
            )
        tally.compare(run_id, decided, fleet_a, data_a)
    return {"moved": tally.moved, "summary": tally.summary()}


@dataclasses.dataclass
class _Tally:
    """What a replay finds, summed over the decisions it compares: ``inbound_before`` and
    ``inbound`` price a gigabyte into each site under the base and the draft."""

    inbound_before: dict[str, float]
    inbound: dict[str, float]
    decisions: int = 0
    runs: int = 0
    moved: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    pairs: Counter[str] = dataclasses.field(default_factory=Counter)
    unplaceable: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    violations: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    bytes_before: int = 0
    bytes_after: int = 0
    cost_before: float = 0.0
    cost_after: float = 0.0

    def compare(
        self,
        run_id: int | None,
        decided: tuple[Sequence[planner.Decision], Sequence[planner.Decision]],
        fleet: planner.Fleet,
        data: planner.DataCatalogue,
    ) -> None:
        """Each unit's decision under the base against the draft's."""
        index = {s.name: i for i, s in enumerate(fleet.ordered_sites)}
        allowed = {d.name: d.residency for d in data.datasets if d.residency}
        region = {s.name: s.region for s in fleet.sites}
        for a, b in zip(*decided, strict=True):
            was, now = a.site or a.runtime_hint, b.site or b.runtime_hint
            if was is not None:
                nbytes = a.table.bytes_at(index[was])
                self.bytes_before += nbytes
                self.cost_before += nbytes / GB * self.inbound_before.get(was, 0.0)
            if now is not None:
                nbytes = b.table.bytes_at(index[now])
                self.bytes_after += nbytes
                self.cost_after += nbytes / GB * self.inbound.get(now, 0.0)
                bound = [n for n in b.datasets if n in allowed]
                outside = [n for n in bound if region.get(now) not in allowed[n]]
                if outside:
                    self.violations.append(
                        {"run": run_id, "unit": b.unit, "site": now, "datasets": outside}
                    )
            if was == now:
                continue
            if now is None and was is not None:
                self.unplaceable.append({"run": run_id, "unit": b.unit, "why": b.reason})
            self.pairs[f"{was or 'unplaceable'}->{now or 'unplaceable'}"] += 1
            self.moved.append(
                {
                    "run": run_id,
                    "unit": b.unit,
                    "from": was,
                    "to": now,
                    "timing": a.timing,
                    "why": f"now: {b.reason} (rules: {', '.join(b.rules) or 'none'}); "
                    f"before: {a.reason} (rules: {', '.join(a.rules) or 'none'})",
                }
            )

    def summary(self) -> dict[str, Any]:
        return {
            "decisions": self.decisions,
            "runs": self.runs,
            "moved": len(self.moved),
            "moved_by_pair": dict(sorted(self.pairs.items())),
            "newly_unplaceable": self.unplaceable,
            "residency_violations": self.violations,
            "transfer_bytes": {
                "before": self.bytes_before,
                "after": self.bytes_after,
                "change": self.bytes_after - self.bytes_before,
            },
            "transfer_cost": {
                "before": round(self.cost_before, 4),
                "after": round(self.cost_after, 4),
                "change": round(self.cost_after - self.cost_before, 4),
            },
        }


def held_of(context: Mapping[str, Any]) -> dict[str, Resources]:
    """What other decisions held beside the recorded snapshot when a webhook decision was
    made (``{site: [cpu, memory, gpus]}`` in its context): the fleet it saw is the snapshot
    with these taken."""
    out: dict[str, Resources] = {}
    raw = context.get("held")
    for site, values in raw.items() if isinstance(raw, Mapping) else ():
        if isinstance(values, list) and len(values) == 3:
            cpu, memory, gpus = (int(v) for v in values)
            out[str(site)] = Resources(cpu_millicores=cpu, memory_bytes=memory, gpus=gpus)
    return out


def _runtime_context(
    project: str | None, unit_dicts: Sequence[Mapping[str, Any]], context: Mapping[str, Any]
) -> Context | None:
    if len(unit_dicts) != 1:
        return None
    doc = {"v": CONTEXT_VERSION, "project": project, "unit": dict(unit_dicts[0]), **context}
    return context_from_doc(doc)


def _decide_runtime(found: Context, view: planner.PlannerView) -> tuple[planner.Decision, ...]:
    """The webhook's decision (``portal.admission.decide``) under one configuration, on the
    fleet it recorded (its snapshot with what other decisions held beside it)."""
    return (
        planner.decide(
            found.unit,
            view.fleet,
            view.rules,
            view.datasets,
            found.project,
            found.upstream,
            timing="runtime",
            strict_capacity=True,
            ancestors=found.ancestors,
            relays=False,
        ),
    )


def _inbound_cost(links: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Per target site, the dearest cost per GB of its inbound links: the cost estimate counts
    every byte a unit pulls at that price (an upper bound; a unit's sources are not split)."""
    out: dict[str, float] = {}
    for ln in links:
        out[ln["target"]] = max(out.get(ln["target"], 0.0), float(ln["cost_per_gb"]))
    return out


def summary_lines(result: Mapping[str, Any]) -> list[str]:
    s = result["summary"]
    lines = [
        f"replayed: {s['decisions']} decisions of {s['runs']} runs",
        f"moved: {s['moved']} units",
    ]
    lines += [f"  {pair}: {n}" for pair, n in s["moved_by_pair"].items()]
    lines.append(f"newly unplaceable: {len(s['newly_unplaceable'])} units")
    lines.append(f"residency violations: {len(s['residency_violations'])}")
    lines.append(f"transfer bytes change: {s['transfer_bytes']['change']}")
    lines.append(f"transfer cost change: {s['transfer_cost']['change']}")
    return lines
