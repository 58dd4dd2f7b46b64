"""Argo-like execution inside one member cluster.

Each propagated Workflow runs as an asyncio task that walks its templates (dag, steps and the
leaf kinds) the way Argo's controller does, writing an Argo-shaped status. Leaves hold their
resource requests against the member's capacity while they run and wait Pending when it is
full.

Modules: `expr` (variables and the `when`/`depends` evaluator), `run` (a Workflow's state and
status), `workflow` (a run: its state and the parts that run it), `templates` (a template as a
node: inputs, retries), `graph` and `dag` (steps and DAGs), `hooks` (lifecycle hooks, call
arguments), `leaves` (pods and suspend nodes), `pods`, `volumes`, `podfiles`, `repository`
(pods that really run, their volumes and files, the Workflow's artifact repository),
`validate` (what the controller refuses before running), `member` (a member cluster:
capacity and its Workflows).
"""
