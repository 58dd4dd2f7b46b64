from __future__ import annotations

from typing import Any

from rest_framework import serializers

from portal.choices import UnitTiming
from portal.models import PlacementDecision, RunEvent, UnitRun, WorkflowRun


class UnitRunSerializer(serializers.ModelSerializer[UnitRun]):
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


class WorkflowRunSerializer(serializers.ModelSerializer[WorkflowRun]):
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


class PreviewSerializer(serializers.Serializer[dict[str, Any]]):
    units = PreviewUnitSerializer(many=True)
