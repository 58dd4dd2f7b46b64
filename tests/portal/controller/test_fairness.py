"""Fairness between projects: a big run's further turns go through its project's order, one
project's continuation at a time, and they go to the broker behind what a user waits on; what a
user waits on (a run's first advance, an advance because a unit ended) goes through its
project's prompt lane, a few at a time per project. Redis (``REDIS_URL``) and PostgreSQL, no
worker."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest

from portal import tasks
from portal.controller import enqueue, workqueue
from portal.controller.workqueue import claims, fairness
from portal.controller.workqueue.fairness import Turn

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
    prompt, bulk = "celery", f"celery{sep}{enqueue.BULK}"
    before = client.llen(prompt), client.llen(bulk)
    # Run A is in no project (no such run): its lane is project 0's, left as it was found.
    lane = [k % fairness.NO_PROJECT for k in (fairness.PROMPT_WAITING, fairness.PROMPT_SLOTS)]
    for key in lane:
        client.zrem(key, A)
    claims.started(A)
    workqueue.add(A)
    workqueue.turns_enqueue([(B, B)])
    tasks.resync.apply_async()
    assert (client.llen(prompt), client.llen(bulk)) == (before[0] + 1, before[1] + 2)
    claims.started(A)
    for key in lane:
        client.zrem(key, A)


# -- the prompt lane: a run's first advance and its unit-end advances, per project -------------
R_MANY = range(870001, 870051)  # fifty small runs of project A
R_B = 860001  # project B's one-step run


@pytest.fixture
def lanes(settings: Any) -> Iterator[Any]:
    settings.PORTAL_PROJECT_ADVANCES = 2
    c = claims.redis_client()
    assert c is not None, "these tests need REDIS_URL"
    keys = [k % p for k in (fairness.PROMPT_WAITING, fairness.PROMPT_SLOTS) for p in (A, B)]
    c.delete(*keys)
    c.srem(fairness.PROMPT_PROJECTS, A, B)
    yield c
    c.delete(*keys)
    c.srem(fairness.PROMPT_PROJECTS, A, B)


def test_a_project_holds_at_most_its_slots_of_prompt_advances(lanes: Any) -> None:
    dispatched = [t for r in R_MANY for t in fairness.prompt_request(A, r)]
    assert dispatched == [(A, R_MANY[0]), (A, R_MANY[1])]  # the rest wait in A's own set
    assert fairness.prompt_request(B, R_B) == [(B, R_B)]  # B is not behind A's fifty
    # An advance of A's ends: its slot goes to A's oldest waiting run, not to a newer one.
    assert fairness.prompt_done(A, R_MANY[0]) == [(A, R_MANY[2])]
    assert fairness.prompt_done(A, R_MANY[1]) == [(A, R_MANY[3])]
    assert fairness.prompt_done(A, 999) == []  # not in flight: nothing is handed out twice


def test_a_run_asked_for_while_its_advance_runs_goes_again_after_it(lanes: Any) -> None:
    assert fairness.prompt_request(A, R1) == [(A, R1)]
    # A unit of the run ends while its advance runs: one more advance, but not beside it.
    assert fairness.prompt_request(A, R1) == []
    assert fairness.prompt_request(A, R1) == []  # and not queued twice
    assert fairness.prompt_request(A, R2) == [(A, R2)]  # the second slot is free for others
    assert fairness.prompt_done(A, R1) == [(A, R1)]
    assert fairness.prompt_done(A, R1) == []
    assert fairness.prompt_done(A, R2) == []
    assert A not in {int(p) for p in lanes.smembers(fairness.PROMPT_PROJECTS)}


def test_a_slot_whose_advance_was_lost_expires_and_the_resync_hands_it_on(lanes: Any) -> None:
    assert fairness.prompt_request(A, R1) == [(A, R1)]
    assert fairness.prompt_request(A, R2) == [(A, R2)]
    assert fairness.prompt_request(A, R3) == []
    assert [t for t in fairness.prompt_dispatch_all() if t[0] == A] == []
    lanes.zadd(fairness.PROMPT_SLOTS % A, {str(R1): 1.0})  # its message lost: long expired
    assert [t for t in fairness.prompt_dispatch_all() if t[0] == A] == [(A, R3)]


def test_a_started_advance_holds_its_slot_as_a_lease_renewed_while_it_runs(
    lanes: Any, monkeypatch: Any
) -> None:
    """A worker killed mid-advance stops renewing: its slot is free ``RUNNING_TTL_S`` after
    the last renewal, however long the advance would have lasted."""
    monkeypatch.setattr(fairness, "RENEW_S", 0.05)
    assert fairness.prompt_request(A, R1) == [(A, R1)]
    queued = lanes.zscore(fairness.PROMPT_SLOTS % A, str(R1))

    def expiry() -> float:
        return float(lanes.zscore(fairness.PROMPT_SLOTS % A, str(R1)))

    with fairness.advance_lease(A, R1, prompt=True):
        first = expiry()
        assert first < queued  # shorter than the queue's allowance
        assert first <= time.time() + fairness.RUNNING_TTL_S
        # Renewed while the advance runs: the slot never lapses under a long advance.
        renewed = wait_until(lambda: expiry() > first)
        assert renewed
    last = expiry()
    time.sleep(0.3)  # several renewal periods: nobody renews a lease whose advance ended
    assert expiry() == last
    # The lease lapses (as it does once its worker is killed): the next run gets the slot.
    assert fairness.prompt_request(A, R2) == [(A, R2)]
    assert fairness.prompt_request(A, R3) == []
    lanes.zadd(fairness.PROMPT_SLOTS % A, {str(R1): time.time() - 1})
    assert [t for t in fairness.prompt_dispatch_all() if t[0] == A] == [(A, R3)]
    # A run without a slot is not given one by a lease.
    with fairness.advance_lease(A, R4, prompt=True):
        pass
    assert lanes.zscore(fairness.PROMPT_SLOTS % A, str(R4)) is None


def test_a_running_continuation_holds_its_project_as_a_renewed_lease(
    client: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr(fairness, "RENEW_S", 0.05)
    assert fairness.wait_turn(A, R1) == [(A, R1)]
    assert client.ttl(fairness.HOLDER % A) > fairness.RUNNING_TTL_S  # queued: the long one
    with fairness.advance_lease(A, R1, prompt=False):
        assert 0 < client.ttl(fairness.HOLDER % A) <= fairness.RUNNING_TTL_S
        client.expire(fairness.HOLDER % A, 1)
        assert wait_until(lambda: client.ttl(fairness.HOLDER % A) > 1)  # renewed
        assert fairness.release(A, R1) == []
        time.sleep(0.2)
        # Released while the lease ran: a renewal never brings the holder back.
        assert client.get(fairness.HOLDER % A) is None


def wait_until(predicate: Any, tries: int = 200) -> bool:
    for _ in range(tries):
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_many_small_runs_of_one_project_do_not_delay_another_projects_run(lanes: Any) -> None:
    """The broker's prompt queue as the worker takes it (first in, first out), driven by the
    lane as ``portal.controller.workqueue`` drives it: fifty runs of project A, each ending a
    unit on every
    advance for twenty advances, and project B's one-step run submitted once A's flood is
    queued. B's first advance, and the one after its unit ends, each wait behind at most
    ``PORTAL_PROJECT_ADVANCES`` advances of A, not behind A's thousand."""
    slots = 2
    broker: deque[Turn] = deque()
    left = {r: 20 for r in R_MANY}  # unit-end advances each of A's runs still brings
    for r in R_MANY:  # A's fifty submissions: their first advances
        broker.extend(fairness.prompt_request(A, r))
    broker.extend(fairness.prompt_request(B, R_B))  # B submits its one-step run
    ahead: list[int] = []  # advances of A the worker ran before each of B's
    count = 0
    b_advances = 0
    while broker:
        project, run = broker.popleft()
        if project == B:
            ahead.append(count)
            count = 0
            b_advances += 1
            broker.extend(fairness.prompt_done(B, run))
            if b_advances == 1:  # its one step ends: the unit-end advance
                broker.extend(fairness.prompt_request(B, R_B))
            continue
        count += 1
        broker.extend(fairness.prompt_done(A, run))
        if left[run]:
            left[run] -= 1  # a unit of this run ended meanwhile: it asks again
            broker.extend(fairness.prompt_request(A, run))
    assert b_advances == 2
    assert all(n <= slots for n in ahead), ahead
    assert sum(left.values()) == 0  # A's runs all went on too


