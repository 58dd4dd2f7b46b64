"""Writing revisions: drafts, review, apply, rollback. The only module that moves a revision's
state (``REVISION_TRANSITIONS`` in ``placement.choices``) or writes a configuration into the
rule, site, dataset and link tables."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from placement.choices import REVISION_TRANSITIONS, RevisionState
from placement.models import PlacementRule
from placement.revisions import config as cfg
from placement.revisions.models import RuleRevision
from placement.revisions.selectors import active_revision, current_config, inventory_names
from sites.models import Dataset, Site, SiteLink

# Called once a revision is applied and committed (the portal registers its policy sync).
_after_apply: list[Callable[[RuleRevision], None]] = []


def on_apply(callback: Callable[[RuleRevision], None]) -> None:
    """Run ``callback(revision)`` after each applied revision commits."""
    _after_apply.append(callback)


class RevisionError(Exception):
    """A request the revision's state or the configuration does not allow (400)."""

    def __init__(self, detail: Mapping[str, list[str]] | str) -> None:
        super().__init__(str(detail))
        self.detail = detail


class RevisionConflict(Exception):
    """An edit from a parent that is no longer the newest revision (409)."""

    def __init__(self, newer: RuleRevision, message: str = "") -> None:
        super().__init__(
            message or f"revision {newer.pk} was made from the same parent; start from it"
        )
        self.newer = newer


class RevisionForbidden(Exception):
    """A review step the user may not take (403): approving their own draft."""


def review_required() -> bool:
    return bool(getattr(settings, "PORTAL_RULES_REVIEW", True))


@dataclass(frozen=True)
class Checked:
    config: dict[str, Any]
    diff: dict[str, Any]


def config_check(doc: Any, *, against: Mapping[str, Any] | None = None) -> Checked:
    """The canonical configuration of ``doc`` and its diff against ``against`` (default: the
    active configuration); ``RevisionError`` with each problem under its YAML path."""
    sites, datasets = inventory_names()
    problems = cfg.validate(doc, sites=sites, datasets=datasets)
    if problems:
        detail: dict[str, list[str]] = {}
        for path, message in problems:
            detail.setdefault(f"config.{path}" if path else "config", []).append(message)
        raise RevisionError(detail)
    canonical = cfg.canonical(doc)
    base = against if against is not None else current_config()
    return Checked(canonical, cfg.diff(base, canonical))


def revision_baseline() -> RuleRevision:
    """The active revision, recording the tables as revision 1 when none exists yet (the
    configuration before revisions were kept)."""
    active = active_revision()
    if active is not None:
        return active
    with transaction.atomic():
        RuleRevision.objects.select_for_update().filter(pk__isnull=False).first()
        active = active_revision()
        if active is not None:
            return active
        now = timezone.now()
        return RuleRevision.objects.create(
            state=RevisionState.APPLIED,
            comment="The configuration before revisions were kept.",
            source="initial",
            config=current_config(),
            applied_at=now,
            approved_at=now,
        )


def revision_draft_create(
    *,
    user: Any,
    config: Any,
    parent_id: int | None = None,
    comment: str = "",
    source: str = "api",
    restores: RuleRevision | None = None,
) -> RuleRevision:
    """A draft from ``parent_id`` (default: the active revision). Two edits from one parent:
    the second gets ``RevisionConflict`` naming the first (rejected drafts do not count)."""
    baseline = revision_baseline()
    with transaction.atomic():
        parent = (
            RuleRevision.objects.select_for_update().filter(pk=parent_id or baseline.pk).first()
        )
        if parent is None:
            raise RevisionError({"parent": [f"No revision {parent_id}."]})
        checked = config_check(config, against=parent.config)
        sibling = (
            RuleRevision.objects.filter(parent=parent)
            .exclude(state=RevisionState.REJECTED)
            .order_by("-id")
            .first()
        )
        if sibling is not None:
            raise RevisionConflict(sibling)
        newer = (
            RuleRevision.objects.filter(
                state=RevisionState.APPLIED, applied_at__gt=parent.applied_at
            ).first()
            if parent.applied_at is not None
            else None
        )
        if newer is not None:
            raise RevisionConflict(
                newer, f"revision {newer.pk} replaced revision {parent.pk}; start from it"
            )
        return RuleRevision.objects.create(
            parent=parent,
            restores=restores,
            author=user if getattr(user, "is_authenticated", False) else None,
            comment=comment,
            source=source,
            config=checked.config,
            diff=checked.diff,
        )


def _move(revision: RuleRevision, to: str, **fields: Any) -> RuleRevision:
    """The one place a revision's state changes: a conditional UPDATE from the state it had,
    so two reviewers racing move it once."""
    if to not in REVISION_TRANSITIONS[revision.state]:
        raise RevisionError({"state": [f"A {revision.state} revision cannot become {to}."]})
    moved = RuleRevision.objects.filter(pk=revision.pk, state=revision.state).update(
        state=to, **fields
    )
    if not moved:
        raise RevisionError({"state": ["The revision changed meanwhile; reload it."]})
    revision.refresh_from_db()
    return revision


