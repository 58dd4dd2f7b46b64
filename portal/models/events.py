"""What happened to a run: the entries of its history."""

from __future__ import annotations

from django.db import models

from portal.models.runs import UnitRun, WorkflowRun


class RunEvent(models.Model):
    """An entry of a run's history, shown on the run page and in the API."""

    run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, related_name="events")
    unit = models.ForeignKey(
        UnitRun, on_delete=models.CASCADE, null=True, blank=True, related_name="events"
    )
    kind = models.CharField(max_length=32)
    message = models.TextField()
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        # The run page's poll: the events of one run newer than the page's newest.
        indexes = [models.Index(fields=["run", "id"], name="runevent_run_id")]

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"
