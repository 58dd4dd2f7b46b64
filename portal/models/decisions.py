"""Why each unit (or Workflow created directly on Karmada) went where it went."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.utils import timezone

from portal.choices import DecisionSource, UnitTiming
from portal.models.fields import InlineJSONField
from portal.models.runs import UnitRun, WorkflowRun


class CandidateTable(models.Model):
    """A candidate table that several decisions of one run share.

    The planner gives units with the same rules, data, requests and upstream sites one table;
    a 10,000-item fan-out over 50 sites has about 50 distinct ones, of 11 KB each in JSON.
    Stored once per run and table rather than on each of its 10,000 decisions (110 MB to
    write at submission). Each unit still has its own decision row."""

    run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, related_name="+")
    rows = InlineJSONField(default=list, blank=True)

    def __str__(self) -> str:
        return f"candidate table {self.pk} of run {self.run_id}"


class PlacementDecision(models.Model):
    """Why a unit (or a Workflow created directly on Karmada) went where it went.

    ``candidates`` is the planner's full table: ``[{site, eligible, why, score, bytes_to_move,
    est_transfer_s}]``. ``site`` is empty when nothing was eligible.
    """

    run = models.ForeignKey(
        WorkflowRun, on_delete=models.CASCADE, null=True, blank=True, related_name="decisions"
    )
    unit = models.ForeignKey(
        UnitRun, on_delete=models.CASCADE, null=True, blank=True, related_name="decisions"
    )
    workflow_name = models.CharField(max_length=253, blank=True)
    attempt = models.PositiveIntegerField(default=1)
    source = models.CharField(max_length=8, choices=DecisionSource.choices)
    timing = models.CharField(max_length=8, choices=UnitTiming.choices, default=UnitTiming.SUBMIT)
    site = models.CharField(max_length=63, blank=True)
    reason = models.TextField(blank=True)
    # Empty when ``shared_table`` holds the rows: read ``candidate_rows``, not this.
    candidates = InlineJSONField(default=list, blank=True)
    shared_table = models.ForeignKey(
        CandidateTable, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    # The AdmissionReview's uid for webhook decisions: written from a queue, a decision may be
    # written twice after a crash, and this keeps one.
    admission_uid = models.CharField(max_length=256, blank=True)
    # When it was decided (a queued webhook decision is written a moment later).
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["created_at", "id"]
        # The run page's poll: the newest decision of one run; its decision log: a page of
        # one run's decisions in their order (without it, 50,000 sorted for each page).
        indexes = [
            models.Index(fields=["run", "id"], name="decision_run_id"),
            models.Index(fields=["run", "created_at", "id"], name="decision_run_order"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["admission_uid"],
                condition=~models.Q(admission_uid=""),
                name="decision_admission_uid_unique",
            )
        ]

    def __str__(self) -> str:
        return f"{self.workflow_name or self.unit} → {self.site or '(none)'}"

    @property
    def when_why(self) -> str:
        """When the decision was taken and what took it, as the decision log says it. A
        failover decides at runtime whatever timing the planner was asked for (it places the
        unit "as at submission", for a step that starts now)."""
        if self.source == DecisionSource.FAILOVER:
            return "at runtime, failover: its site was lost or closed"
        if self.source == DecisionSource.WEBHOOK:
            return "at runtime, by the admission webhook"
        if self.source == DecisionSource.FALLBACK:
            return "at runtime, by the fallback policy (the webhook did not answer)"
        if self.timing == UnitTiming.RUNTIME:
            return "at submission: left to runtime, when its inputs are known"
        return "at submission, by the placement rules"

    @property
    def candidate_rows(self) -> list[dict[str, Any]]:
        """The full candidate table, its own or the one it shares (select_related
        ``shared_table`` when reading many)."""
        if self.shared_table_id is not None and self.shared_table is not None:
            return list(self.shared_table.rows or [])
        return list(self.candidates or [])

    @classmethod
    def from_plan(
        cls, decision: Any, *, reason: str | None = None, **fields: Any
    ) -> PlacementDecision:
        """An unsaved record of a planner ``Decision`` (site, reason, the candidate table);
        ``fields`` say whose and from where (run, unit, source, timing, attempt...)."""
        return cls(
            site=decision.site or "",
            reason=decision.reason if reason is None else reason,
            candidates=[c.as_dict() for c in decision.candidates],
            **fields,
        )
