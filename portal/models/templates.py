"""The catalogue of WorkflowTemplates that runs may reference."""

from __future__ import annotations

from django.db import models

from sites.models import Project


class WorkflowTemplate(models.Model):
    """The catalogue: Argo WorkflowTemplates that submitted workflows may ``templateRef``.

    A template is a project's (its members write it, its runs resolve it) or fleet-wide
    (``project`` empty: fleet staff write it, every run may resolve it). A name is unique
    within its project and among the fleet-wide ones, as a WorkflowTemplate's name is within
    its namespace in Argo: two projects may each have their own ``eo-tools``, and a run
    resolves its project's before the fleet-wide one, never another project's
    (``portal.catalogue``). A ClusterWorkflowTemplate is always fleet-wide."""

    name = models.CharField(max_length=253)
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, null=True, blank=True, related_name="templates"
    )
    manifest = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "project__name"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "name"], name="portal_workflowtemplate_name_in_project"
            ),
            models.UniqueConstraint(
                fields=["name"],
                condition=models.Q(project__isnull=True),
                name="portal_workflowtemplate_name_fleet_wide",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def kind(self) -> str:
        return str((self.manifest or {}).get("kind") or "WorkflowTemplate")
