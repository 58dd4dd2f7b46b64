"""The admin for a shared fleet: quotas, priority classes, project defaults and prices
(fleet staff; registered from ``portal.admin``)."""

from __future__ import annotations

from django.contrib import admin

from portal.quotas.models import Budget, PriorityClass, ProjectDefaults, Quota, SitePrice


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    list_display = (
        "project",
        "site",
        "cpu_millicores",
        "memory_bytes",
        "gpus",
        "borrow_cpu_millicores",
        "borrow_memory_bytes",
        "borrow_gpus",
    )
    list_filter = ("site", "project")


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
