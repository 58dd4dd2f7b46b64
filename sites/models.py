"""The inventory: projects, sites (Karmada member clusters), links between them, and datasets.

This app is the floor of the import graph: it imports nothing of ``placement`` or ``portal``.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models

from sites.choices import ReplicaState, SyncMode

dns_label = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    "Use lower-case letters, digits and '-', starting and ending with a letter or digit "
    "(at most 63 characters).",
)


# The ``spec.priority`` range of a run in no project, and a project's by default: the value
# Argo gives a workflow without one, so members order nothing over anyone until an operator
# grants a project a range (as a Kubernetes namespace uses only the PriorityClasses its
# ResourceQuota allows).
DEFAULT_PRIORITY_RANGE = (0, 0)


def priority_clamp(value: int, project: Project | None) -> int:
    """``value`` within the range ``project`` allows (``DEFAULT_PRIORITY_RANGE`` for none)."""
    low, high = project.priority_range if project is not None else DEFAULT_PRIORITY_RANGE
    return min(max(value, low), high)


class Project(models.Model):
    """A group of scientists who share runs and datasets.

    ``priority_min`` / ``priority_max``: the range its runs' ``spec.priority`` is clamped to
    (what orders the waiters of a lock, ``portal.controller.locks``); set by operators."""

    name = models.CharField(max_length=63, unique=True, validators=[dns_label])
    description = models.TextField(blank=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="projects", blank=True)
    priority_min = models.IntegerField(
        default=DEFAULT_PRIORITY_RANGE[0],
        help_text="lowest spec.priority its runs may have; lower values count as this",
    )
    priority_max = models.IntegerField(
        default=DEFAULT_PRIORITY_RANGE[1],
        help_text="highest spec.priority its runs may have; higher values count as this",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(priority_min__lte=models.F("priority_max")),
                name="sites_project_priority_range",
                violation_error_message="priority_min must not be above priority_max",
            )
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def priority_range(self) -> tuple[int, int]:
        return self.priority_min, self.priority_max


# karmadactl cordon's taint (pkg/apis/cluster/v1alpha1/well_known_constants.go).
CORDON_TAINT = "cluster.karmada.io/unschedulable"


def untolerated_taint(taints: Any) -> str:
    """``key=value:effect`` (corev1 Taint.ToString) of the first NoSchedule or NoExecute taint,
    or ""."""
    for taint in taints if isinstance(taints, list) else []:
        if isinstance(taint, dict) and taint.get("effect") in ("NoSchedule", "NoExecute"):
            value = f"={taint['value']}" if taint.get("value") else ""
            return f"{taint.get('key', '')}{value}:{taint['effect']}"
    return ""


# The Site's columns from its Cluster's ``resourceSummary`` (allocatable, and allocated with
# allocating): what the member reported it has and what its pods take.
SUMMARY_FIELDS = (
    "cpu_allocatable",
    "cpu_allocated",
    "memory_allocatable",
    "memory_allocated",
    "gpu_allocatable",
    "gpu_allocated",
    "pods_allocatable",
    "pods_allocated",
)


class Site(models.Model):
    """One Karmada member cluster; ``name`` is the Karmada Cluster name.

    Capacity figures come from the Cluster's ``status.resourceSummary`` (CPU in millicores,
    memory in bytes); ``*_allocated`` counts Karmada's ``allocated`` plus ``allocating`` (pods
    created but not yet scheduled hold their requests too), so free is
    ``allocatable - allocated - allocating``. ``overrides`` is set by the site's operators and
    compiled into the site's OverridePolicy: ``{"artifact_repository": {...},
    "gpu_node_selector": {...}, "image_registry_mirror": "registry.example.org"}``.
    """

    name = models.CharField(max_length=63, unique=True, validators=[dns_label])
    region = models.CharField(max_length=63, blank=True)
    zone = models.CharField(max_length=63, blank=True)
    provider = models.CharField(max_length=63, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    capabilities = models.JSONField(
        default=list, blank=True, help_text='e.g. ["gpu", "nvidia-a100", "fast-scratch"]'
    )
    sync_mode = models.CharField(max_length=4, choices=SyncMode.choices, default=SyncMode.PUSH)
    ready = models.BooleanField(default=False)
    ready_changed_at = models.DateTimeField(null=True, blank=True)
    cordoned = models.BooleanField(default=False)
    overrides = models.JSONField(default=dict, blank=True)
    cpu_allocatable = models.BigIntegerField(default=0, help_text="millicores")
    cpu_allocated = models.BigIntegerField(default=0, help_text="millicores")
    memory_allocatable = models.BigIntegerField(default=0, help_text="bytes")
    memory_allocated = models.BigIntegerField(default=0, help_text="bytes")
    gpu_allocatable = models.IntegerField(default=0)
    gpu_allocated = models.IntegerField(default=0)
    pods_allocatable = models.IntegerField(default=0)
    pods_allocated = models.IntegerField(default=0)
    last_sync = models.DateTimeField(null=True, blank=True)
    # When the portal last saw the Cluster's resourceSummary change (Karmada posts it only when
    # it changes, at most every --cluster-status-update-frequency): the figures above count
    # the pods the member had a moment before. A step the portal saw start after this is not
    # in them yet, and still holds its request (portal.selectors.held_reservations).
    summary_at = models.DateTimeField("resource summary changed", null=True, blank=True)
    policy_error = models.TextField(
        blank=True,
        help_text="why the last sync could not write this site's policies (empty: in step)",
    )
    taints = models.JSONField(
        default=list,
        blank=True,
        help_text="the Karmada Cluster's spec.taints, as the watcher last saw them",
    )
    refusal_grace_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="how long a step Karmada refuses here waits before it is placed elsewhere "
        "(empty: PORTAL_FAILOVER_GRACE_SECONDS)",
    )
    operators = models.ManyToManyField(
        settings.AUTH_USER_MODEL, related_name="operated_sites", blank=True
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def schedulable(self) -> bool:
        return self.ready and not self.cordoned

    @property
    def karmada_taint(self) -> str:
        """The first taint on the Cluster that keeps Karmada's scheduler from placing a
        portal step here ("" for none): the portal's policies tolerate no taint, and the
        TaintToleration filter refuses NoSchedule and NoExecute ones."""
        return untolerated_taint(self.taints)

    @property
    def cpu_free(self) -> int:
        return max(self.cpu_allocatable - self.cpu_allocated, 0)

    @property
    def memory_free(self) -> int:
        return max(self.memory_allocatable - self.memory_allocated, 0)

    @property
    def gpu_free(self) -> int:
        return max(self.gpu_allocatable - self.gpu_allocated, 0)


class SiteLink(models.Model):
    """A directed network path between two sites, used to estimate data movement."""

    source = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="links_out")
    target = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="links_in")
    bandwidth_mbps = models.FloatField(validators=[MinValueValidator(0.001)])
    cost_per_gb = models.DecimalField(max_digits=10, decimal_places=4, default=0)
    latency_ms = models.FloatField(default=0, validators=[MinValueValidator(0)])
    # False: steps at ``target`` cannot read ``source``'s artifact repository (network, bucket
    # policy), so a step reading an output made at ``source`` is not placed at ``target``.
    artifacts_reachable = models.BooleanField(default=True)
    # What the portal's transfers over this link measured: an exponentially weighted mean
    # (Mbit/s) the planner estimates with instead of ``bandwidth_mbps`` once known.
    observed_mbps = models.FloatField(null=True, blank=True, editable=False)
    observed_transfers = models.PositiveIntegerField(default=0, editable=False)

    class Meta:
        ordering = ["source__name", "target__name"]
        constraints = [
            models.UniqueConstraint(fields=["source", "target"], name="sitelink_unique_pair"),
            models.CheckConstraint(
                condition=~models.Q(source=models.F("target")), name="sitelink_not_self"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.source} → {self.target}"


class Dataset(models.Model):
    """A registered input dataset. ``residency`` lists the regions its data may be read in
    (empty: anywhere); it binds every unit that reads the dataset."""

    name = models.CharField(max_length=253, unique=True)
    uri_prefix = models.CharField(max_length=1024, blank=True)
    bytes = models.BigIntegerField(default=0, validators=[MinValueValidator(0)])
    format = models.CharField(max_length=63, blank=True)
    residency = models.JSONField(default=list, blank=True)
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="datasets", null=True, blank=True
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class DatasetReplica(models.Model):
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="replicas")
    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="replicas")
    uri = models.CharField(max_length=1024, blank=True)
    bytes = models.BigIntegerField(default=0, validators=[MinValueValidator(0)])
    state = models.CharField(max_length=8, choices=ReplicaState.choices, default=ReplicaState.READY)

    class Meta:
        ordering = ["dataset__name", "site__name"]
        constraints = [
            models.UniqueConstraint(fields=["dataset", "site"], name="replica_unique_site")
        ]

    def __str__(self) -> str:
        return f"{self.dataset} @ {self.site}"
