"""The operators' admin for the inventory.

Who sees what (see ``sites.permissions``):

* Superusers and fleet staff with the model permissions see and edit everything.
* Scoped operators (``is_staff`` members of the ``operators`` group) see and edit only the sites
  they operate (``Site.operators``), the links that touch those sites, and the datasets they can
  see in the API (fleet-wide, their projects', or with a replica at their site); in a dataset they
  manage only the replicas at their own sites. They cannot add or delete sites, nor change who
  operates a site or anything Karmada reports (readiness, capacity, sync).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.db.models import Count, Q, QuerySet
from django.forms import ModelForm
from django.http import HttpRequest
from django.urls import path

from sites import admin_stac, services
from sites.models import SUMMARY_FIELDS, Dataset, DatasetReplica, Project, Site, SiteLink
from sites.permissions import can_write_project_data, is_scoped_operator
from sites.selectors import dataset_list_visible, projects_of, sites_operated_by
from sites.validators import label_map_problems, overrides_problems, region_list_problems

KARMADA_FIELDS = (
    "ready",
    "ready_changed_at",
    "sync_mode",
    *SUMMARY_FIELDS,
    "taints",
    "last_sync",
    "summary_at",
)


# What the Cluster object says (its name, ``spec.region``, ``spec.zone``, ``spec.provider``):
# the sync writes it again from Karmada, so an edit here would be silently reverted.
CLUSTER_FIELDS = ("name", "region", "zone", "provider")
CLUSTER_FIELDS_WHY = (
    "Name, region, zone and provider are the Karmada Cluster's (spec.region, spec.zone, "
    "spec.provider): the next sync writes them again from Karmada, so they are read-only here. "
    "Change them on Karmada (kubectl edit cluster <name> against karmada-apiserver)."
)


def _problems_error(problems: list[tuple[str, str]]) -> forms.ValidationError:
    return forms.ValidationError([f"{path}: {msg}" if path else msg for path, msg in problems])


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ("name", "member_count", "priority_min", "priority_max", "created_at")
    search_fields = ("name", "description")
    filter_horizontal = ("members",)
    fields = ("name", "description", "members", ("priority_min", "priority_max"))

    def get_queryset(self, request: HttpRequest) -> QuerySet[Project]:
        return super().get_queryset(request).annotate(member_total=Count("members"))

    @admin.display(description="members", ordering="member_total")
    def member_count(self, project: Project) -> int:
        return getattr(project, "member_total", 0)


class SiteForm(ModelForm):
    """The admin builds the field list; this adds the API's checks of labels and overrides."""

    def clean_labels(self) -> Any:
        labels = self.cleaned_data["labels"]
        problems = label_map_problems(labels)
        if problems:
            raise _problems_error(problems)
        return labels

    def clean_overrides(self) -> Any:
        overrides = self.cleaned_data["overrides"]
        problems = overrides_problems(overrides)
        if problems:
            raise _problems_error(problems)
        return overrides


