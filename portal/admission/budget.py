"""The admission's time budget, and the database settings that keep a decision inside it.

Shared by the webhook's decision (``portal.admission.decide``) and its recorder
(``portal.admission.queue``), which records at once when the queue does not answer.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.db import connection


class BudgetExceeded(Exception):
    """The decision ran past ``PORTAL_WEBHOOK_BUDGET_MS``."""


class Deadline:
    """When the admission must have answered: ``check`` raises ``BudgetExceeded`` past it."""

    def __init__(self, started: float, budget_ms: int) -> None:
        self.at = started + budget_ms / 1000.0

    def remaining_ms(self) -> int:
        return int((self.at - time.monotonic()) * 1000)

    def check(self, stage: str) -> None:
        if time.monotonic() > self.at:
            raise BudgetExceeded(f"budget of {settings.PORTAL_WEBHOOK_BUDGET_MS} ms spent {stage}")


def statement_timeout(deadline: Deadline) -> None:
    """Bound every query of this admission by what is left of the budget (PostgreSQL only):
    a slow or locked database must not hold the answer until Karmada's own 3 s timeout.

    The commit does not wait for the WAL flush either: a decision is a record of why, and the
    unit's site is read back from Karmada's binding by the watcher, so losing the last few
    milliseconds of decisions in a database crash loses nothing that matters, while waiting
    for fsync was half of every admission's time."""
    remaining = deadline.remaining_ms()
    if remaining <= 0:
        deadline.check("before reading")
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT set_config('statement_timeout', %s, true), "
                "set_config('synchronous_commit', 'off', true)",
                [str(max(remaining, 1))],
            )


def synchronous_commit_off() -> None:
    """A decision is a record of why (see ``statement_timeout``): no need to wait for fsync."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit = off")
