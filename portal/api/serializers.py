from __future__ import annotations

import copy
from typing import Any

from rest_framework import serializers

from portal.choices import UnitTiming
from portal.models import PlacementDecision, RunEvent, UnitRun, WorkflowRun


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


class UnitRunSerializer(PrototypeFieldsMixin, serializers.ModelSerializer[UnitRun]):
    class Meta:
        model = UnitRun
        fields = [
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
        read_only_fields = fields


class WorkflowRunSerializer(PrototypeFieldsMixin, serializers.ModelSerializer[WorkflowRun]):
    """A run with its units (DESIGN section 9)."""

    project: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    owner = serializers.CharField(source="owner.get_username", read_only=True)
    units = UnitRunSerializer(many=True, read_only=True)
    progress = serializers.SerializerMethodField()

    class Meta:
        model = WorkflowRun
        fields = [
            "id",
            "name",
            "status",
            "project",
            "owner",
            "message",
            "arguments",
            "created_at",
            "started_at",
            "finished_at",
            "progress",
            "units",
        ]
        read_only_fields = fields

    def get_progress(self, run: WorkflowRun) -> dict[str, int]:
        units = list(run.units.all())
        done = sum(1 for u in units if u.phase not in ("Pending", "Running"))
        return {"done": done, "total": len(units)}


class WorkflowRunListSerializer(WorkflowRunSerializer):
    class Meta(WorkflowRunSerializer.Meta):
        fields = [f for f in WorkflowRunSerializer.Meta.fields if f != "units"]
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
    candidates = CandidateSerializer(many=True, read_only=True)

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
    # Only when ``candidates`` is cut to the best rows: the size of the full table.
    candidates_total = serializers.IntegerField(required=False)
    candidates_eligible = serializers.IntegerField(required=False)


class PreviewSerializer(serializers.Serializer[dict[str, Any]]):
    units = PreviewUnitSerializer(many=True)
