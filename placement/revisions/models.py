"""Revisions of the placement configuration, and the planning inputs replay reads back."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from placement.choices import RevisionState


class RuleRevision(models.Model):
    """One version of the placement configuration (``placement.revisions.config``): who
    proposed it and why, its diff against its parent, who approved it and when it was applied.
    The revision applied last is the active one: its configuration is what the rule, site,
    dataset and link tables hold, so the planner, the webhook and the policy sync use it.
    Only ``placement.revisions.services`` changes ``state``."""

    parent = models.ForeignKey(
        "self", on_delete=models.PROTECT, null=True, blank=True, related_name="children"
    )
    # A rollback's revision: the earlier revision whose configuration it restores.
    restores = models.ForeignKey(
        "self", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    applied_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    state = models.CharField(
        max_length=10, choices=RevisionState.choices, default=RevisionState.DRAFT
    )
    comment = models.TextField(blank=True)
    source = models.CharField(max_length=16, default="api")  # api, admin, file, rollback, initial
    config = models.JSONField(default=dict)
    diff = models.JSONField(default=dict, blank=True)
    # The replay summary when it was applied: what moved at that time (the audit trail).
    replay_summary = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    approved_at = models.DateTimeField(null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["state", "-applied_at"], name="revision_state_applied")]

    def __str__(self) -> str:
        return f"revision {self.pk} ({self.state})"


class PlanningSnapshot(models.Model):
    """The fleet (sites with their capacity as held, links) and datasets a plan was made
    from, stored once per distinct content (``digest``: sha256 of the canonical JSON)."""

    digest = models.CharField(max_length=64, unique=True)
    body = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.digest[:12]


class PlanningRecord(models.Model):
    """What a submission was planned from, so replay repeats the same plan exactly: the
    units as parsed, the project, the snapshot, and the revision then active. ``run_id`` is
    the portal's run (a plain id: ``placement`` does not depend on ``portal``)."""

    run_id = models.BigIntegerField(db_index=True)
    project = models.CharField(max_length=150, blank=True)
    revision = models.ForeignKey(
        RuleRevision, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    snapshot = models.ForeignKey(PlanningSnapshot, on_delete=models.PROTECT, related_name="+")
    units = models.JSONField(default=list)
    n_units = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"planning of run {self.run_id}"
