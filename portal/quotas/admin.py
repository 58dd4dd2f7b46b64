"""The admin for a shared fleet: quotas, priority classes, project defaults and prices
(fleet staff; registered from ``portal.admin``)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from portal.quotas import scopes, waking
from portal.quotas.models import Budget, PriorityClass, ProjectDefaults, Quota, SitePrice


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    list_display = (
        "project",
        "site",
        "site_selector",
        "cpu_millicores",
        "memory_bytes",
        "gpus",
        "borrow_cpu_millicores",
        "borrow_memory_bytes",
        "borrow_gpus",
    )
    list_filter = ("site", "project")

    def save_model(self, request: HttpRequest, obj: Quota, form: Any, change: bool) -> None:
        before = scopes.quota_sites(Quota.objects.get(pk=obj.pk)) if change else []
        super().save_model(request, obj, form, change)
        waking.quota_changed_at([*before, *scopes.quota_sites(obj)])

    def delete_model(self, request: HttpRequest, obj: Quota) -> None:
        sites = scopes.quota_sites(obj)
        super().delete_model(request, obj)
        waking.quota_changed_at(sites)


@admin.register(PriorityClass)
class PriorityClassAdmin(admin.ModelAdmin):
    list_display = ("name", "value", "description")


@admin.register(ProjectDefaults)
class ProjectDefaultsAdmin(admin.ModelAdmin):
    list_display = ("project", "priority_class", "weight")


@admin.register(SitePrice)
class SitePriceAdmin(admin.ModelAdmin):
    list_display = ("site", "cpu_hour", "memory_gib_hour", "gpu_hour")


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin):
    list_display = ("project", "monthly", "hard_stop")