@admin.register(Site)
class SiteAdmin(admin.ModelAdmin):
    """Sites; a scoped operator sees only the sites they operate (``get_queryset``) and edits
    only ``cordoned``, ``labels`` and ``overrides``. Cordoning, from the form or the list
    actions, goes through ``sites.services.site_set_cordoned`` so it is logged with who did it."""

    form = SiteForm
    list_display = (
        "name",
        "region",
        "provider",
        "ready",
        "cordoned",
        "cpu",
        "memory",
        "gpus",
        "pods",
        "last_sync",
    )
    list_filter = ("ready", "cordoned", "region", "provider", "sync_mode")
    search_fields = ("name", "region", "zone", "provider")
    filter_horizontal = ("operators",)
    actions = ("cordon", "uncordon")
    fieldsets = (
        (
            "Karmada Cluster",
            {
                "fields": (*CLUSTER_FIELDS, "capabilities"),
                "description": CLUSTER_FIELDS_WHY,
            },
        ),
        (
            "Operation",
            {
                "fields": (
                    "cordoned",
                    "labels",
                    "overrides",
                    "refusal_grace_seconds",
                    "operators",
                )
            },
        ),
        (
            "Reported by Karmada",
            {
                "fields": KARMADA_FIELDS,
                "description": "Read from the Cluster's status at each sync.",
            },
        ),
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        # A site is a Karmada Cluster: it appears when the cluster joins Karmada (the watcher
        # writes the row) and a row added here would be a site no step workflow can reach.
        return False

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        extra = {
            "subtitle": "Sites appear when their cluster joins Karmada (karmadactl join or "
            "register); here you cordon them and set labels and overrides.",
            **(extra_context or {}),
        }
        return super().changelist_view(request, extra)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Site]:
        sites = super().get_queryset(request)
        if is_scoped_operator(request.user):
            sites = sites.filter(operators=request.user)
        return sites

    def get_readonly_fields(self, request: HttpRequest, obj: Site | None = None) -> Any:
        if is_scoped_operator(request.user):
            return (*CLUSTER_FIELDS, "capabilities", "operators", *KARMADA_FIELDS)
        return (*CLUSTER_FIELDS, *KARMADA_FIELDS)

    def construct_change_message(
        self, request: HttpRequest, form: Any, formsets: Any, add: bool = False
    ) -> Any:
        # ``cordoned`` is recorded by the service that flips it (``save_model``), with the
        # same words whichever door it came through; the form's entry names the rest.
        message = super().construct_change_message(request, form, formsets, add)
        for part in message:
            changed = part.get("changed")
            if changed and "fields" in changed:
                changed["fields"] = [f for f in changed["fields"] if f != "Cordoned"]
        return [p for p in message if p.get("changed", {}).get("fields", True)]

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        if not message:
            return None  # only the cordon changed: its entry is already written
        return super().log_change(request, obj, message)

    def save_model(self, request: HttpRequest, obj: Site, form: Any, change: bool) -> None:
        cordoned = obj.cordoned
        if change and "cordoned" in form.changed_data:
            # Save everything else first, then let the service flip the flag and log it.
            obj.cordoned = not cordoned
            super().save_model(request, obj, form, change)
            services.site_set_cordoned(site=obj, cordoned=cordoned, user=request.user)
        else:
            super().save_model(request, obj, form, change)

    def _set_cordoned(self, request: HttpRequest, sites: QuerySet[Site], cordoned: bool) -> None:
        changed = [
            site.name
            for site in sites
            if services.site_set_cordoned(site=site, cordoned=cordoned, user=request.user)
        ]
        verb = "Cordoned" if cordoned else "Uncordoned"
        if changed:
            self.message_user(request, f"{verb}: {', '.join(changed)}.", messages.SUCCESS)
        else:
            self.message_user(request, f"Nothing to do: already {verb.lower()}.", messages.INFO)

    @admin.action(description="Cordon: no new placements", permissions=["change"])
    def cordon(self, request: HttpRequest, queryset: QuerySet[Site]) -> None:
        self._set_cordoned(request, queryset, True)

    @admin.action(description="Uncordon: accept placements again", permissions=["change"])
    def uncordon(self, request: HttpRequest, queryset: QuerySet[Site]) -> None:
        self._set_cordoned(request, queryset, False)

    @admin.display(description="CPU free / total (cores)")
    def cpu(self, site: Site) -> str:
        return f"{site.cpu_free / 1000:g} / {site.cpu_allocatable / 1000:g}"

    @admin.display(description="memory free / total (GiB)")
    def memory(self, site: Site) -> str:
        gib = 2**30
        return f"{site.memory_free / gib:.1f} / {site.memory_allocatable / gib:.1f}"

    @admin.display(description="GPUs free / total")
    def gpus(self, site: Site) -> str:
        return f"{site.gpu_free} / {site.gpu_allocatable}"

    @admin.display(description="pods used / total")
    def pods(self, site: Site) -> str:
        return f"{site.pods_allocated} / {site.pods_allocatable}"


class SiteLinkForm(ModelForm):
    """For a scoped operator, a link must start or end at one of their sites."""

    operated: QuerySet[Site] | None = None

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        source, target = cleaned.get("source"), cleaned.get("target")
        if (
            self.operated is not None
            and source
            and target
            and not self.operated.filter(pk__in=[source.pk, target.pk]).exists()
        ):
            raise forms.ValidationError("A link must start or end at a site you operate.")
        return cleaned


