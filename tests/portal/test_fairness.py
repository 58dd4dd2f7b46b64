"""Fairness between projects (issue 21, item 4): a big run's further turns go through its
project's order, one project's continuation at a time, and they go to the broker behind what a
user waits on. Redis (``REDIS_URL``) and PostgreSQL, no worker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from portal import tasks
from portal.execution import claims, fairness

A, B = 990001, 990002  # project ids of this test's own (the keys are per project)
R1, R2, R3, R4 = 880001, 880002, 880003, 880004  # run ids no other test uses


@pytest.fixture
def client() -> Iterator[Any]:
    c = claims.redis_client()
    assert c is not None, "these tests need REDIS_URL"
    keys = [k % p for k in (fairness.WAITING, fairness.HOLDER) for p in (A, B)]
    c.delete(*keys)
    c.srem(fairness.PROJECTS, A, B)
    yield c
    c.delete(*keys)
    c.srem(fairness.PROJECTS, A, B)


def test_each_project_has_one_continuation_at_a_time_its_runs_in_turn(client: Any) -> None:
    assert fairness.wait_turn(A, R1) == [(A, R1)]  # the project had none: this run's, now
    assert fairness.wait_turn(A, R2) == []
    assert fairness.wait_turn(A, R3) == []
    assert fairness.wait_turn(B, R4) == [(B, R4)]  # another project is not held behind A
    assert fairness.wait_turn(A, R1) == []  # the holder asking again is not queued twice
    # Run 1's turn ends with work left (the task releases, then asks): behind 2 and 3.
    assert fairness.release(A, R1) == [(A, R2)]
    assert fairness.wait_turn(A, R1) == []
    assert fairness.release(A, R1) == []  # not the holder any more: nothing changes
    assert fairness.release(A, R2) == [(A, R3)]
    # Waiting or holding a queued turn: the resync's stale check leaves both to the order.
    assert fairness.waiting_runs() >= {R1, R3}
    assert fairness.release(A, R3) == [(A, R1)]
    assert fairness.release(A, R1) == []  # nobody waits
    assert A not in {int(p) for p in client.smembers(fairness.PROJECTS)}


def test_a_project_whose_continuation_was_lost_gets_one_from_the_resync(client: Any) -> None:
    assert fairness.wait_turn(A, R1) == [(A, R1)]
    assert fairness.wait_turn(A, R2) == []
    # Other projects' leftovers in this Redis database are theirs: only A's are looked at.
    assert [t for t in fairness.dispatch_all() if t[0] == A] == []  # A has a holder
    client.delete(fairness.HOLDER % A)  # its message lost, the holder expired
    assert [t for t in fairness.dispatch_all() if t[0] == A] == [(A, R2)]
    assert fairness.waiting_runs() & {R1, R2} == {R2}  # the new holder; R1 is gone


def test_continuations_and_housekeeping_queue_behind_what_users_wait_on(
    client: Any, transactional_db: Any
) -> None:
    """The broker's priorities, through kombu's Redis transport as the worker reads them:
    priority 0 is the queue's own list, read first."""
    from portal.celery import app

    with app.connection_for_write() as conn:
        sep = conn.default_channel.sep
    prompt, bulk = "celery", f"celery{sep}{tasks.BULK}"
    before = client.llen(prompt), client.llen(bulk)
    claims.started(A)
    tasks.advance_request(A)
    tasks._turns_enqueue([(B, B)])
    tasks.resync.apply_async()
    assert (client.llen(prompt), client.llen(bulk)) == (before[0] + 1, before[1] + 2)
    claims.started(A)
