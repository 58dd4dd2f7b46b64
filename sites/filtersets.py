"""Filters shared by the API lists (and later the fleet pages)."""

from __future__ import annotations

from typing import Any

import django_filters
from django import forms
from django.db.models import QuerySet

from sites.models import Dataset, Site


class StrictNullBooleanField(forms.NullBooleanField):
    """``true``/``false`` (or ``1``/``0``); anything else is an error, not "no filter", so a
    typo does not silently return everything."""

    widget = forms.TextInput

    def to_python(self, value: Any) -> bool | None:  # type: ignore[override]
        if value in (None, ""):
            return None
        if str(value).lower() in {"true", "1"}:
            return True
        if str(value).lower() in {"false", "0"}:
            return False
        raise forms.ValidationError("Use true or false.", code="invalid")

    def validate(self, value: Any) -> None:
        pass


class BooleanFilter(django_filters.BooleanFilter):
    field_class = StrictNullBooleanField


class SiteFilterSet(django_filters.FilterSet):
    name = django_filters.CharFilter()
    region = django_filters.CharFilter()
    provider = django_filters.CharFilter()
    ready = BooleanFilter()
    cordoned = BooleanFilter()

    class Meta:
        model = Site
        fields = ["name", "region", "provider", "ready", "cordoned"]


class DatasetFilterSet(django_filters.FilterSet):
    name = django_filters.CharFilter()
    format = django_filters.CharFilter()
    project = django_filters.CharFilter(field_name="project__name", label="Project name")
    site = django_filters.CharFilter(method="filter_site", label="Has a replica at this site")

    class Meta:
        model = Dataset
        fields = ["name", "format", "project", "site"]

    def filter_site(self, queryset: QuerySet[Dataset], name: str, value: str) -> QuerySet[Dataset]:
        return queryset.filter(replicas__site__name=value).distinct()
