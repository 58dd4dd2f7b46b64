"""Running a run: create step workflows on Karmada, read their state back, move the DAG on.

* ``steps``: building step workflows and creating them;
* ``advance``: moving a run on (dependencies, withParam, the exit handler, its status);
* ``bindings``: folding ResourceBindings into units (site, phase, outputs);
* ``sync``: Clusters into Sites, policies and the webhook's registration on Karmada;
* ``failover``: units at lost sites placed again, runs nothing would move on;
* ``lifecycle``: finished and superseded step workflows deleted on karmada-apiserver.
* ``claims`` and ``turns``: one advance per run at a time, coalesced requests, turns;
* ``fairness``: advances in their project's order (a project's prompt slots, a big run's
  further turns);
* ``vanished``: units whose step workflow disappeared from Karmada, run again or ended.
* ``refusals``: steps Karmada refuses (not scheduled, a Work the member refused): the unit
  says why at once, and is placed again elsewhere after the site's grace.

Every function here is safe to call twice and from several workers at once:

* step workflows have deterministic names, so a repeated create answers AlreadyExists, which is
  checked to be ours and counts as success;
* every state change goes through ``portal.state``: a conditional UPDATE on the row's current
  attempt, allowed by the transition tables, so a late or duplicated message changes nothing;
* no database transaction is held across a Karmada call, so a worker that dies mid-task leaves
  rows as they were and the next delivery (acks_late) or the periodic resync finishes the job.
"""

from portal.execution import claims, fairness, vanished
from portal.execution.advance import run_advance, run_refresh_status
from portal.execution.bindings import Folded, binding_observe, bindings_observe
from portal.execution.common import SiteState, sites_state
from portal.execution.failover import failover_check, stale_runs
from portal.execution.lifecycle import step_workflows_cleanup
from portal.execution.refusals import refusals_replace
from portal.execution.steps import parsed_of, step_workflow_for, submit_unit, upstream_outputs
from portal.execution.sync import (
    cluster_deleted,
    cluster_note,
    cluster_observe,
    policies_sync,
    webhook_configuration,
    webhook_register,
    webhook_url,
)
from portal.execution.turns import AGAIN, CUT, run_advance_turn

__all__ = [
    "AGAIN",
    "CUT",
    "Folded",
    "SiteState",
    "binding_observe",
    "bindings_observe",
    "claims",
    "cluster_deleted",
    "cluster_note",
    "cluster_observe",
    "failover_check",
    "fairness",
    "parsed_of",
    "policies_sync",
    "refusals_replace",
    "run_advance",
    "run_advance_turn",
    "run_refresh_status",
    "sites_state",
    "stale_runs",
    "step_workflow_for",
    "step_workflows_cleanup",
    "submit_unit",
    "upstream_outputs",
    "vanished",
    "webhook_configuration",
    "webhook_register",
    "webhook_url",
]
