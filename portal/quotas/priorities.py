"""A run's priority class: the one its submission asked for, or its project's default."""

from __future__ import annotations

from typing import Any

from portal.models import WorkflowRun
from portal.quotas.models import PriorityClass, ProjectDefaults


def run_priority(run: WorkflowRun) -> tuple[str, int]:
    """The run's priority class (name, value) as it was submitted; ("", 0) without one."""
    pc = run.priority_class
    return str(pc.get("name") or ""), int(pc.get("value") or 0)


def priority_for(project: Any, name: str | None) -> PriorityClass | None:
    """The class a submission asks for by ``name``, else its project's default, else none.
    Raises ``PriorityClass.DoesNotExist`` for a name that is not a class."""
    if name:
        return PriorityClass.objects.get(name=name)
    if project is None:
        return None
    defaults = ProjectDefaults.objects.filter(project=project).select_related("priority_class")
    found = defaults.first()
    return found.priority_class if found else None
