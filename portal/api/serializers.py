from __future__ import annotations

import copy
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from portal.choices import UnitTiming
from portal.models import PlacementDecision, RunEvent, UnitRun, WorkflowRun
from portal.outputs import preview
from portal.quotas import overview as quota_overview
from portal.quotas import priorities as quota_priorities
from portal.quotas import usage
from portal.selectors import outputs_summary, run_global_outputs
from portal.selectors.transfers import transfer_measured, unit_is_transfer


class PrototypeFieldsMixin:
    """Builds a ModelSerializer's fields once per class and gives each instance a deep copy.

    ``ModelSerializer.get_fields`` inspects the model and builds every field again for each
    instance (about 0.5 ms here for a run, as much again for its units), and every submission
    answers with one. The fields of these serializers depend on their class alone (no
    ``depth``, nothing taken from the context), so a copy of the first build is the same
    build; a copy is what DRF itself makes of declared fields."""

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        cls = type(self)
        built = cls.__dict__.get("_prototype_fields")
        if built is None:
            built = super().get_fields()  # type: ignore[misc]
            cls._prototype_fields = built  # type: ignore[attr-defined]
        return copy.deepcopy(built)


UNIT_FIELDS = [
    "name",
    "template",
    "depends",
    "site",
    "planned_site",
    "phase",
    "timing",
    "reason",
    "attempt",
    "workflow_name",
    "started_at",
    "finished_at",
    "outputs",
    "message",
]
_TIMES = frozenset({"started_at", "finished_at"})
_INTS = frozenset({"attempt"})
_AS_IS = frozenset({"outputs"})


class UnitRunListSerializer(serializers.ListSerializer[UnitRun]):
    """A run's units as ``UnitRunSerializer`` gives them, without its per-field machinery.

    DRF resolves and converts every field of every unit through field objects (seven calls a
    field): 0.35 s of the 201 answering a 10,000-item fan-out, for plain columns. The fields
    are read-only columns of three kinds, converted as DRF's ``CharField``, ``IntegerField``,
    ``DateTimeField`` and ``JSONField`` convert them (``tests/portal/test_api_runs.py`` holds
    the two to the same output)."""

    def to_representation(self, data: Any) -> list[dict[str, Any]]:
        units = data.all() if hasattr(data, "all") else data
        when = serializers.DateTimeField().to_representation
        preview_chars = int(settings.PORTAL_OUTPUT_PREVIEW_CHARS)
        out = []
        for u in units:
            row: dict[str, Any] = {}
            for name in UNIT_FIELDS:
                value = getattr(u, name)
                if name == "outputs":
                    row[name] = preview(value, preview_chars)
                elif value is None or name in _AS_IS:
                    row[name] = value
                elif name in _TIMES:
                    row[name] = when(value)
                elif name in _INTS:
                    row[name] = int(value)
                else:
                    row[name] = str(value)
            row.update(unit_kind(u))
            out.append(row)
        return out


class UnitRunSerializer(PrototypeFieldsMixin, serializers.ModelSerializer[UnitRun]):
    class Meta:
        model = UnitRun
        list_serializer_class = UnitRunListSerializer
        fields = [*UNIT_FIELDS, "kind", "transfer"]
        read_only_fields = fields

    kind = serializers.SerializerMethodField(
        help_text='"step", or "transfer" for a copy of an upstream output to a relay site'
    )
    transfer = serializers.SerializerMethodField(
        help_text='a transfer unit\'s copy: {"from", "to", "bytes", "seconds", "cost"}; '
        "null for a step"
    )

    def get_kind(self, instance: UnitRun) -> str:
        return str(unit_kind(instance)["kind"])

    @extend_schema_field(
        {
            "type": "object",
            "nullable": True,
            "properties": {
                "from": {"type": "string"},
                "to": {"type": "string"},
                "bytes": {"type": "integer"},
                "seconds": {"type": "number", "nullable": True},
                "cost": {"type": "string"},
            },
        }
    )
    def get_transfer(self, instance: UnitRun) -> dict[str, Any] | None:
        found = unit_kind(instance)["transfer"]
        return found if isinstance(found, dict) else None

    def to_representation(self, instance: UnitRun) -> dict[str, Any]:
        row = super().to_representation(instance)
        row["outputs"] = preview(row.get("outputs"), int(settings.PORTAL_OUTPUT_PREVIEW_CHARS))
        return dict(row)


def unit_kind(unit: UnitRun) -> dict[str, Any]:
    """``kind`` ("step" or "transfer") and, for a transfer, what it moved."""
    if not unit_is_transfer(unit):
        return {"kind": "step", "transfer": None}
    found = transfer_measured(unit)
    return {
        "kind": "transfer",
        "transfer": {k: found[k] for k in ("from", "to", "bytes", "seconds", "cost")},
    }


