"""Leader election with a ``coordination.k8s.io/v1`` Lease on karmada-apiserver, as client-go's
``tools/leaderelection`` does it (``leaderelection.go``, ``resourcelock/leaselock.go``), so that
two watchers and two beats can run and only one of each acts.

Each candidate reads the Lease and acts on times it measured itself, never on the times in the
record (clocks differ between hosts): a record seen to change is "observed" now, and a lease
whose record has not changed for its ``leaseDurationSeconds`` since it was observed is free to
take. The holder renews every retry period. Writes are conditional (the Lease's
resourceVersion), so of two candidates racing for a free lease one gets a Conflict.

Fencing, stricter than client-go: a leader counts itself leading only until its last successful
renew *began* plus the renew deadline (``leading()``), measured on the monotonic clock. A
standby cannot take over before it has seen that renew plus the lease duration, so a leader
that cannot renew stops acting (lease - renew deadline) seconds before anyone else may start,
also when the process was frozen (SIGSTOP, a paused VM) and wakes up late: its first look at
the clock says it no longer leads.
"""

from __future__ import annotations

import json
import logging
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from portal.karmada import client, errors

log = logging.getLogger(__name__)

WATCHER_LEASE = "portal-watcher"
BEAT_LEASE = "portal-beat"
JITTER_FACTOR = 1.2  # client-go's JitterFactor: acquire retries wait 1 to 2.2 retry periods


class ElectionConfigError(ValueError):
    pass


@dataclass(frozen=True)
class ElectionConfig:
    lease_name: str
    identity: str
    lease_duration: float
    renew_deadline: float
    retry_period: float

    def __post_init__(self) -> None:
        # NewLeaderElector's checks.
        if self.lease_duration <= self.renew_deadline:
            raise ElectionConfigError("the lease duration must be greater than the renew deadline")
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            raise ElectionConfigError(
                "the renew deadline must be greater than the retry period times 1.2"
            )
        if self.lease_duration < 1 or self.retry_period <= 0:
            raise ElectionConfigError("the lease duration must be at least 1 s, the retry > 0")
        if not self.identity:
            raise ElectionConfigError("the identity is empty")

    @classmethod
    def from_settings(cls, lease_name: str) -> ElectionConfig:
        return cls(
            lease_name=lease_name,
            identity=new_identity(),
            lease_duration=float(settings.PORTAL_LEADER_LEASE_SECONDS),
            renew_deadline=float(settings.PORTAL_LEADER_RENEW_DEADLINE_SECONDS),
            retry_period=float(settings.PORTAL_LEADER_RETRY_SECONDS),
        )


