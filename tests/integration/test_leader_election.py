"""Two watchers and two beats on the real stack, electing with a Lease on the sandbox's
karmada-apiserver: the leader killed (SIGKILL) or frozen (SIGSTOP) mid-work, the standby
takes over and nothing is lost, duplicated or sent twice. The stack runs without the worker's
beat, so only the watchers fold what Karmada does (the resync would hide a missing watcher).

The election's timing is the stack's (lease 6 s, renew deadline 4 s, retry 1 s: shorter than
production's 10, 7 and 2 s, the same rules); each takeover's time, from the kill to the Lease
naming the standby, is printed (``-s``)."""

from __future__ import annotations

import collections
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db.models import Count

from portal import leader, services
from portal.karmada import client, errors, lists, resources
from portal.models import PlacementDecision, RunEvent, UnitRun, WorkflowRun
from tests.fixtures_stack import Stack, wait_for
from tests.integration.test_fanout import fan_out_workflow
from tests.stack import Process, logged, watcher_argv

pytestmark = [pytest.mark.integration]

ITEMS = 200
MANAGED = "portal.multisite.io/managed=true"
SENT = "Sending due task portal-resync"


def _lease(name: str) -> dict[str, Any]:
    return client.lease_get(name, timeout=5)["spec"]


def _identity(process: Process) -> str:
    found = re.search(r"as (\S+_[0-9a-f-]{36})", process.output())
    assert found, process.output()[-2000:]
    return found.group(1)


def _takeover(name: str, standby: str) -> float:
    """Seconds until the Lease names ``standby``, from now (right after the kill)."""
    began = time.monotonic()
    wait_for(lambda: _lease(name)["holderIdentity"] == standby, 120, f"{standby} to lead")
    took = time.monotonic() - began
    print(f"\n{name}: the standby leads {took:.1f} s after the leader stopped", file=sys.stderr)
    return took