class AttemptSerializer(serializers.Serializer[Any]):
    number = serializers.IntegerField()
    site = serializers.CharField()
    workflow = serializers.CharField()
    phase = serializers.CharField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    ended = serializers.CharField(
        help_text='"" for the current attempt; "failed over", "retried", "vanished"'
    )
    why = serializers.CharField()


class UnitDetailSerializer(serializers.Serializer[dict[str, Any]]):
    """One unit with every attempt, its inputs and outputs, and the decision that placed it."""

    name = serializers.CharField(source="unit.name")
    slug = serializers.CharField(source="unit.slug")
    template = serializers.CharField(source="unit.template")
    site = serializers.CharField(source="unit.site")
    phase = serializers.CharField(source="unit.phase")
    message = serializers.CharField(source="unit.message")
    timing = serializers.CharField(source="unit.timing")
    reason = serializers.CharField(source="unit.reason")
    attempt = serializers.IntegerField(source="unit.attempt")
    workflow_name = serializers.CharField(source="unit.workflow_name")
    namespace = serializers.CharField()
    started_at = serializers.DateTimeField(source="unit.started_at", allow_null=True)
    finished_at = serializers.DateTimeField(source="unit.finished_at", allow_null=True)
    exit_code = serializers.JSONField(allow_null=True)
    waiting_for = serializers.CharField(help_text="What a pending unit waits for, in words")
    suspended = serializers.BooleanField(help_text="Waiting for approval (resume)")
    inputs = serializers.JSONField()
    outputs = serializers.JSONField()
    attempts = AttemptSerializer(many=True)
    decision = serializers.SerializerMethodField()

    def get_decision(self, detail: dict[str, Any]) -> dict[str, Any] | None:
        d = detail.get("decision")
        return PlacementDecisionSerializer(d).data if d is not None else None

    def to_representation(self, instance: dict[str, Any]) -> dict[str, Any]:
        row = dict(super().to_representation(instance))
        quota_shown([instance["unit"]], [row])
        return row


class WorkflowRunSerializer(PrototypeFieldsMixin, serializers.ModelSerializer[WorkflowRun]):
    """A run with its units (DESIGN section 9)."""

    # null: a run of no project (its owner belongs to none, or to several and named none).
    project: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )
    owner = serializers.CharField(source="owner.get_username", read_only=True)
    units = UnitRunSerializer(many=True, read_only=True)
    progress = serializers.SerializerMethodField()
    outputs = serializers.SerializerMethodField()
    suspended = serializers.BooleanField(
        read_only=True, help_text="Held by spec.suspend until resumed (POST .../resume/)"
    )
    priority = serializers.IntegerField(
        read_only=True,
        help_text="spec.priority within the range the project allows (what orders lock waiters)",
    )

    class Meta:
        model = WorkflowRun
        fields = [
            "id",
            "name",
            "status",
            "suspended",
            "priority",
            "project",
            "owner",
            "message",
            "arguments",
            "created_at",
            "started_at",
            "finished_at",
            "progress",
            "outputs",
            "units",
        ]
        read_only_fields = fields

    def get_outputs(self, run: WorkflowRun) -> dict[str, Any]:
        """The run's global outputs (``globalName``) as Argo reports a workflow's
        ``status.outputs`` (``{"parameters": [{name, value}], "artifacts": [...]}``), and
        ``final``: the outputs of the steps no other step depends on."""
        rows = [
            {"name": u.name, "upstream": u.upstream, "phase": u.phase, "outputs": u.outputs}
            for u in run.units.all()
        ]
        shown = preview(
            run_global_outputs(run).as_argo(), int(settings.PORTAL_OUTPUT_PREVIEW_CHARS)
        )
        return {**shown, "final": outputs_summary(rows)["final"]}

    def get_progress(self, run: WorkflowRun) -> dict[str, int]:
        units = list(run.units.all())
        done = sum(1 for u in units if u.phase not in ("Pending", "Running"))
        return {"done": done, "total": len(units)}

    def to_representation(self, instance: WorkflowRun) -> dict[str, Any]:
        row = dict(super().to_representation(instance))
        # The shared fleet: the run's priority class, and its queued units.
        row["priority_class"] = quota_priorities.run_priority(instance)[0] or None
        if "units" in row:
            quota_shown(list(instance.units.all()), row["units"])
            row["cost"] = usage.run_cost(instance)
        return row


def quota_shown(units: list[UnitRun], rows: list[dict[str, Any]]) -> None:
    """A unit queued for quota shows ``"phase": "Queued"`` and ``"queue": {position, reason}``
    (it is Pending in the database: nothing was pushed to Karmada)."""
    queued = quota_overview.queue_of(units)
    if not queued:
        return
    by_name = {u.name: u.pk for u in units}
    for row in rows:
        entry = queued.get(by_name.get(str(row.get("name")), -1))
        if entry is not None:
            row["phase"] = "Queued"
            row["queue"] = {"position": entry.position, "reason": entry.reason}


