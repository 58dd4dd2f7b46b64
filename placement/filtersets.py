"""Filters shared by the rule list in the API (and later the UI)."""

from __future__ import annotations

import django_filters

from placement.choices import Effect, Timing
from placement.models import PlacementRule
from sites.filtersets import BooleanFilter


class PlacementRuleFilterSet(django_filters.FilterSet):
    enabled = BooleanFilter()
    timing = django_filters.ChoiceFilter(choices=Timing.choices)
    effect = django_filters.ChoiceFilter(choices=Effect.choices)

    class Meta:
        model = PlacementRule
        fields = ["enabled", "timing", "effect"]
