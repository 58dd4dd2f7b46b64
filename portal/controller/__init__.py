"""The runs controller: the worker's side of running a run, laid out as a Kubernetes controller.

The loop:

* ``workqueue``: one item per run. Requests are coalesced (``workqueue.claims``: one
  reconcile queued and one running per run), go first when a user waits on them, and take
  turns between projects (``workqueue.fairness``).
* ``worker``: an item taken off the queue (the ``run_advance`` Celery task) and reconciled
  under the run's lock; what its ``Result`` asks for is queued next.
* ``reconcile``: ``reconcile(run_id) -> Result``, one turn of the run's advance, counted (a
  run whose reconcile keeps failing ends in Error).
* ``enqueue``: the Celery tasks sent by name, with the broker's priorities.
* ``resync``: the periodic safety net (lost requests, lost sites, refused steps, locks).

What a reconcile does:

* ``advance``: the run moved on, pass after pass, in turns; ``depends`` (``depends`` and
  ``when``), ``expand`` (withParam), ``exit_handler`` (``onExit``), ``status`` (the run's
  status from its units, a stopped run's steps stopped), ``outcome`` (how a run ends, as
  Argo assesses its DAG or steps);
* ``submit``: step workflows created on karmada-apiserver (a runtime unit's fallback site,
  several creates at once, the created ones claimed); ``step_workflow``: building one;
* ``gates``: what a run's spec holds back (parallelism, failFast, deadline, suspend);
  ``locks``: Argo's ``synchronization``, kept by the portal across sites;
* ``failover``: units at lost sites placed again; ``refusals``: steps Karmada refuses;
  ``vanished``: units whose step workflow disappeared; ``transfers``: copies of upstream
  outputs through a relay site; ``resume``: suspended steps resumed;
* ``cleanup``: finished and superseded step workflows deleted (``keep_logs``: their logs
  kept first).

What the informers feed it: ``bindings`` (ResourceBindings folded into units) and ``sync``
(Clusters into Sites; policies and the webhook's registration on Karmada).

Every function here is safe to call twice and from several workers at once:

* step workflows have deterministic names, so a repeated create answers AlreadyExists, which is
  checked to be ours and counts as success;
* every state change goes through ``portal.state``: a conditional UPDATE on the row's current
  attempt, allowed by the transition tables, so a late or duplicated message changes nothing;
* no database transaction is held across a Karmada call, so a worker that dies mid-task leaves
  rows as they were and the next delivery (acks_late) or the periodic resync finishes the job.

The controller never loads the webhook's modules (``portal.admission``'s decision, queue and
budget) nor the Celery task module: it queues its work through ``enqueue``.
"""
