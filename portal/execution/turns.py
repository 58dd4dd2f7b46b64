"""An advance as the worker runs it: one per run at a time (``claims``), in turns, and a run
whose advance keeps failing ends in Error with the message instead of being re-queued
forever."""

from __future__ import annotations

import logging

from django.conf import settings
from django.utils import timezone

from portal import state
from portal.choices import ACTIVE_RUN, RunStatus
from portal.execution import claims
from portal.execution.advance import Turn, run_advance
from portal.execution.common import event
from portal.karmada import errors

log = logging.getLogger(__name__)

# What ``run_advance_turn`` answers: None, nothing to do; ``AGAIN``, ask for another advance
# (coalesced, at the tail of the queue); ``CUT``, the turn left work: the run's next turn comes
# in its project's order (``fairness``); a positive number, try again after that many seconds.
AGAIN = 0.0
CUT = -1.0
_LOCKED_RETRY_S = 1.0


def run_advance_turn(run_id: int) -> float | None:
    """One turn of the run's advance, unless another worker advances it right now (then it
    is told to go on after its turn). See ``claims`` for why and how."""
    claims.started(run_id)
    for first in (True, False):
        with claims.run_lock(run_id) as got:
            if got:
                claims.asked_again(run_id)  # this advance reads the newest units: it serves them
                outcome = _advance_counted(run_id)
        if got:
            # A cut turn's next one reads the newest units anyway: it serves a request too.
            if outcome is None and claims.asked_again(run_id):
                return AGAIN
            return outcome
        if first and not claims.ask_again(run_id):
            return _LOCKED_RETRY_S  # nobody to tell: try again a moment later
    # Still locked after asking: the holder looks at the request after it unlocks.
    return None


def _advance_counted(run_id: int) -> float | None:
    tries = claims.tries_begin(run_id)
    limit = settings.PORTAL_ADVANCE_MAX_FAILURES
    if tries is not None and tries > limit:
        # The earlier ones never returned (the hard time limit killed them) or failed.
        last = claims.error_last(run_id) or "it did not finish (killed or out of time)"
        _give_up(run_id, f"advancing the run failed {tries - 1} times: {last}")
        return None
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
            return None
        return float(5 * tries)
    claims.tries_end(run_id)
    return CUT if more else None


def _give_up(run_id: int, message: str) -> None:
    now = timezone.now()
    message = message[:2000]
    if state.run_move(
        run_id, RunStatus.ERROR, from_=ACTIVE_RUN, message=message, finished_at=now, updated_at=now
    ):
        event(run_id, "run-finished", f"Run error: {message}")
    claims.tries_end(run_id)
