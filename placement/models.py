"""Placement rules: ordered admin objects that the planner evaluates.

``placement`` builds on ``sites`` and never imports ``portal``: it receives runtime facts (where
upstream units ran) as plain data.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import models

from placement.choices import Effect, Timing

SELECTOR_KEYS = {"template", "task", "labels", "image", "project"}
# What ``parameters`` must carry for each effect; checked in ``clean`` and by the API.
EFFECT_PARAMETERS: dict[str, set[str]] = {
    Effect.PIN: {"sites"},
    Effect.REQUIRE_LABELS: {"labels"},
    Effect.REQUIRE_CAPABILITIES: {"capabilities"},
    Effect.EXCLUDE: {"sites"},
    Effect.PREFER_DATA_LOCALITY: set(),
    Effect.PREFER_FREE_CAPACITY: set(),
}


def validate_rule_fields(selector: Any, effect: str, parameters: Any) -> dict[str, list[str]]:
    """Field-level problems of a rule, shared by the model's ``clean`` and the API serializer."""
    errors: dict[str, list[str]] = {}
    if not isinstance(selector, dict):
        errors["selector"] = ["Must be an object."]
    else:
        unknown = set(selector) - SELECTOR_KEYS
        if unknown:
            errors["selector"] = [
                f"Unknown keys: {', '.join(sorted(unknown))}; "
                f"allowed: {', '.join(sorted(SELECTOR_KEYS))}."
            ]
        elif "labels" in selector and not isinstance(selector["labels"], dict):
            errors["selector"] = ["'labels' must be an object of label: value."]
        elif any(k != "labels" and not isinstance(v, str) for k, v in selector.items()):
            errors["selector"] = ["'template', 'task', 'image' and 'project' must be strings."]
    if not isinstance(parameters, dict):
        errors["parameters"] = ["Must be an object."]
    elif effect in EFFECT_PARAMETERS:
        missing = EFFECT_PARAMETERS[effect] - set(parameters)
        if missing:
            errors["parameters"] = [f"Effect '{effect}' needs: {', '.join(sorted(missing))}."]
        else:
            for key in ("sites", "capabilities"):
                if key in parameters and not (
                    isinstance(parameters[key], list)
                    and all(isinstance(v, str) for v in parameters[key])
                ):
                    errors["parameters"] = [f"'{key}' must be a list of strings."]
            if "labels" in parameters and not isinstance(parameters["labels"], dict):
                errors["parameters"] = ["'labels' must be an object of label: value."]
    return errors


class PlacementRule(models.Model):
    """An ordered placement rule.

    ``selector`` picks units: ``{"template": glob, "task": glob, "labels": {k: v},
    "image": glob, "project": name}`` (all optional, all must match). ``timing`` says whether
    the unit is placed at submission or by the admission webhook at runtime. ``effect`` with
    ``parameters`` says what the rule does: ``pin`` / ``exclude`` take ``{"sites": [...]}``,
    ``require_labels`` takes ``{"labels": {...}}``, ``require_capabilities`` takes
    ``{"capabilities": [...]}``; the two ``prefer_*`` effects add ``weight`` to the score.
    """

    name = models.CharField(max_length=100, unique=True)
    order = models.IntegerField(default=100, help_text="Lower runs first.")
    enabled = models.BooleanField(default=True)
    description = models.TextField(blank=True)
    selector = models.JSONField(default=dict, blank=True)
    timing = models.CharField(max_length=8, choices=Timing.choices, default=Timing.SUBMIT)
    effect = models.CharField(max_length=24, choices=Effect.choices)
    parameters = models.JSONField(default=dict, blank=True)
    weight = models.FloatField(default=1.0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["order", "name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors = validate_rule_fields(self.selector, self.effect, self.parameters)
        if errors:
            raise ValidationError(errors)


# Revisions live in their own module; Django finds models through the app's models module.
from placement.revisions.models import (  # noqa: E402
    PlanningRecord,
    PlanningSnapshot,
    RuleRevision,
)

__all__ = [
    "EFFECT_PARAMETERS",
    "SELECTOR_KEYS",
    "PlacementRule",
    "PlanningRecord",
    "PlanningSnapshot",
    "RuleRevision",
    "validate_rule_fields",
]
