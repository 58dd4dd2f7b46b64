"""Fixtures shared by the portal's test modules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from portal.admission import decide
from portal.admission import queue as decision_queue
from tests.portal.admission.helpers import TOKEN, D


@pytest.fixture
def webhook_on_empty_redis(settings: Any) -> Iterator[None]:
    """The webhook's settings (a budget no busy machine overruns), an empty Redis database
    (no queued decision nor held reservation of an earlier test) and no cached snapshot: for
    the modules that call the webhook and the worker's deciders side by side."""
    settings.PORTAL_WEBHOOK_TOKEN = TOKEN
    settings.PORTAL_LABEL_DOMAIN = D
    settings.KARMADA_NAMESPACE = "portal"
    settings.PORTAL_WEBHOOK_BUDGET_MS = 5000
    client = decision_queue.queue_client()
    assert client is not None, "these tests run with the queue (REDIS_URL)"
    client.flushdb()
    decide.snapshot_clear()
    yield
    decide.snapshot_clear()