class Creations(threading.Thread):
    """Every step workflow on Karmada by name, with the uid of each of its creations, from
    before the run is submitted: a name seen with two uids was created twice.

    It follows Karmada as client-go's reflector does: a stream that ends or drops resumes from
    the last version seen (bookmarks included); a version Karmada no longer keeps (410: under
    load the watch fell behind, was closed, and the events it missed were compacted away)
    lists again and watches from the list's version. Each object listed or watched counts by
    its uid, so a second creation is seen whenever any state of it is; only a workflow created
    and deleted while no watch ran goes unseen, which ``relists`` tells."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.uids: collections.defaultdict[str, set[str]] = collections.defaultdict(set)
        self.relists = 0
        self._lock = threading.Lock()
        self.rv = self._list()

    def creations(self) -> dict[str, int]:
        """How many times each name seen was created, as far as seen now."""
        with self._lock:
            return {name: len(uids) for name, uids in self.uids.items()}

    def _list(self) -> str:
        items, rv = lists.list_objects(resources.WORKFLOW, label_selector=MANAGED)
        for obj in items:
            self._saw(obj)
        return rv

    def _saw(self, obj: dict[str, Any]) -> None:
        with self._lock:
            self.uids[obj["metadata"]["name"]].add(obj["metadata"]["uid"])

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                if not self.rv:
                    self.rv = self._list()
                    self.relists += 1
                for kind, obj in lists.watch(
                    resources.WORKFLOW, self.rv, label_selector=MANAGED, timeout_seconds=5
                ):
                    self.rv = obj["metadata"]["resourceVersion"]
                    if kind != "BOOKMARK":
                        self._saw(obj)
            except errors.Expired as exc:
                print(f"creations watch: {exc}; listing again", file=sys.stderr)
                self.rv = ""
            except Exception as exc:  # noqa: BLE001 - any other failure: resume, and say it
                print(f"creations watch: {exc!r}; resuming from {self.rv}", file=sys.stderr)
                self.stop.wait(0.5)


@pytest.fixture
def creations(live_without_resync: Stack) -> Iterator[Creations]:
    counter = Creations()
    counter.start()
    yield counter
    counter.stop.set()
    counter.join(timeout=30)


def _second(live: Stack, name: str, argv: list[str], ready: str) -> Process:
    return live.processes.start(name, argv, ready=logged(ready))


def test_the_standby_watcher_takes_over_a_fan_out_when_the_leader_is_killed(
    live_without_resync: Stack, creations: Creations
) -> None:
    live = live_without_resync
    user = User.objects.get(username="scientist")
    standby = _second(live, "watcher-b", watcher_argv(watch_timeout=30), "standing by")
    try:
        before = _lease(leader.WATCHER_LEASE)
        assert before["holderIdentity"] == _identity(live.procs["watcher"])
        run = services.run_submit(user=user, body=fan_out_workflow(ITEMS, 10), project="eo-demo")
        succeeded = UnitRun.objects.filter(run=run, phase="Succeeded")
        wait_for(lambda: succeeded.count() >= 40, 300, "a fifth of the fan-out to succeed")
        live.kill("watcher", signal.SIGKILL)
        assert succeeded.count() < ITEMS, "the kill came too late to interrupt anything"
        _takeover(leader.WATCHER_LEASE, _identity(standby))
        after = _lease(leader.WATCHER_LEASE)
        assert after["leaseTransitions"] == before["leaseTransitions"] + 1
        wait_for(
            lambda: WorkflowRun.objects.get(pk=run.pk).status == "Succeeded",
            600,
            "the run to succeed under the new leader",
        )
        assert "watching Clusters and ResourceBindings" in standby.output()
        _nothing_lost_or_twice(run.pk, creations)
        # Stopped on purpose (SIGTERM), a leader hands the lease back: the next watcher
        # (the next test's) leads at once.
        live.processes.stop("watcher-b")
        assert _lease(leader.WATCHER_LEASE)["holderIdentity"] == ""
    finally:
        if "watcher-b" in live.procs:
            live.processes.stop("watcher-b")


def _nothing_lost_or_twice(run_id: int, creations: Creations) -> None:
    units = UnitRun.objects.filter(run_id=run_id).filter(expanded=False)
    assert units.count() == ITEMS
    assert set(units.values_list("phase", flat=True)) == {"Succeeded"}
    assert set(units.values_list("attempt", flat=True)) == {1}
    assert RunEvent.objects.filter(run_id=run_id, kind="unit-submitted").count() == ITEMS
    twice = (
        PlacementDecision.objects.filter(run_id=run_id)
        .values("unit_id", "attempt")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
    )
    assert list(twice) == []
    names = set(units.values_list("workflow_name", flat=True))
    created = {n: c for n, c in creations.creations().items() if n in names}
    # Every step workflow seen (unless a relist left a gap where one could come and go)...
    unseen = names - set(created)
    assert not unseen or creations.relists, sorted(unseen)[:10]
    assert created, "no step workflow seen at all"
    assert max(created.values()) == 1  # ...and each created once


def _beat_argv(live: Stack, name: str) -> list[str]:
    schedule = live.processes.workdir / f"{name}-schedule"
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "portal",
        "beat",
        "-l",
        "info",
        "-s",
        str(schedule),
    ]


def _sent(process: Process, since: int = 0) -> int:
    return process.output()[since:].count(SENT)


def _resyncs_run(live: Stack, since: int) -> int:
    out = live.procs["worker"].output()[since:]
    return len(re.findall(r"Task portal\.tasks\.resync\[[^\]]+\] succeeded", out))


def test_beat_goes_on_from_the_standby_and_never_from_two(live_without_resync: Stack) -> None:
    live = live_without_resync
    a = _second(live, "beat-a", _beat_argv(live, "beat-a"), " leads")
    b = _second(live, "beat-b", _beat_argv(live, "beat-b"), "standing by")
    try:
        assert _lease(leader.BEAT_LEASE)["holderIdentity"] == _identity(a)
        wait_for(lambda: _sent(a) >= 4, 60, "the leading beat to send the resync")
        assert _sent(b) == 0
        # Frozen past the lease: the standby takes over; woken up, the old leader sees by its
        # own clock that it no longer leads, and sends nothing.
        transitions = _lease(leader.BEAT_LEASE)["leaseTransitions"]
        frozen_at = len(a.output())
        a.popen.send_signal(signal.SIGSTOP)
        try:
            _takeover(leader.BEAT_LEASE, _identity(b))
        finally:
            a.popen.send_signal(signal.SIGCONT)
        woke_b = len(b.output())
        wait_for(lambda: _sent(b, woke_b) >= 4, 60, "the new leader to go on sending")
        assert _sent(a, frozen_at) == 0
        wait_for(lambda: "standing by" in a.output()[frozen_at:], 60, "the old leader to stand by")
        assert _lease(leader.BEAT_LEASE)["leaseTransitions"] == transitions + 1
        # Killed: the other takes over again, and the resync still runs on the worker.
        worker_at = len(live.procs["worker"].output())
        a_at = len(a.output())
        live.kill("beat-b", signal.SIGKILL)
        _takeover(leader.BEAT_LEASE, _identity(a))
        wait_for(lambda: _sent(a, a_at) >= 3, 60, "the old leader to send again")
        wait_for(lambda: _resyncs_run(live, worker_at) >= 3, 60, "the resync to run")
    finally:
        for name in ("beat-a", "beat-b"):
            if name in live.procs:
                live.processes.stop(name)