def new_identity() -> str:
    """``<hostname>_<uuid>``, client-go's convention: unique per process start, so a restarted
    process never mistakes its predecessor's lease for its own."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def micro_time(at: datetime | None = None) -> str:
    """A MicroTime as kube-apiserver decodes it: RFC 3339 with exactly six fraction digits."""
    return (at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class Record:
    """client-go's LeaderElectionRecord, read from and written to a Lease's spec."""

    holder: str = ""
    duration_s: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def of(cls, lease: dict[str, Any]) -> Record:
        spec = lease.get("spec") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            duration_s=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def spec(self) -> dict[str, Any]:
        return {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.duration_s,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.transitions,
        }

    def raw(self) -> str:
        return json.dumps(self.spec(), sort_keys=True)


class Elector:
    """One candidate for one Lease (client-go's LeaderElector with a LeaseLock)."""

    def __init__(self, config: ElectionConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.clock = clock
        self._lock = threading.Lock()
        self._lease: dict[str, Any] | None = None  # as last read or written (resourceVersion)
        self._observed = Record()
        self._observed_raw = ""
        self._observed_at = float("-inf")
        self._valid_until = float("-inf")

    # -- what others ask -------------------------------------------------------------------
    def leading(self) -> bool:
        """Whether this candidate may act now (see the module's note on fencing)."""
        with self._lock:
            return self.clock() < self._valid_until

    def leader(self) -> str:
        with self._lock:
            return self._observed.holder

    # -- one try (tryAcquireOrRenew) -------------------------------------------------------
    def _is_leader(self) -> bool:
        return self._observed.holder == self.config.identity

    def _lease_valid(self, now: float) -> bool:
        return self._observed_at + self._observed.duration_s > now

    def _observe(self, record: Record, at: float) -> None:
        with self._lock:
            self._observed = record
            self._observed_raw = record.raw()
            self._observed_at = at

    def _body(self, record: Record) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": self.config.lease_name}
        if self._lease is not None:
            meta = {**(self._lease.get("metadata") or {}), **meta}
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": record.spec(),
        }

    def _won(self, record: Record, began: float, lease: dict[str, Any]) -> bool:
        self._lease = lease
        self._observe(record, self.clock())
        with self._lock:
            self._valid_until = began + self.config.renew_deadline
        return True

    def valid_until(self) -> float:
        with self._lock:
            return self._valid_until

    def try_acquire_or_renew(self, timeout: float) -> bool:
        """Acquire the lease, or renew it when held; True on success. Every call is bounded
        by ``timeout`` seconds; any error is a failed try (the next one comes a retry
        period later)."""
        try:
            return self._try(timeout)
        except errors.KarmadaError as exc:
            log.info("%s: %s", self.config.lease_name, exc)
            return False

    def _try(self, timeout: float) -> bool:
        began = self.clock()
        now_text = micro_time()
        record = Record(
            holder=self.config.identity,
            duration_s=int(self.config.lease_duration),
            acquire_time=now_text,
            renew_time=now_text,
        )
        # 1. The leader's fast path: update from the record it last wrote.
        if self._is_leader() and self._lease_valid(began) and self._lease is not None:
            mine = Record(
                record.holder,
                record.duration_s,
                self._observed.acquire_time,
                now_text,
                self._observed.transitions,
            )
            try:
                return self._won(
                    mine, began, client.lease_update(self._body(mine), timeout=timeout)
                )
            except errors.KarmadaError as exc:
                log.info("%s: renewing optimistically failed (%s)", self.config.lease_name, exc)
        # 2. Read the lease, or create it.
        try:
            current = client.lease_get(self.config.lease_name, timeout=self._left(began, timeout))
        except errors.NotFound:
            return self._create(record, began, timeout)
        self._lease = current
        old = Record.of(current)
        if old.raw() != self._observed_raw:
            self._observe(old, self.clock())
        # 3. Held by someone else and not expired: nothing to do.
        if old.holder and self._lease_valid(self.clock()) and not self._is_leader():
            return False
        # 4. Take it (or renew it, the slow way).
        if self._is_leader():
            mine = Record(
                record.holder, record.duration_s, old.acquire_time, now_text, old.transitions
            )
        else:
            mine = Record(record.holder, record.duration_s, now_text, now_text, old.transitions + 1)
        lease = client.lease_update(self._body(mine), timeout=self._left(began, timeout))
        return self._won(mine, began, lease)

    def _create(self, record: Record, began: float, timeout: float) -> bool:
        self._lease = None
        body = self._body(record)
        try:
            lease = client.lease_create(body, timeout=self._left(began, timeout))
        except errors.NotFound:
            # The portal's namespace itself is missing on a fresh control plane.
            client.ensure_namespace(client.namespace())
            raise
        return self._won(record, began, lease)

    def _left(self, began: float, timeout: float) -> float:
        return max(0.05, timeout - (self.clock() - began))

    def release(self) -> bool:
        """Give the lease up (holder emptied, duration 1 s, as client-go's tryRelease), so a
        standby or a restarted process takes over at once instead of after the lease."""
        with self._lock:
            self._valid_until = float("-inf")
        if not self._is_leader() or self._lease is None:
            return True
        now_text = micro_time()
        record = Record("", 1, now_text, now_text, self._observed.transitions)
        try:
            self._lease = client.lease_update(
                self._body(record), timeout=self.config.renew_deadline
            )
        except errors.KarmadaError as exc:
            log.warning("%s: could not release the lease: %s", self.config.lease_name, exc)
            return False
        self._observe(record, self.clock())
        return True


class Campaign:
    """Runs one candidate until ``stop``: acquire (every retry period, jittered), lead, renew
    every retry period; when the renew deadline passes without a renew, stop leading and
    stand by again (client-go's process would exit; ours keeps its connections and warms
    up again). ``on_started`` gets an event set when the term ends; ``on_stopped`` runs
    after. At ``stop`` a leader releases the lease once ``on_stopped`` has returned."""

    def __init__(
        self,
        elector: Elector,
        on_started: Callable[[threading.Event], None] | None = None,
        on_stopped: Callable[[], None] | None = None,
    ) -> None:
        self.elector = elector
        self.on_started = on_started
        self.on_stopped = on_stopped

    @property
    def name(self) -> str:
        return self.elector.config.lease_name

    def run(self, stop: threading.Event) -> None:
        config = self.elector.config
        try:
            while not stop.is_set():
                if not self._acquire(stop):
                    return
                term = threading.Event()
                log.warning("%s: %s leads", self.name, config.identity)
                try:
                    if self.on_started is not None:
                        self.on_started(term)
                    self._renew(stop)
                finally:
                    term.set()
                    if self.on_stopped is not None:
                        self.on_stopped()
                if not stop.is_set():
                    log.warning(
                        "%s: %s could not renew; stopped leading", self.name, config.identity
                    )
        finally:
            self.elector.release()

    def _acquire(self, stop: threading.Event) -> bool:
        config = self.elector.config
        reported = None
        while not stop.is_set():
            if self.elector.try_acquire_or_renew(timeout=config.renew_deadline):
                return True
            holder = self.elector.leader()
            if holder and holder != reported:
                log.warning("%s: standing by; the lease is held by %s", self.name, holder)
                reported = holder
            stop.wait(config.retry_period * (1 + random.random() * JITTER_FACTOR))
        return False

    def _renew(self, stop: threading.Event) -> None:
        """Renew every retry period until the term ends (the deadline passed) or ``stop``."""
        config = self.elector.config
        clock = self.elector.clock
        next_at = clock() + config.retry_period
        while not stop.is_set():
            now = clock()
            valid_until = self.elector.valid_until()
            if now >= valid_until:
                return
            if now < next_at:
                stop.wait(min(next_at, valid_until) - now)
                continue
            renewed = self.elector.try_acquire_or_renew(timeout=valid_until - now)
            if not renewed and self.elector.leader() != config.identity:
                return  # someone else holds it now: this term is over already
            next_at = clock() + config.retry_period
