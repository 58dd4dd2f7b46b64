"""A member Workflow run: the node engine plus the leaves."""

from __future__ import annotations

from sandbox.argo.graph import Graph
from sandbox.argo.leaves import Leaves


class WorkflowRun(Leaves, Graph):
    """Walks a Workflow's templates (dag, steps and the leaf kinds) the way Argo's controller
    does, writing an Argo-shaped status."""