def test_advance_requests_reach_the_broker_through_their_projects_lane(
    settings: Any, db: Any
) -> None:
    """What the watcher, the resync and a submission call: ten runs of one project put two
    advances in the broker's prompt queue, and another project's run one more at once."""
    from tests.factories import ProjectFactory, WorkflowRunFactory

    settings.PORTAL_PROJECT_ADVANCES = 2
    client = claims.redis_client()
    assert client is not None
    flood, other = ProjectFactory(), ProjectFactory()
    many = [WorkflowRunFactory(project=flood).pk for _ in range(10)]
    one = WorkflowRunFactory(project=other).pk
    lanes = [
        k % p.pk for k in (fairness.PROMPT_WAITING, fairness.PROMPT_SLOTS) for p in (flood, other)
    ]
    before = client.llen("celery")
    try:
        for run in many:
            workqueue.add(run)
        assert client.llen("celery") == before + 2
        workqueue.add(one)
        assert client.llen("celery") == before + 3
        assert client.zcard(fairness.PROMPT_WAITING % flood.pk) == 8
    finally:
        client.delete(*lanes)
        client.srem(fairness.PROMPT_PROJECTS, flood.pk, other.pk)
        for run in [*many, one]:
            claims.started(run)


# -- a continuation that nobody waits for goes on past its budget ------------------------------
@pytest.fixture
def quiet(client: Any, lanes: Any, fairness_quiet: Any) -> Any:
    """Projects A's and B's keys cleared (``client``, ``lanes``), and nobody else waiting."""
    return fairness_quiet


def test_a_continuation_goes_on_past_its_budget_only_while_nobody_waits(quiet: Any) -> None:
    assert fairness.wait_turn(A, R1) == [(A, R1)]  # A's continuation: run 1's turn
    assert fairness.nobody_waits(A)
    assert fairness.wait_turn(A, R2) == []  # another run of A's waits for a turn
    assert not fairness.nobody_waits(A)
    assert fairness.release(A, R1) == [(A, R2)]
    assert fairness.nobody_waits(A)  # run 2 holds A's turn, nobody else waits
    assert fairness.wait_turn(B, R3) == [(B, R3)]  # another project's turn is queued
    assert not fairness.nobody_waits(A)
    assert fairness.release(B, R3) == []
    assert fairness.nobody_waits(A)
    assert fairness.prompt_request(B, R4) == [(B, R4)]  # a prompt advance of any project
    assert not fairness.nobody_waits(A)
    assert fairness.prompt_done(B, R4) == []
    assert fairness.nobody_waits(A)
