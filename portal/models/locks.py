"""Argo synchronization: the places runs and units take on locks, and the fleet-wide locks."""

from __future__ import annotations

from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

from portal.models.runs import WorkflowRun


class SyncHold(models.Model):
    """A run's (``scope`` "") or one of its units' (``scope``: the unit's name) place on an Argo
    lock, a mutex or a semaphore (``portal.controller.locks``): waiting, or holding it.

    ``key`` is Argo's lock name with the run's project in place of the namespace
    (``<project>/Mutex/<name>``, ``<project>/ConfigMap/<configmap>/<key>``), or ``*/...`` for
    a lock an operator declared fleet-wide (``FleetLock``): runs of one project share a lock as
    workflows of one namespace share it in Argo. ``priority`` is the run's ``spec.priority``
    within its project's range; ``expires_at`` the run's deadline (``activeDeadlineSeconds``),
    past which the place is given up. Rows of ended runs and units, and expired ones, are
    deleted when the lock is next taken or released, and by the resync."""

    key = models.CharField(max_length=512)
    run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, related_name="sync_holds")
    scope = models.CharField(max_length=253, blank=True)
    held = models.BooleanField(default=False)
    priority = models.IntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["key", "run", "scope"], name="portal_synchold_once")
        ]
        indexes = [models.Index(fields=["key", "held"])]

    def __str__(self) -> str:
        return f"{self.key} {'held' if self.held else 'waiting'} by {self.run_id}/{self.scope}"


class FleetLock(models.Model):
    """A mutex or semaphore an operator declared fleet-wide: runs of every project that name it
    share it (any other lock is its project's own, ``portal.controller.locks``). ``name`` is the
    lock as a workflow's ``synchronization`` names it, without a namespace:
    ``Mutex/<name>`` or ``ConfigMap/<configmap>/<key>`` (a semaphore, its limit in that
    ConfigMap on karmada-apiserver)."""

    name = models.CharField(
        max_length=500,
        unique=True,
        validators=[
            RegexValidator(
                r"^(Mutex/[^/\s]+|ConfigMap/[^/\s]+/[^/\s]+)$",
                "Mutex/<name> or ConfigMap/<configmap>/<key>",
            )
        ],
        help_text="Mutex/<name> or ConfigMap/<configmap>/<key>, as synchronization names it",
    )
    description = models.TextField(blank=True, help_text="what it guards, who asked for it")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
