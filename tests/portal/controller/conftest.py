"""Fixtures of the controller's tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from portal.controller.workqueue import claims, fairness


@pytest.fixture
def fairness_quiet() -> Iterator[Any]:
    """No project with a run waiting, a turn or a prompt advance: the two sets of projects
    (other tests' leftovers in this Redis database) saved, emptied, and restored after."""
    c = claims.redis_client()
    assert c is not None, "these tests need REDIS_URL"
    keys = (fairness.PROJECTS, fairness.PROMPT_PROJECTS)
    saved = {key: c.smembers(key) for key in keys}
    c.delete(*keys)
    yield c
    c.delete(*keys)
    for key, members in saved.items():
        if members:
            c.sadd(key, *members)
