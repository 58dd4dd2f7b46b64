from __future__ import annotations

import math
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from placement.models import PlacementRule, validate_rule_fields
from sites.api.serializers import StrictFieldsMixin
from sites.models import Site
from sites.validators import json_problems, problems_detail

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


@extend_schema_field(
    {
        "type": "object",
        "properties": {
            "template": {"type": "string"},
            "task": {"type": "string"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "image": {"type": "string"},
            "project": {"type": "string"},
        },
        "additionalProperties": False,
    }
)
class SelectorField(serializers.JSONField):
    pass


@extend_schema_field(
    {
        "type": "object",
        "properties": {
            "sites": {"type": "array", "items": {"type": "string"}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "capabilities": {"type": "array", "items": {"type": "string"}},
        },
        "additionalProperties": True,
    }
)
class ParametersField(serializers.JSONField):
    pass


class PlacementRuleSerializer(StrictFieldsMixin, serializers.ModelSerializer[PlacementRule]):
    """A placement rule; see ``PlacementRule`` for what selector, effect and parameters mean.

    The sites named by ``pin`` and ``exclude`` (``parameters.sites``) must exist.
    """

    order = serializers.IntegerField(min_value=INT32_MIN, max_value=INT32_MAX, required=False)
    weight = serializers.FloatField(required=False)
    selector = SelectorField(required=False)
    parameters = ParametersField(required=False)

    class Meta:
        model = PlacementRule
        fields = [
            "id",
            "name",
            "order",
            "enabled",
            "description",
            "selector",
            "timing",
            "effect",
            "parameters",
            "weight",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "created_at", "updated_at"]

    def validate_weight(self, value: float) -> float:
        if not math.isfinite(value):
            raise serializers.ValidationError("Must be a finite number.")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        def current(field: str, default: Any) -> Any:
            if field in attrs:
                return attrs[field]
            return getattr(self.instance, field) if self.instance is not None else default

        selector = current("selector", {})
        effect = current("effect", "")
        parameters = current("parameters", {})
        detail: dict[str, list[str]] = {}
        for field in ("selector", "parameters"):
            if field in attrs:
                detail.update(problems_detail(field, json_problems(attrs[field])))
        if detail:
            raise serializers.ValidationError(detail)
        detail.update(validate_rule_fields(selector, effect, parameters))
        if not detail and isinstance(parameters.get("sites"), list):
            names = parameters["sites"]
            known = set(Site.objects.filter(name__in=names).values_list("name", flat=True))
            for index, name in enumerate(names):
                if name not in known:
                    detail[f"parameters.sites[{index}]"] = [f"Unknown site '{name}'."]
        if detail:
            raise serializers.ValidationError(detail)
        return attrs
