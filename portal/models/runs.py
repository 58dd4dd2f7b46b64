"""Runs: what a scientist submitted and the placement units it became."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import models
from django.db.models import Case, Value, When
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce
from django.db.models.lookups import IsNull

from placement import codec
from portal.choices import AUX_KINDS, RunStatus, UnitKind, UnitPhase, UnitTiming
from portal.models.fields import InlineJSONField
from sites.models import Project

if TYPE_CHECKING:
    from placement.parser import Unit
    from placement.planner import Decision


class WorkflowRun(models.Model):
    """One submission of an Argo Workflow. Status transitions: see ``RunStatus``."""

    name = models.CharField(max_length=63, unique=True)
    project = models.ForeignKey(
        Project, on_delete=models.PROTECT, null=True, blank=True, related_name="runs"
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="runs"
    )
    manifest = models.JSONField()
    arguments = models.JSONField(default=dict, blank=True)
    # What the parser resolved once at submission, so later steps need not parse again:
    # ``{"templates": {key: template}, "parameters": {name: value}, "entrypoint", "on_exit"}``.
    compiled = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=RunStatus.choices, default=RunStatus.PENDING)
    message = models.TextField(blank=True)
    resubmitted_from = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="resubmissions"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status", "updated_at"])]

    def __str__(self) -> str:
        return self.name

    # A light read (``selectors.runs.runs_listed_light``) leaves ``compiled`` unread and gives
    # what the run page needs of it as ``light_*`` attributes.

    @property
    def suspended(self) -> bool:
        """Held by the workflow's ``spec.suspend`` until resumed (``argo resume`` clears it)."""
        light = self.__dict__.get("light_suspend")
        if light is not None:
            return bool(light)
        return ((self.compiled or {}).get("spec") or {}).get("suspend") is True

    @property
    def suspend_templates(self) -> frozenset[str]:
        """The keys of the run's templates that are (Argo) ``suspend`` ones: a step running
        one waits on approval."""
        if "light_suspend_templates" in self.__dict__:
            found = self.__dict__["light_suspend_templates"] or []
        else:
            templates = (self.compiled or {}).get("templates") or {}
            found = [k for k, t in templates.items() if isinstance(t, dict) and "suspend" in t]
        return frozenset(str(k) for k in found)

    @property
    def waits_on_approval(self) -> bool:
        """Whether a step of the run may wait on approval (a template is a ``suspend`` one)."""
        return bool(self.suspend_templates)

    @property
    def priority_class(self) -> dict[str, Any]:
        """The priority class the run was submitted with (``{"name", "value"}``; empty: none)."""
        if "light_priority_class" in self.__dict__:
            found = self.__dict__["light_priority_class"]
        else:
            found = (self.compiled or {}).get("priority_class")
        return found if isinstance(found, dict) else {}

    @property
    def priority(self) -> int:
        """``spec.priority`` as the run was compiled: within its project's range."""
        value = ((self.compiled or {}).get("spec") or {}).get("priority")
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    @property
    def is_finished(self) -> bool:
        return self.status in {RunStatus.SUCCEEDED, RunStatus.STOPPED} or (
            self.finished_at is not None
        )


