"""Putting the controller's work on the broker: the Celery tasks of ``portal.tasks``, named.

The controller sends its tasks by name through the Celery app (the registered task when the
process has loaded ``portal.tasks``, so ``CELERY_TASK_ALWAYS_EAGER`` holds; else the
broker), so it never imports the task module that calls it.

The broker's priorities (Redis: one list per step of kombu's ``priority_steps``, 0 first):
what a user waits on (a submission, a unit that ended, a resume) goes first; a big run's
further turns and the periodic housekeeping, which can take seconds each on a big fleet, come
after it, in their order, so a one-step run does not wait behind the resync's list of every
binding or a fan-out's next turn.
"""

from __future__ import annotations

from typing import Any

from portal.celery import app

PROMPT = 0
BULK = 6

RECONCILE = "portal.tasks.run_advance"


def _send(
    name: str, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None, **options: Any
) -> None:
    app.signature(name, args=args, kwargs=kwargs or {}).apply_async(**options)


def reconcile(run_id: int, *, project: int, prompt: bool = False) -> None:
    """Queue one reconcile of the run holding a slot of its project's: a prompt one
    (``prompt``: a user waits on it) or its project's continuation (a turn after one cut
    short)."""
    if prompt:
        _send(RECONCILE, (run_id,), {"project": project, "prompt": True}, priority=PROMPT)
    else:
        _send(RECONCILE, (run_id,), {"project": project}, priority=BULK)


def reconcile_after(run_id: int, seconds: float) -> None:
    """Queue a reconcile of the run ``seconds`` from now (outside its project's lanes)."""
    _send(RECONCILE, (run_id,), countdown=seconds, priority=PROMPT)


def housekeeping(name: str) -> None:
    """Queue the housekeeping task ``name`` (behind what users wait on)."""
    _send(name, priority=BULK)
