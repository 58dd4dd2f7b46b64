"""Argo-like execution inside one member cluster.

Each propagated Workflow runs as an asyncio task that walks its templates (dag, steps and the
leaf kinds) the way Argo's controller does, writing an Argo-shaped status. Leaves hold their
resource requests against the member's capacity while they run and wait Pending when it is
full.

Modules: `expr` (variables and the `when`/`depends` evaluator), `run` (a Workflow's state and
status), `graph` (steps and DAGs), `leaves` (templates, retries, pods, suspend), `workflow`
(the two together), `member` (a member cluster: capacity and its Workflows).
"""