@admin.register(SiteLink)
class SiteLinkAdmin(admin.ModelAdmin):
    """Links; a scoped operator sees and edits the links that start or end at their sites."""

    form = SiteLinkForm
    list_display = ("source", "target", "bandwidth_mbps", "cost_per_gb", "latency_ms")
    list_filter = ("source", "target")
    list_select_related = ("source", "target")
    search_fields = ("source__name", "target__name")

    def save_model(self, request: HttpRequest, obj: SiteLink, form: Any, change: bool) -> None:
        with transaction.atomic():
            services.operator_change.changing()
            super().save_model(request, obj, form, change)
            services.operator_change.changed(request.user, "admin")

    def delete_model(self, request: HttpRequest, obj: SiteLink) -> None:
        with transaction.atomic():
            services.operator_change.changing()
            super().delete_model(request, obj)
            services.operator_change.changed(request.user, "admin")

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[SiteLink]) -> None:
        with transaction.atomic():
            services.operator_change.changing()
            super().delete_queryset(request, queryset)
            services.operator_change.changed(request.user, "admin")

    def get_queryset(self, request: HttpRequest) -> QuerySet[SiteLink]:
        links = super().get_queryset(request)
        if is_scoped_operator(request.user):
            links = links.filter(
                Q(source__operators=request.user) | Q(target__operators=request.user)
            ).distinct()
        return links

    def get_form(
        self, request: HttpRequest, obj: SiteLink | None = None, change: bool = False, **kwargs: Any
    ) -> type[ModelForm]:
        form = super().get_form(request, obj, change, **kwargs)
        if is_scoped_operator(request.user):
            form = type(
                "ScopedSiteLinkForm", (form,), {"operated": sites_operated_by(request.user)}
            )
        return form


class ReplicaInline(admin.TabularInline):
    """A scoped operator sees and manages only the replicas at their own sites."""

    model = DatasetReplica
    extra = 0
    fields = ("site", "uri", "bytes", "state")

    def get_queryset(self, request: HttpRequest) -> QuerySet[DatasetReplica]:
        replicas = super().get_queryset(request).select_related("site")
        if is_scoped_operator(request.user):
            replicas = replicas.filter(site__operators=request.user)
        return replicas

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "site" and is_scoped_operator(request.user):
            kwargs["queryset"] = sites_operated_by(request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class DatasetForm(ModelForm):
    # Set by DatasetAdmin.get_form for a scoped operator: they register datasets only in
    # their own projects, as in the API.
    require_project = False

    def clean_project(self) -> Project | None:
        project: Project | None = self.cleaned_data.get("project")
        if self.require_project and project is None:
            raise forms.ValidationError("Only fleet staff may register fleet-wide datasets.")
        return project

    def clean_residency(self) -> Any:
        residency = self.cleaned_data["residency"]
        problems = region_list_problems(residency)
        if problems:
            raise _problems_error(problems)
        return residency


DATASET_FIELDS = ("name", "project", "uri_prefix", "bytes", "format", "residency")


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    """Datasets with their replicas inline.

    A scoped operator sees the datasets the API shows them
    (``sites.selectors.dataset_list_visible``: fleet-wide, their projects', or with a replica at
    their sites) and manages the copies at their own sites. The dataset's own fields are theirs
    to change only when they may write it in the API too (a member of its project); new datasets
    they register must belong to one of their projects.
    """

    form = DatasetForm
    inlines = (ReplicaInline,)
    list_display = ("name", "project", "format", "size", "replica_sites", "residency_regions")
    list_filter = ("format", "project")
    search_fields = ("name", "uri_prefix")
    list_select_related = ("project",)

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view(lambda request: admin_stac.import_view(self, request))
        return [
            path("import-stac/", view, name="sites_dataset_import_stac"),
            *super().get_urls(),
        ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Dataset]:
        if is_scoped_operator(request.user):
            return dataset_list_visible(request.user)
        return super().get_queryset(request).prefetch_related("replicas__site")

    def get_readonly_fields(self, request: HttpRequest, obj: Dataset | None = None) -> Any:
        if (
            obj is not None
            and is_scoped_operator(request.user)
            and not can_write_project_data(request.user, obj.project)
        ):
            return DATASET_FIELDS
        return ()

    def get_form(
        self, request: HttpRequest, obj: Dataset | None = None, change: bool = False, **kwargs: Any
    ) -> type[ModelForm]:
        form = super().get_form(request, obj, change, **kwargs)
        if is_scoped_operator(request.user):
            form = type("ScopedDatasetForm", (form,), {"require_project": True})
        return form

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "project" and is_scoped_operator(request.user):
            kwargs["queryset"] = projects_of(request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    @admin.display(description="size (GiB)", ordering="bytes")
    def size(self, dataset: Dataset) -> str:
        return f"{dataset.bytes / 2**30:.1f}"

    @admin.display(description="replicas at")
    def replica_sites(self, dataset: Dataset) -> str:
        return ", ".join(replica.site.name for replica in dataset.replicas.all()) or "-"

    @admin.display(description="residency")
    def residency_regions(self, dataset: Dataset) -> str:
        return ", ".join(dataset.residency) if dataset.residency else "anywhere"
