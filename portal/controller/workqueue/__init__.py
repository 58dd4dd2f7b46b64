"""The controller's workqueue: one item per run, as a Kubernetes controller's workqueue holds
one key per object.

* ``add``: a request to reconcile a run. Requests are coalesced (``claims``: at most one
  reconcile queued per run; a request while one waits is folded into it) and go through the
  run's project's prompt lane (``fairness``), so a project's many runs do not queue ahead of
  another project's.
* ``lease`` and ``release``: the slot a reconcile holds in its project's lane while it runs,
  handed on when it ends; ``wait_turn``: a run with work left after its turn waits for its
  project's next one; ``add_after``: a retry, that many seconds later.
* ``nobody_waits``: whether a turn may go on past its budget (no run of any project waits
  for a turn or a prompt advance).
* One reconcile per run at a time: ``claims.run_lock``; a request while it runs marks the run
  (``claims.ask_again``) and the holder adds it again when it ends (``portal.controller.worker``).
* Priorities: what a user waits on before continuations and housekeeping
  (``portal.controller.enqueue``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from portal.controller import enqueue
from portal.controller.workqueue import claims, fairness

NO_PROJECT = fairness.NO_PROJECT


def nobody_waits(project: int) -> bool:
    """Whether a turn of ``project``'s may go on past its budget (``fairness.nobody_waits``)."""
    return fairness.nobody_waits(project)


def add(run_id: int) -> None:
    """Ask for the run to be reconciled: one reconcile queued per run at most, through its
    project's prompt lane."""
    if claims.should_enqueue(run_id):
        project = fairness.project_of(run_id)
        prompt_enqueue(fairness.prompt_request(project, run_id))


def prompt_enqueue(turns: list[fairness.Turn]) -> None:
    for project, run_id in turns:
        enqueue.reconcile(run_id, project=project, prompt=True)


def turns_enqueue(turns: list[fairness.Turn]) -> None:
    for project, run_id in turns:
        enqueue.reconcile(run_id, project=project)


@contextlib.contextmanager
def lease(project: int | None, run_id: int, *, prompt: bool) -> Iterator[None]:
    """Hold the reconcile's slot in its project's lane (when it has one) while it runs."""
    if project is None:
        yield
        return
    with fairness.advance_lease(project, run_id, prompt=prompt):
        yield


def release(project: int | None, run_id: int, *, prompt: bool) -> None:
    """The reconcile has ended: its slot (or its project's turn) goes to the next run."""
    if project is not None and prompt:
        prompt_enqueue(fairness.prompt_done(project, run_id))
    elif project is not None:
        turns_enqueue(fairness.release(project, run_id))


def add_after(run_id: int, seconds: float) -> None:
    """Reconcile the run again ``seconds`` from now (a retry: outside its project's lanes)."""
    enqueue.reconcile_after(run_id, seconds)


def wait_turn(run_id: int, project: int | None) -> None:
    """The run has work left after its turn: its next turn comes in its project's order."""
    if project is None:
        project = fairness.project_of(run_id)
    turns_enqueue(fairness.wait_turn(project, run_id))


def waiting_runs() -> set[int]:
    """Runs waiting for their project's turn (the resync leaves them to it)."""
    return fairness.waiting_runs()


def dispatch_lost() -> None:
    """For the resync: turns and prompt slots whose hand-over was lost are given again."""
    turns_enqueue(fairness.dispatch_all())
    prompt_enqueue(fairness.prompt_dispatch_all())
