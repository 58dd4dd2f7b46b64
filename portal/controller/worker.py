"""The controller's worker: one item taken off the workqueue and reconciled, as a Kubernetes
controller's ``processNextWorkItem``.

One reconcile per run at a time: a worker that finds the run locked by another tells the
holder to reconcile it once more when it ends (``claims.ask_again``), or, with nobody to tell
(no Redis), tries again a moment later. The holder reads the newest units, so it serves every
request made before it started; a request made while it ran is added again after it.
"""

from __future__ import annotations

from portal.controller import workqueue
from portal.controller.reconcile import Result, reconcile
from portal.controller.workqueue import claims

LOCKED_RETRY_S = 1.0


def process(run_id: int, *, project: int | None = None, prompt: bool = False) -> None:
    """Reconcile the run and queue what it asks for next. ``project``: the reconcile holds
    one of its project's slots until it ends (``workqueue.fairness``), a prompt one
    (``prompt``: a first advance, a unit ended) or a continuation (a turn after one cut
    short)."""
    taken: tuple[Result, bool] | None = None
    try:
        with workqueue.lease(project, run_id, prompt=prompt):
            taken = reconcile_once(run_id)
    finally:
        workqueue.release(project, run_id, prompt=prompt)
    if taken is not None:
        requeue(run_id, project, *taken)


def reconcile_once(run_id: int) -> tuple[Result, bool] | None:
    """The run reconciled under its lock: its ``Result`` and whether a request came while
    it ran (the run is added again). None: another worker holds the run and was told to go
    on after it."""
    claims.started(run_id)
    for first in (True, False):
        with claims.run_lock(run_id) as got:
            if got:
                claims.asked_again(run_id)  # this reconcile reads the newest units: it serves them
                result = reconcile(run_id)
        if got:
            # A cut turn's next one reads the newest units anyway: it serves a request too.
            asked = result == Result() and claims.asked_again(run_id)
            return result, asked
        if first and not claims.ask_again(run_id):
            return Result(requeue_after=LOCKED_RETRY_S), False  # nobody to tell
    # Still locked after asking: the holder looks at the request after it unlocks.
    return None


def requeue(run_id: int, project: int | None, result: Result, asked: bool) -> None:
    if result.requeue:
        workqueue.wait_turn(run_id, project)
    elif result.requeue_after is not None:
        workqueue.add_after(run_id, result.requeue_after)
    elif asked:
        workqueue.add(run_id)
