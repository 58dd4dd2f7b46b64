"""Leader election (portal/leader.py) against the sandbox's Leases over HTTP. Each candidate's
clock is its own (client-go's rule: act on time measured locally), here one the test moves,
so no test waits on the wall clock. The Leases are the two the portal's identity may use (the
sandbox is reset before each test)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from portal import leader
from portal.karmada import client, errors
from tests.fixtures_sandbox import SandboxServer
from tests.fixtures_stack import gateway_on


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def karmada(sandbox: SandboxServer, settings: Any) -> Iterator[SandboxServer]:
    with gateway_on(sandbox, settings):
        client.ensure_namespace(client.namespace())
        yield sandbox


def candidate(name: str, identity: str, **timing: float) -> tuple[leader.Elector, Clock]:
    clock = Clock()
    config = leader.ElectionConfig(
        lease_name=name,
        identity=identity,
        lease_duration=timing.get("lease", 15.0),
        renew_deadline=timing.get("renew", 10.0),
        retry_period=timing.get("retry", 2.0),
    )
    return leader.Elector(config, clock=clock), clock


def lease(name: str) -> dict[str, Any]:
    return client.lease_get(name, timeout=5)


def test_the_first_candidate_creates_the_lease_and_leads(karmada: SandboxServer) -> None:
    a, _ = candidate(leader.WATCHER_LEASE, "a")
    assert a.try_acquire_or_renew(timeout=5)
    assert a.leading()
    spec = lease(leader.WATCHER_LEASE)["spec"]
    assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert spec["renewTime"].endswith("Z") and len(spec["renewTime"].split(".")[1]) == 7


def test_a_standby_takes_over_only_after_the_lease_it_observed_expires(
    karmada: SandboxServer,
) -> None:
    a, clock_a = candidate(leader.WATCHER_LEASE, "a")
    b, clock_b = candidate(leader.WATCHER_LEASE, "b")
    assert a.try_acquire_or_renew(timeout=5)
    assert not b.try_acquire_or_renew(timeout=5)  # observed now, on b's clock
    assert b.leader() == "a" and not b.leading()
    clock_a.now += 2
    assert a.try_acquire_or_renew(timeout=5)  # a renews: b observes a new record
    clock_b.now += 14
    assert not b.try_acquire_or_renew(timeout=5)
    # a dies (no more renews): b must wait a whole lease from its last observation.
    clock_b.now += 14.9
    assert not b.try_acquire_or_renew(timeout=5)
    clock_b.now += 0.2
    assert b.try_acquire_or_renew(timeout=5)
    spec = lease(leader.WATCHER_LEASE)["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    assert b.leading()


def test_a_leader_that_cannot_renew_stops_leading_before_anyone_may_take_over(
    karmada: SandboxServer,
) -> None:
    a, clock_a = candidate(leader.BEAT_LEASE, "a")
    assert a.try_acquire_or_renew(timeout=5)
    clock_a.now += 9.9
    assert a.leading()
    clock_a.now += 0.2  # past the renew deadline (10 s) without a renew: below the lease (15 s)
    assert not a.leading()
    # It renews again while nobody took the lease over: it leads again.
    assert a.try_acquire_or_renew(timeout=5)
    assert a.leading()


def test_two_candidates_racing_for_a_free_lease_get_one_winner(karmada: SandboxServer) -> None:
    a, clock_a = candidate(leader.WATCHER_LEASE, "a")
    b, clock_b = candidate(leader.WATCHER_LEASE, "b")
    c, clock_c = candidate(leader.WATCHER_LEASE, "c")
    assert a.try_acquire_or_renew(timeout=5)
    assert not b.try_acquire_or_renew(timeout=5)
    assert not c.try_acquire_or_renew(timeout=5)
    clock_b.now += 16
    clock_c.now += 16
    # Both read the expired lease, then both write it: the second write carries a stale
    # resourceVersion and is refused.
    stale = lease(leader.WATCHER_LEASE)
    assert b.try_acquire_or_renew(timeout=5)
    c._lease = stale  # c read it at the same moment as b
    body = c._body(leader.Record("c", 15, "x", "x", 1))
    with pytest.raises(errors.Conflict):
        client.lease_update(body, timeout=5)
    assert not c.try_acquire_or_renew(timeout=5)
    assert lease(leader.WATCHER_LEASE)["spec"]["holderIdentity"] == "b"
    # ...and a, which was away, no longer leads by its own clock either.
    clock_a.now += 10.1
    assert not a.leading()


def test_a_released_lease_is_taken_at_once(karmada: SandboxServer) -> None:
    a, _ = candidate(leader.BEAT_LEASE, "a")
    b, _ = candidate(leader.BEAT_LEASE, "b")
    assert a.try_acquire_or_renew(timeout=5)
    assert not b.try_acquire_or_renew(timeout=5)
    assert a.release()
    assert not a.leading()
    spec = lease(leader.BEAT_LEASE)["spec"]
    assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1
    assert b.try_acquire_or_renew(timeout=5)
    assert lease(leader.BEAT_LEASE)["spec"]["leaseTransitions"] == 1


@pytest.mark.parametrize(
    ("timing", "message"),
    [
        ({"lease": 10.0, "renew": 10.0}, "greater than the renew deadline"),
        ({"renew": 2.0, "retry": 2.0}, "retry period"),
    ],
)
def test_it_refuses_timings_client_go_refuses(timing: dict[str, float], message: str) -> None:
    with pytest.raises(leader.ElectionConfigError, match=message):
        candidate("x", "a", **timing)
