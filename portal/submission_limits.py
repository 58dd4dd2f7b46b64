"""Submissions per project, bounded: what one project makes the control plane spend.

A project may submit ``PORTAL_SUBMISSIONS_PER_PROJECT`` runs per
``PORTAL_SUBMISSION_WINDOW_SECONDS`` (a fixed window, counted in Django's cache: Redis when
``REDIS_URL`` or ``PORTAL_CACHE_URL`` is set, so every web process shares the count, as for
failed logins in ``portal.throttling``). Past it a submission is refused before its body is
parsed, and the API answers 429 with ``Retry-After``: the end of the window. Every submission
that names a project the user may use counts, accepted or refused for its content (parsing
and planning it is the cost bounded here). A run in no project counts against its user.
``0`` turns the limit off.

What runs at once is the quota's business; this bounds how fast runs, and the advances they
bring, arrive from one project (``portal.controller.workqueue.fairness`` orders those advances).
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.core.cache import cache

from placement.parser.errors import FieldError, WorkflowInvalid

PREFIX = "submissions"


class SubmissionsThrottled(WorkflowInvalid):
    """Too many submissions from the project in this window. A ``WorkflowInvalid`` so that a
    caller that only knows those answers 400 with the message rather than failing; the API
    answers 429 with ``Retry-After``."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__([FieldError("project", message)])
        self.retry_after = retry_after


def _subject(user: Any, project: Any) -> tuple[str, str]:
    """The cache key's part and the name a message gives."""
    if project is not None:
        return f"project:{project.pk}", f"project {project.name}"
    return f"user:{getattr(user, 'pk', None)}", "your runs in no project"


def submission_count(*, user: Any, project: Any) -> None:
    """Count one submission of ``project`` (``user``'s, if none); raises
    ``SubmissionsThrottled`` when the window's limit is passed."""
    limit = int(settings.PORTAL_SUBMISSIONS_PER_PROJECT)
    window = max(1, int(settings.PORTAL_SUBMISSION_WINDOW_SECONDS))
    if limit <= 0:
        return
    now = time.time()
    start = int(now // window) * window
    part, name = _subject(user, project)
    key = f"{PREFIX}:{part}:{start}"
    # add() creates the window's counter once; incr() is atomic in Redis, so concurrent web
    # processes never both take the last submission.
    cache.add(key, 0, timeout=window + 5)
    try:
        count = cache.incr(key)
    except ValueError:  # expired between add() and incr(): a new window
        cache.add(key, 1, timeout=window + 5)
        count = 1
    if count > limit:
        wait = max(1, int(start + window - now + 0.999))
        raise SubmissionsThrottled(
            f"{name} reached its limit of {limit} submissions per {window} s "
            f"(PORTAL_SUBMISSIONS_PER_PROJECT); try again in {wait} s",
            retry_after=wait,
        )
