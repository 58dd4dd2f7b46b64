"""Quotas, priority classes, the quota queue and prices.

Imported by ``portal.models`` so that Django registers them with the ``portal`` app."""

from __future__ import annotations

import re
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from sites.models import Project, Site, dns_label


class PriorityClass(models.Model):
    """A named priority, as Kueue's WorkloadPriorityClass: ``value`` orders the quota queue
    (higher first, then submission order). It never preempts a running step."""

    name = models.CharField(max_length=63, unique=True, validators=[dns_label])
    value = models.IntegerField(help_text="higher waits less")
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["-value", "name"]
        verbose_name_plural = "priority classes"

    def __str__(self) -> str:
        return f"{self.name} ({self.value})"


class ProjectDefaults(models.Model):
    """A project's settings for a shared fleet: its default priority class and its weight
    (its share of what is borrowed when several projects borrow at once)."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="fleet_share")
    priority_class = models.ForeignKey(
        PriorityClass, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    weight = models.DecimalField(
        max_digits=8,
        decimal_places=3,
        default=Decimal(1),
        validators=[MinValueValidator(Decimal("0.001"))],
        help_text="share of borrowed quota, relative to other projects (dominant resource)",
    )

    class Meta:
        verbose_name_plural = "project defaults"

    def __str__(self) -> str:
        return self.project.name


class Quota(models.Model):
    """A project's nominal quota at one site, and how much more it may borrow there from what
    the other projects with a quota at that site leave unused (its cohort: every project with
    a quota at the site). A borrowing limit left empty is no limit (Kueue's default); 0 is
    no borrowing. A project without a quota at a site is not limited there.

    A quota names either one ``site`` or a group of sites by ``site_selector``: the sites whose
    labels include every ``key: value`` of it (Karmada's ``labelSelector.matchLabels``). What
    the project holds across the group counts against it; its cohort is every project with a
    quota over the same selector. A unit must fit every quota that covers its site."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="quotas")
    site = models.ForeignKey(
        Site, on_delete=models.CASCADE, related_name="quotas", null=True, blank=True
    )
    site_selector = models.JSONField(
        default=dict,
        blank=True,
        help_text='a group of sites by their labels, e.g. {"tier": "hpc"} (instead of a site)',
    )
    cpu_millicores = models.BigIntegerField(default=0, validators=[MinValueValidator(0)])
    memory_bytes = models.BigIntegerField(default=0, validators=[MinValueValidator(0)])
    gpus = models.IntegerField(default=0, validators=[MinValueValidator(0)])
    borrow_cpu_millicores = models.BigIntegerField(
        null=True, blank=True, validators=[MinValueValidator(0)]
    )
    borrow_memory_bytes = models.BigIntegerField(
        null=True, blank=True, validators=[MinValueValidator(0)]
    )
    borrow_gpus = models.IntegerField(null=True, blank=True, validators=[MinValueValidator(0)])
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["site__name", "project__name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "site"], name="quota_one_per_project_site"),
            models.UniqueConstraint(
                fields=["project", "site_selector"],
                condition=models.Q(site__isnull=True),
                name="quota_one_per_project_group",
            ),
            models.CheckConstraint(
                condition=(models.Q(site__isnull=False) & models.Q(site_selector={}))
                | (models.Q(site__isnull=True) & ~models.Q(site_selector={})),
                name="quota_site_or_group",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.project} at {self.where}"

    def clean(self) -> None:
        """A site or a group, never both nor neither; a group's selector well formed."""
        super().clean()
        if self.site_id is not None and self.site_selector:
            raise ValidationError({"site_selector": "name a site or a group of sites, not both"})
        if self.site_id is None and not self.site_selector:
            raise ValidationError({"site": "name a site, or a group of sites by site_selector"})
        if self.site_id is None:
            why = selector_error(self.site_selector)
            if why:
                raise ValidationError({"site_selector": why})

    @property
    def where(self) -> str:
        """The site's name, or the group as the run page says it (``sites tier=hpc``)."""
        if self.site_id is not None and self.site is not None:
            return self.site.name
        return group_name(self.site_selector)


_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
_LABEL_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def selector_error(selector: object) -> str | None:
    """Why ``selector`` is not a group of sites (None when it is): an object of label keys
    to values, as Kubernetes spells them (``matchLabels``), with at least one."""
    if not isinstance(selector, dict) or not selector:
        return 'must be an object of site labels, e.g. {"tier": "hpc"}'
    for key, value in selector.items():
        prefix, _, name = key.rpartition("/")
        if not _LABEL_NAME.match(name) or (prefix and not _LABEL_PREFIX.match(prefix)):
            return f"{key!r} is not a label key"
        if not isinstance(value, str) or (value and not _LABEL_NAME.match(value)):
            return f"the value of {key!r} is not a label value"
    return None


def group_name(selector: dict[str, str]) -> str:
    return "sites " + ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


def selects(selector: dict[str, str], labels: object) -> bool:
    """Whether a site with ``labels`` is in the group ``selector`` names."""
    have = labels if isinstance(labels, dict) else {}
    return bool(selector) and all(have.get(k) == v for k, v in selector.items())


class Workload(models.Model):
    """One attempt of a unit in the quota queue (Kueue's Workload): what it asks for at which
    site, and whether it was admitted. A queued one (``admitted_at`` empty) is not pushed to
    Karmada; its unit stays Pending and is shown as Queued with ``reason``. An admitted one
    counts against its project's quota at ``site`` while its unit has not ended."""

    unit = models.OneToOneField("portal.UnitRun", on_delete=models.CASCADE, related_name="workload")
    run = models.ForeignKey("portal.WorkflowRun", on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    site = models.CharField(max_length=63)
    attempt = models.PositiveIntegerField(default=1)
    cpu_millicores = models.BigIntegerField(default=0)
    memory_bytes = models.BigIntegerField(default=0)
    gpus = models.IntegerField(default=0)
    priority = models.IntegerField(default=0)
    queued_at = models.DateTimeField(default=timezone.now)
    admitted_at = models.DateTimeField(null=True, blank=True)
    # Set once its unit was seen ended and the runs waiting at its site were woken.
    released_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True)
    # A unit placed at run time (``site`` empty until the webhook places it): the sites its
    # quotas let it go to when admitted (it holds its request at each until placed), or the
    # eligible sites it waits for when queued.
    sites = models.JSONField(default=list, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["site", "-priority", "queued_at", "id"],
                condition=models.Q(admitted_at__isnull=True),
                name="workload_queue",
            ),
            models.Index(
                fields=["site", "project"],
                condition=models.Q(admitted_at__isnull=False, released_at__isnull=True),
                name="workload_admitted",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.unit_id}@{self.site}"


class SitePrice(models.Model):
    """What an hour of a site's resources costs (OpenCost's per-resource prices)."""

    site = models.OneToOneField(Site, on_delete=models.CASCADE, related_name="price")
    cpu_hour = models.DecimalField(
        max_digits=12, decimal_places=6, default=Decimal(0), validators=[MinValueValidator(0)]
    )
    memory_gib_hour = models.DecimalField(
        max_digits=12, decimal_places=6, default=Decimal(0), validators=[MinValueValidator(0)]
    )
    gpu_hour = models.DecimalField(
        max_digits=12, decimal_places=6, default=Decimal(0), validators=[MinValueValidator(0)]
    )

    def __str__(self) -> str:
        return f"prices at {self.site}"


class Budget(models.Model):
    """What a project may spend per calendar month (in ``PORTAL_CURRENCY``). At 80 % its new
    runs carry a warning; with ``hard_stop``, a submission whose estimate exceeds what is left
    is refused (400 with the estimate)."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="budget")
    monthly = models.DecimalField(
        max_digits=14, decimal_places=2, validators=[MinValueValidator(Decimal(0))]
    )
    hard_stop = models.BooleanField(default=False, help_text="refuse runs past the budget")

    def __str__(self) -> str:
        return f"budget of {self.project}"
