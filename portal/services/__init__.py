"""Writes for runs (HackSoft style: keyword-only, typed; views, serializers and tasks call
these by name). Status and phase changes go through ``portal.state``, the one writer of run and
unit state.

``parsing``: a submission read and bounded; ``submission``: preview and submit; ``runs``: the
actions on a run; ``catalogue``: the WorkflowTemplate catalogue's writes. The package answers
for every one of them, so callers write ``services.run_submit(...)``.
"""

from portal.services.catalogue import (
    CatalogueRefused,
    workflow_template_create,
    workflow_template_delete,
    workflow_template_update,
)
from portal.services.parsing import default_project, parser_limits, project_for, workflow_parse
from portal.services.runs import (
    STOP_STRATEGIES,
    ActionRefused,
    run_delete,
    run_resubmit,
    run_resume,
    run_retry,
    run_stop,
    run_suspend,
)
from portal.services.submission import (
    NAME_ATTEMPTS,
    run_submit,
    with_units,
    workflow_preview,
)

__all__ = [
    "NAME_ATTEMPTS",
    "STOP_STRATEGIES",
    "ActionRefused",
    "CatalogueRefused",
    "default_project",
    "parser_limits",
    "project_for",
    "run_delete",
    "run_resubmit",
    "run_resume",
    "run_retry",
    "run_stop",
    "run_submit",
    "run_suspend",
    "with_units",
    "workflow_parse",
    "workflow_preview",
    "workflow_template_create",
    "workflow_template_delete",
    "workflow_template_update",
]