def revision_approve(*, revision: RuleRevision, user: Any) -> RuleRevision:
    if revision.author_id is not None and revision.author_id == user.pk:
        raise RevisionForbidden("The author cannot approve their own revision.")
    return _move(revision, RevisionState.APPROVED, approved_by=user, approved_at=timezone.now())


def revision_reject(*, revision: RuleRevision, user: Any) -> RuleRevision:
    return _move(revision, RevisionState.REJECTED)


def revision_apply(
    *, revision: RuleRevision, user: Any, replay_summary: Mapping[str, Any] | None = None
) -> RuleRevision:
    """Write the revision's configuration into the tables and make it the active revision.
    A draft needs approval first when review is on; a revision whose parent is no longer the
    active one gets ``RevisionConflict`` naming the active revision."""
    if revision.state not in (RevisionState.DRAFT, RevisionState.APPROVED):
        raise RevisionError({"state": [f"A {revision.state} revision cannot be applied."]})
    if revision.state == RevisionState.DRAFT and review_required():
        raise RevisionError({"state": ["Review is required: approve the draft first."]})
    with transaction.atomic():
        active = active_revision(for_update=True)
        if active is not None and revision.parent_id != active.pk:
            raise RevisionConflict(
                active,
                f"revision {active.pk} is active now, not revision {revision.parent_id} this "
                "one was made from; draft again from it",
            )
        config_write(revision.config)
        now = timezone.now()
        if active is not None:
            _move(active, RevisionState.SUPERSEDED)
        fields: dict[str, Any] = {"applied_at": now, "applied_by": user}
        if replay_summary is not None:
            fields["replay_summary"] = dict(replay_summary)
        revision = _move(revision, RevisionState.APPLIED, **fields)
        applied = revision
        transaction.on_commit(lambda: [cb(applied) for cb in _after_apply])
    return revision


def revision_rollback(*, revision: RuleRevision, user: Any, comment: str = "") -> RuleRevision:
    """A new draft from the active revision equal to ``revision``'s configuration; it is
    reviewed and applied as any other (``revision_apply``). Only a revision that was applied
    once can be rolled back to."""
    if revision.state not in (RevisionState.APPLIED, RevisionState.SUPERSEDED):
        raise RevisionError({"state": ["Only a revision that was applied can be rolled back to."]})
    active = revision_baseline()
    return revision_draft_create(
        user=user,
        config=revision.config,
        parent_id=active.pk,
        comment=comment or f"Roll back to revision {revision.pk}.",
        source="rollback",
        restores=revision,
    )


def config_write(config: Mapping[str, Any]) -> None:
    """Make the tables hold ``config``: rules replaced by name, the operator fields of the
    named sites and datasets set, links replaced. Inside the caller's transaction."""
    canonical = cfg.canonical(config)
    names = [r["name"] for r in canonical["rules"]]
    PlacementRule.objects.exclude(name__in=names).delete()
    for rule in canonical["rules"]:
        fields = {k: v for k, v in rule.items() if k != "name"}
        PlacementRule.objects.update_or_create(name=rule["name"], defaults=fields)
    for site in canonical["sites"]:
        Site.objects.filter(name=site["name"]).update(
            cordoned=site["cordoned"],
            labels=site["labels"],
            capabilities=site["capabilities"],
            overrides=site["overrides"],
        )
    for dataset in canonical["datasets"]:
        Dataset.objects.filter(name=dataset["name"]).update(residency=dataset["residency"])
    ids = dict(Site.objects.values_list("name", "pk"))
    wanted = {(ln["source"], ln["target"]): ln for ln in canonical["links"]}
    for link in SiteLink.objects.select_related("source", "target"):
        if (link.source.name, link.target.name) not in wanted:
            link.delete()
    for (src, dst), ln in wanted.items():
        SiteLink.objects.update_or_create(
            source_id=ids[src],
            target_id=ids[dst],
            defaults={
                "bandwidth_mbps": ln["bandwidth_mbps"],
                "cost_per_gb": ln["cost_per_gb"],
                "latency_ms": ln["latency_ms"],
                "artifacts_reachable": ln["artifacts_reachable"],
            },
        )


def revision_record_direct(*, user: Any, source: str) -> RuleRevision | None:
    """After a direct edit of the tables (the rule admin or the rules API), the change as an
    applied revision from the active one, so the trail has it too (None: nothing changed)."""
    baseline = revision_baseline()
    with transaction.atomic():
        active = active_revision(for_update=True) or baseline
        config = current_config()
        change = cfg.diff(active.config, config)
        if not change:
            return None
        _move(active, RevisionState.SUPERSEDED)
        now = timezone.now()
        revision = RuleRevision.objects.create(
            parent=active,
            author=user if getattr(user, "is_authenticated", False) else None,
            applied_by=user if getattr(user, "is_authenticated", False) else None,
            state=RevisionState.APPLIED,
            comment=f"Edited directly ({source}).",
            source=source,
            config=config,
            diff=change,
            approved_at=now,
            applied_at=now,
        )
        transaction.on_commit(lambda: [cb(revision) for cb in _after_apply])
    return revision
