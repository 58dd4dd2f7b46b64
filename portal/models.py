"""Runs: what a scientist submitted, the placement units it became, and what happened to them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Case, Value, When
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce
from django.db.models.lookups import IsNull
from django.utils import timezone

from placement import codec
from portal.choices import DecisionSource, RunStatus, UnitPhase, UnitTiming
from sites.models import Project

if TYPE_CHECKING:
    from placement.parser import Unit
    from placement.planner import Decision

# Rows per INSERT when bulk-inserting models with an InlineJSONField: each statement stays a
# few hundred KB, and under PostgreSQL's 65,535 bind parameters should server-side binding
# ever be turned on (Django's client-side binding, the default, has no such limit).
BULK_ROWS = 500


class InlineJSONField(models.JSONField):
    """A JSONField whose bulk inserts are written as VALUES rows, not UNNEST arrays.

    On PostgreSQL, Django 5.2 bulk-inserts through ``UNNEST(array, ...)``, which saves
    planning time for thousands of rows; but psycopg escapes every JSON text into the array
    literal in Python, and a submission's few units and decisions paid about 2 ms of the web
    process's CPU for it. Django keeps VALUES for a field that has ``get_placeholder`` (its
    placeholder could depend on the value); this one is the plain ``%s``, as without it."""

    def get_placeholder(self, value: Any, compiler: Any, connection: Any) -> str:
        return "%s"


class WorkflowTemplate(models.Model):
    """The catalogue: Argo WorkflowTemplates that submitted workflows may ``templateRef``.

    A template is a project's (its members write it, its runs resolve it) or fleet-wide
    (``project`` empty: fleet staff write it, every run may resolve it). A name is unique
    within its project and among the fleet-wide ones, as a WorkflowTemplate's name is within
    its namespace in Argo: two projects may each have their own ``eo-tools``, and a run
    resolves its project's before the fleet-wide one, never another project's
    (``portal.catalogue``). A ClusterWorkflowTemplate is always fleet-wide."""

    name = models.CharField(max_length=253)
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, null=True, blank=True, related_name="templates"
    )
    manifest = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "project__name"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "name"], name="portal_workflowtemplate_name_in_project"
            ),
            models.UniqueConstraint(
                fields=["name"],
                condition=models.Q(project__isnull=True),
                name="portal_workflowtemplate_name_fleet_wide",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def kind(self) -> str:
        return str((self.manifest or {}).get("kind") or "WorkflowTemplate")


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

    @property
    def suspended(self) -> bool:
        """Held by the workflow's ``spec.suspend`` until resumed (``argo resume`` clears it)."""
        return ((self.compiled or {}).get("spec") or {}).get("suspend") is True

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
    again. Phase transitions: see ``UnitPhase``.
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
            # One page of a run's units table, in its order, without sorting the run.
            models.Index(fields=["run", "position", "id"], name="unitrun_run_position"),
            # The run page's counts (portal.live): one pass over the run's entries.
            models.Index(
                fields=["run", "loop_task", "phase", "site", "planned_site"],
                include=["started_at", "finished_at"],
                name="unitrun_live_counts",
            ),
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
        )

    @classmethod
    def from_plan(
        cls, run: WorkflowRun, unit: Unit, decision: Decision, *, position: int
    ) -> UnitRun:
        """An unsaved unit of ``run`` (the items a withParam expands into)."""
        row = cls.plan_row(run.pk, unit, decision, position=position)
        return cls(run=run, **dict(zip(cls.PLAN_COLUMNS[1:], row[1:], strict=True)))


class CandidateTable(models.Model):
    """A candidate table that several decisions of one run share.

    The planner gives units with the same rules, data, requests and upstream sites one table;
    a 10,000-item fan-out over 50 sites has about 50 distinct ones, of 11 KB each in JSON.
    Stored once per run and table rather than on each of its 10,000 decisions (110 MB to
    write at submission). Each unit still has its own decision row (issue 17, item 5)."""

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
        # The run page's poll: the newest decision of one run.
        indexes = [models.Index(fields=["run", "id"], name="decision_run_id")]
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


class ApiToken(models.Model):
    """A user's REST API token, stored as its SHA-256 digest only (as GitHub and
    django-rest-knox keep theirs): the key itself is shown once, when it is made
    (``portal.api_tokens``), and a copy of this table gives no usable key. ``prefix`` (the
    key's first characters) tells tokens apart in the admin. One token per user, as DRF's."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_token"
    )
    digest = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8)
    created = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"


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


# The shared fleet's models (issue 32) live in their own module; imported here so that Django
# registers them with this app.
from portal.quotas.models import (  # noqa: E402, F401
    Budget,
    PriorityClass,
    ProjectDefaults,
    Quota,
    SitePrice,
    Workload,
)
