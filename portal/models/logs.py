"""The logs the portal kept of an attempt's pods once its step workflow is deleted."""

from __future__ import annotations

from django.db import models

from portal.models.runs import UnitRun


class KeptAttempt(models.Model):
    """What the portal kept of one attempt's pods before it deleted the attempt's step
    workflow (``portal.controller.keep_logs``), so that its logs are served afterwards.

    Complete once ``kept_at`` is set: a keeping cut short (a worker killed mid-way) leaves a
    row without it, which readers ignore and the next cleanup finishes. ``pods`` lists each pod
    as the log views show it (``pod``, ``node``, ``template``, ``phase``, ``containers`` kept,
    and ``note``: why a log is missing)."""

    unit = models.ForeignKey(UnitRun, on_delete=models.CASCADE, related_name="kept_attempts")
    attempt = models.PositiveIntegerField()
    workflow = models.CharField(max_length=63)
    site = models.CharField(max_length=63, blank=True)
    phase = models.CharField(max_length=16, blank=True)
    pods = models.JSONField(default=list, blank=True)
    # Why nothing (or not everything) could be kept, for the reader.
    note = models.TextField(blank=True)
    kept_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["unit", "attempt"], name="keptattempt_unique_attempt")
        ]

    def __str__(self) -> str:
        return f"{self.workflow} (attempt {self.attempt})"


class KeptLog(models.Model):
    """One container's log, kept: at most ``PORTAL_KEPT_LOG_MAX_BYTES`` of its end; when the
    container printed more, ``content`` begins with a line saying how much was dropped."""

    kept = models.ForeignKey(KeptAttempt, on_delete=models.CASCADE, related_name="logs")
    pod = models.CharField(max_length=253)
    container = models.CharField(max_length=63)
    content = models.BinaryField()
    # Bytes the container printed (what was read), and whether the front was dropped.
    size = models.BigIntegerField(default=0)
    truncated = models.BooleanField(default=False)
    # Where the log was read from: the site's pod log, or the artifact Argo archived it as.
    source = models.CharField(max_length=512, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["kept", "pod", "container"], name="keptlog_unique_container"
            )
        ]

    def __str__(self) -> str:
        return f"{self.pod}/{self.container}"
