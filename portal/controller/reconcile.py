"""Reconciling a run: one turn of its advance (``advance.run_advance``) as the worker runs it,
answering what the workqueue should do next; a run whose reconcile keeps failing ends in Error
with the message instead of being requeued forever."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from portal import state
from portal.choices import ACTIVE_RUN, RunStatus
from portal.controller.advance import Turn, run_advance
from portal.controller.common import event
from portal.controller.workqueue import claims
from portal.karmada import errors

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Result:
    """What a reconcile asks of the workqueue, as controller-runtime's ``reconcile.Result``:
    ``requeue``, the turn ran out with work left (the run's next turn comes in its project's
    order); ``requeue_after``, reconcile it again that many seconds from now. Neither:
    nothing more to do until something changes."""

    requeue: bool = False
    requeue_after: float | None = None


def reconcile(run_id: int) -> Result:
    """One turn of the run's advance, counted: an advance that fails is tried again later,
    and given up (the run in Error) after ``PORTAL_ADVANCE_MAX_FAILURES``. The caller holds
    the run's lock (``portal.controller.worker``)."""
    tries = claims.tries_begin(run_id)
    limit = settings.PORTAL_ADVANCE_MAX_FAILURES
    if tries is not None and tries > limit:
        # The earlier ones never returned (the hard time limit killed them) or failed.
        last = claims.error_last(run_id) or "it did not finish (killed or out of time)"
        _give_up(run_id, f"advancing the run failed {tries - 1} times: {last}")
        return Result()
    try:
        more = run_advance(run_id, Turn())
    except errors.TransientError:
        claims.tries_end(run_id)  # Karmada's fault, not the run's: the task backs off
        raise
    except Exception as exc:
        message = f"{exc.__class__.__name__}: {exc}"
        log.exception("advancing run %s failed (try %s of %s)", run_id, tries, limit)
        claims.error_record(run_id, message)
        if tries is None or tries >= limit:
            _give_up(run_id, f"advancing the run failed {tries or 1} times: {message}")
            return Result()
        return Result(requeue_after=float(5 * tries))
    claims.tries_end(run_id)
    return Result(requeue=bool(more))


def _give_up(run_id: int, message: str) -> None:
    now = timezone.now()
    message = message[:2000]
    if state.run_move(
        run_id, RunStatus.ERROR, from_=ACTIVE_RUN, message=message, finished_at=now, updated_at=now
    ):
        event(run_id, "run-finished", f"Run error: {message}")
    claims.tries_end(run_id)
