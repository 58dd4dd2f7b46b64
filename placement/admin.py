"""Placement rules in the admin, listed in evaluation order.

Editing follows Django's model permissions: superusers and the ``rule editors`` group add, change
and delete rules; operators only view them (the groups are made in
``sites/migrations/0002_operator_groups.py``).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.forms import ModelForm

from placement.models import PlacementRule
from placement.revisions.services import revision_baseline, revision_record_direct
from sites.models import Site
from sites.validators import json_problems


class PlacementRuleForm(ModelForm):
    """Besides the model's own checks (``validate_rule_fields`` in ``clean``), the sites a rule
    pins to or excludes must exist, as in the API."""

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        for field in ("selector", "parameters"):
            problems = json_problems(cleaned.get(field))
            if problems:
                self.add_error(field, [f"{p}: {m}" if p else m for p, m in problems])
        sites = (cleaned.get("parameters") or {}).get("sites")
        if isinstance(sites, list) and all(isinstance(name, str) for name in sites):
            known = set(Site.objects.filter(name__in=sites).values_list("name", flat=True))
            unknown = [name for name in sites if name not in known]
            if unknown:
                self.add_error("parameters", f"Unknown sites: {', '.join(unknown)}.")
        return cleaned


@admin.register(PlacementRule)
class PlacementRuleAdmin(admin.ModelAdmin):
    form = PlacementRuleForm
    list_display = ("name", "order", "enabled", "timing", "effect", "weight", "updated_at")
    list_display_links = ("name",)
    list_editable = ("order", "enabled")
    list_filter = ("enabled", "timing", "effect")
    search_fields = ("name", "description")
    ordering = ("order", "name")
    readonly_fields = ("created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "order", "enabled", "description")}),
        ("What and when", {"fields": ("selector", "timing")}),
        ("Effect", {"fields": ("effect", "parameters", "weight")}),
        ("History", {"fields": ("created_at", "updated_at")}),
    )

    def save_model(self, request: Any, obj: Any, form: Any, change: bool) -> None:
        revision_baseline()  # the configuration before the edit, if none is kept yet
        super().save_model(request, obj, form, change)
        revision_record_direct(user=request.user, source="admin")

    def delete_model(self, request: Any, obj: Any) -> None:
        revision_baseline()  # the configuration before the edit, if none is kept yet
        super().delete_model(request, obj)
        revision_record_direct(user=request.user, source="admin")

    def delete_queryset(self, request: Any, queryset: Any) -> None:
        revision_baseline()  # the configuration before the edit, if none is kept yet
        super().delete_queryset(request, queryset)
        revision_record_direct(user=request.user, source="admin")

    def formfield_for_dbfield(self, db_field: Any, request: Any, **kwargs: Any) -> Any:
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if db_field.name in ("selector", "parameters") and field is not None:
            field.widget = forms.Textarea(attrs={"rows": 4, "cols": 60})
        return field


from placement.revisions import admin as revisions_admin  # noqa: E402,F401 - registers it
