"""Runs in the admin: read-only history for operators and staff (no add, change or delete).

Runs change only through ``portal.services``; the admin is a window on them. Everyone with the
view permission (the ``operators`` group has it) sees every run: a site operator needs to know
what ran at, or was kept from, their site.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from portal.models import (
    ApiToken,
    FleetLock,
    PlacementDecision,
    RunEvent,
    UnitRun,
    WorkflowRun,
    WorkflowTemplate,
)


class ReadOnlyMixin:
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class UnitRunInline(ReadOnlyMixin, admin.TabularInline):
    model = UnitRun
    extra = 0
    show_change_link = True
    fields = ("name", "template", "timing", "site", "phase", "attempt", "reason", "finished_at")
    readonly_fields = fields


class PlacementDecisionInline(ReadOnlyMixin, admin.TabularInline):
    model = PlacementDecision
    fk_name = "run"
    extra = 0
    show_change_link = True
    fields = ("unit", "attempt", "source", "timing", "site", "reason", "created_at")
    readonly_fields = fields


@admin.register(WorkflowRun)
class WorkflowRunAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("name", "project", "owner", "status", "created_at", "finished_at")
    list_filter = ("status", "project")
    search_fields = ("name", "owner__username")
    list_select_related = ("project", "owner")
    date_hierarchy = "created_at"
    inlines = (UnitRunInline, PlacementDecisionInline)


@admin.register(UnitRun)
class UnitRunAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("__str__", "site", "phase", "timing", "attempt", "started_at", "finished_at")
    list_filter = ("phase", "timing", "site")
    search_fields = ("name", "run__name", "workflow_name")
    list_select_related = ("run",)


@admin.register(PlacementDecision)
class PlacementDecisionAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("__str__", "source", "timing", "site", "attempt", "created_at")
    list_filter = ("source", "timing", "site")
    search_fields = ("workflow_name", "run__name", "reason")
    list_select_related = ("run", "unit")


@admin.register(RunEvent)
class RunEventAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("created_at", "run", "unit", "kind", "message")
    list_filter = ("kind",)
    search_fields = ("run__name", "message")
    list_select_related = ("run", "unit")


@admin.register(WorkflowTemplate)
class WorkflowTemplateAdmin(admin.ModelAdmin):
    """The catalogue; staff with the model permissions curate it, operators view it."""

    list_display = ("name", "project", "created_at")
    list_filter = ("project",)
    search_fields = ("name",)


@admin.register(FleetLock)
class FleetLockAdmin(admin.ModelAdmin):
    """Locks runs of every project share; any other lock is its project's own. Staff with the
    model permissions declare them."""

    list_display = ("name", "description", "created_at")
    search_fields = ("name", "description")


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are made with ``manage.py drf_create_token`` (the key is shown once, there); here
    staff see whose they are and revoke them. The table holds digests, never keys."""

    list_display = ("user", "prefix", "created")
    search_fields = ("user__username", "prefix")
    fields = ("user", "prefix", "created")
    readonly_fields = ("user", "prefix", "created")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# Quotas, priority classes and prices.
from portal.quotas import admin as quotas_admin  # noqa: E402, F401