class UnitRun(models.Model):
    """One placement unit of a run; ``attempt`` grows with retries and failovers.

    ``spec`` keeps what the parser and planner produced for the unit (templates, arguments,
    requests, datasets) so later attempts and runtime placement need not parse the manifest
    again; the code reads a unit's state from its columns, never from ``spec``. Phase
    transitions and the sub-state columns (``kind``, ``expanded``, ``shutdown_sent``): see
    ``UnitPhase``.
    """

    run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, related_name="units")
    name = models.CharField(max_length=253)
    slug = models.CharField(max_length=63)
    template = models.CharField(max_length=253)
    position = models.IntegerField(default=0)
    depends = models.TextField(blank=True)
    upstream = models.JSONField(default=list, blank=True)
    when = models.TextField(blank=True)
    timing = models.CharField(max_length=8, choices=UnitTiming.choices, default=UnitTiming.SUBMIT)
    site = models.CharField(max_length=63, blank=True)
    planned_site = models.CharField(max_length=63, blank=True)
    phase = models.CharField(max_length=10, choices=UnitPhase.choices, default=UnitPhase.PENDING)
    attempt = models.PositiveIntegerField(default=1)
    reason = models.TextField(blank=True)
    message = models.TextField(blank=True)
    spec = InlineJSONField(default=dict, blank=True)
    outputs = models.JSONField(default=dict, blank=True)
    workflow_name = models.CharField(max_length=63, blank=True)
    kind = models.CharField(max_length=8, choices=UnitKind.choices, default=UnitKind.TASK)
    # A withParam unit expanded into its items (at least one): a group row whose items carry
    # the work; their names are ``spec["item_names"]``.
    expanded = models.BooleanField(default=False)
    # A stopped run's step workflow was sent its ``spec.shutdown`` (once).
    shutdown_sent = models.BooleanField(default=False)
    # When the portal deleted the finished step workflow on karmada-apiserver (None: not yet).
    workflow_deleted_at = models.DateTimeField(null=True, blank=True)
    # The resourceVersion of the ResourceBinding this unit was last folded from: a watch that
    # lags behind the resync's list delivers older states after it (portal.controller.bindings).
    binding_version = models.CharField(max_length=32, blank=True, default="")
    # Since when Karmada refuses this attempt's step workflow (not scheduled, or the member
    # refused its Work); None while it does not. After the site's grace it is placed again.
    refused_at = models.DateTimeField(null=True, blank=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    # The task of a loop item (withItems, withParam), "" for any other unit: kept by PostgreSQL
    # beside the row, so the run page's counts per task, phase and site read an index, not
    # every unit's spec.
    loop_task = models.GeneratedField(
        expression=Case(
            When(
                IsNull(KT("spec__item_index"), False),
                then=Coalesce(KT("spec__task"), Value(""), output_field=models.TextField()),
            ),
            default=Value(""),
            output_field=models.TextField(),
        ),
        output_field=models.CharField(max_length=253),
        db_persist=True,
    )

    class Meta:
        # By the run's id, not the run (which would join to order by its created_at): newest
        # runs first, as before, and no join on the watcher's and the worker's hot reads.
        ordering = ["-run_id", "position", "id"]
        constraints = [models.UniqueConstraint(fields=["run", "name"], name="unitrun_unique_name")]
        indexes = [
            models.Index(fields=["workflow_name"]),
            models.Index(fields=["site", "phase"]),
            # A run's transfers and exit handler (the serializers, the cleanup): a few rows
            # among a fan-out's thousands of tasks.
            models.Index(
                fields=["run", "kind"],
                condition=models.Q(kind__in=AUX_KINDS),
                name="unitrun_run_aux_kind",
            ),
            # One page of a run's units table, in its order, without sorting the run.
            models.Index(fields=["run", "position", "id"], name="unitrun_run_position"),
            # The run page's counts (portal.live): one pass over the run's entries.
            models.Index(
                fields=["run", "loop_task", "phase", "site", "planned_site"],
                include=["started_at", "finished_at"],
                name="unitrun_live_counts",
            ),
            # The run page's final outputs (``live.live_outputs``): a run's units that have
            # outputs, in its order. Without it each poll of a fan-out scanned every unit to
            # find those (85 ms for 50,000 with none yet; 0.02 ms with it).
            models.Index(
                fields=["run", "position", "id"],
                condition=models.Q(outputs__has_key="parameters")
                | models.Q(outputs__has_key="artifacts")
                | models.Q(outputs__has_key="result"),
                name="unitrun_with_outputs",
            ),
            # (And ``unitrun_global_outputs``, PostgreSQL's only: migration 0021.)
        ]

    def __str__(self) -> str:
        return f"{self.run.name}/{self.name}"

    def attempt_record(self, *, ended: str, why: str) -> dict[str, Any]:
        """What an event keeps of an attempt that ends for good (failover, retry): the row is
        reused by the next attempt, so this is the attempt's only record (the step panel, the
        graph and the timeline show it)."""
        return {
            "attempt": self.attempt,
            "site": self.site,
            "workflow": self.workflow_name,
            "phase": self.phase,
            "ended": ended,
            "why": why,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "message": self.message,
        }

    @property
    def item_index(self) -> int | None:
        value = (self.spec or {}).get("item_index")
        return value if isinstance(value, int) else None

    @property
    def item_names(self) -> list[str]:
        """The items an expanded unit became (``expanded``), by name."""
        return [str(n) for n in (self.spec or {}).get("item_names") or ()]

    @property
    def task(self) -> str:
        return str((self.spec or {}).get("task") or self.name)

    # The columns a planned unit sets (``plan_row``); the others keep their defaults.
    PLAN_COLUMNS = (
        "run_id",
        "name",
        "slug",
        "template",
        "position",
        "depends",
        "upstream",
        "when",
        "timing",
        "site",
        "planned_site",
        "reason",
        "spec",
        "kind",
    )

    @staticmethod
    def plan_row(run_id: int, unit: Unit, decision: Decision, *, position: int) -> tuple[Any, ...]:
        """The values of ``PLAN_COLUMNS`` for the parser's ``Unit`` placed by the planner's
        ``Decision`` (a submission's units, written as rows: ``portal.bulk.create_rows``)."""
        return (
            run_id,
            unit.name,
            unit.slug,
            unit.template,
            position,
            unit.depends,
            list(unit.upstream),
            unit.when or "",
            decision.timing,
            decision.site or "",
            decision.site or decision.runtime_hint or "",
            decision.reason,
            codec.unit_to_dict(unit),
            unit.kind,
        )

    @classmethod
    def from_plan(
        cls, run: WorkflowRun, unit: Unit, decision: Decision, *, position: int
    ) -> UnitRun:
        """An unsaved unit of ``run`` (the items a withParam expands into)."""
        row = cls.plan_row(run.pk, unit, decision, position=position)
        return cls(run=run, **dict(zip(cls.PLAN_COLUMNS[1:], row[1:], strict=True)))