@extend_schema_serializer(component_name="WorkflowRunSummary")
class WorkflowRunListSerializer(WorkflowRunSerializer):
    class Meta(WorkflowRunSerializer.Meta):
        fields = [f for f in WorkflowRunSerializer.Meta.fields if f not in ("units", "outputs")]
        read_only_fields = fields


class CandidateSerializer(serializers.Serializer[dict[str, Any]]):
    site = serializers.CharField()
    eligible = serializers.BooleanField()
    why = serializers.CharField()
    score = serializers.FloatField(allow_null=True)
    bytes_to_move = serializers.IntegerField()
    est_transfer_s = serializers.FloatField()


class PlacementDecisionSerializer(serializers.ModelSerializer[PlacementDecision]):
    unit = serializers.CharField(source="unit.name", allow_null=True, read_only=True)
    candidates = CandidateSerializer(many=True, read_only=True, source="candidate_rows")

    class Meta:
        model = PlacementDecision
        fields = [
            "id",
            "unit",
            "attempt",
            "source",
            "timing",
            "site",
            "reason",
            "candidates",
            "workflow_name",
            "created_at",
        ]
        read_only_fields = fields


class RunEventSerializer(serializers.ModelSerializer[RunEvent]):
    unit = serializers.CharField(source="unit.name", allow_null=True, read_only=True)

    class Meta:
        model = RunEvent
        fields = ["id", "kind", "unit", "message", "created_at"]
        read_only_fields = fields


class PreviewUnitSerializer(serializers.Serializer[dict[str, Any]]):
    name = serializers.CharField()
    template = serializers.CharField()
    depends = serializers.CharField(allow_blank=True)
    timing = serializers.ChoiceField(choices=UnitTiming.choices)
    site = serializers.CharField(allow_null=True)
    reason = serializers.CharField(allow_blank=True)
    candidates = CandidateSerializer(many=True)
    pods = serializers.IntegerField(
        allow_null=True,
        help_text="Pods the unit's step workflow can create: its nested loops multiplied (a "
        "loop known only at run time counted as PORTAL_UNKNOWN_LOOP_ITEMS items)",
    )
    # Only when ``candidates`` is cut to the best rows: the size of the full table.
    candidates_total = serializers.IntegerField(required=False)
    candidates_eligible = serializers.IntegerField(required=False)


class StopSerializer(serializers.Serializer[dict[str, Any]]):
    strategy = serializers.ChoiceField(
        choices=["Stop", "Terminate"], required=False, help_text="Stop (default) or Terminate"
    )


class ResumeSerializer(serializers.Serializer[dict[str, Any]]):
    node = serializers.CharField(
        required=False, allow_blank=True, help_text="A unit's name; none: every running step"
    )


class PreviewWarningSerializer(serializers.Serializer[dict[str, Any]]):
    path = serializers.CharField(help_text="The field, as in errors")
    message = serializers.CharField(help_text="What changes across sites or at run time")


class EstimateSerializer(serializers.Serializer[dict[str, Any]]):
    compute = serializers.CharField(help_text="two decimals")
    transfer = serializers.CharField(
        help_text="two decimals: the planned transfers' bytes at their links' cost_per_gb"
    )
    total = serializers.CharField(help_text="compute + transfer, two decimals")
    currency = serializers.CharField()
    steps_without_history = serializers.IntegerField(
        help_text="steps whose template never ran in the project: not counted"
    )


class PreviewTransferSerializer(serializers.Serializer[dict[str, Any]]):
    unit = serializers.CharField(help_text="The transfer unit: <producer>-copy-<relay>")
    producer = serializers.CharField()
    # ``from``, ``via``, ``to`` (Python keywords aside, the JSON names).
    from_ = serializers.CharField(help_text="Where the producer's outputs are")
    via = serializers.CharField(help_text="The relay the copy is made at")
    to = serializers.CharField(help_text="The reader's site, which reads the relay")
    bytes = serializers.IntegerField(help_text="Estimated (declared, else assumed)")
    seconds = serializers.FloatField(help_text="Estimated, from the link's bandwidth")
    cost = serializers.CharField(help_text="From the link's cost_per_gb")

    def get_fields(self) -> dict[str, Any]:
        fields = super().get_fields()
        fields["from"] = fields.pop("from_")
        return fields


class PreviewSerializer(serializers.Serializer[dict[str, Any]]):
    units = PreviewUnitSerializer(many=True)
    estimate = EstimateSerializer(
        required=False,
        help_text="the run's compute cost, from the project's past wall time per template",
    )
    transfers = PreviewTransferSerializer(
        many=True,
        required=False,
        help_text="Copies the plan implies: a unit placed where it cannot read an upstream "
        "output reads a copy made at a relay site",
    )
    warnings = PreviewWarningSerializer(
        many=True, required=False, help_text="Fields whose meaning the split changes"
    )
