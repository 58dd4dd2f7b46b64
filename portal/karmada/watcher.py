"""The watcher: follows Clusters and ResourceBindings on karmada-apiserver.

Each kind has a loop: list (fold every object in), then watch from the list's resourceVersion;
a dropped connection resumes from the last version seen, an expired version (410) lists again.
Changes become database updates here and Celery tasks for what must call Karmada.

Two or more watchers may run: they elect a leader (``portal.leader``, the command
``watch_karmada``), and only the leader's loops run, each handler and batch fenced by
``leading`` (a term that ended, or a leader that can no longer be sure it leads, writes
nothing more). The writes are conditional anyway (``portal.state``), so a batch already under
way when a term ends cannot undo what the next leader folded.
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections

from portal.admission import queue
from portal.controller import bindings, sync, workqueue
from portal.karmada import errors, lists, resources

log = logging.getLogger(__name__)


def _always() -> bool:
    return True


# How often a loop lets Django check its database connection (``close_old_connections``):
# every check costs a ``SELECT 1`` on the next query, and a busy watch sees many events a
# second. After a failure the check is immediate.
CONNECTION_CHECK_S = 1.0


class Loop:
    """List-then-watch for one resource, with resume and backoff."""

    def __init__(
        self,
        resource: resources.Resource,
        on_object: Callable[[str, dict[str, Any]], None],
        stop: threading.Event,
        watch_timeout: int = 300,
        leading: Callable[[], bool] = _always,
    ) -> None:
        self.leading = leading
        self.resource = resource
        self.on_object = on_object
        self.stop = stop
        self.watch_timeout = watch_timeout
        self.resource_version = ""
        self.lists = 0
        self.watches = 0
        self._checked_at = 0.0
        # The objects this loop knows to exist (namespace/name): a relist after a 410 tells
        # which ones were deleted while no watch ran.
        self.known: set[tuple[str, str]] = set()

    def relist(self) -> None:
        # In chunks (the bindings of every step workflow that exists can be tens of
        # thousands); the watch starts from the list's resourceVersion, the same in every
        # chunk.
        rv = ""
        listed: set[tuple[str, str]] = set()
        for items, chunk_rv in lists.list_chunks(self.resource):
            for obj in items:
                listed.add(_key(obj))
                self._handle("ADDED", obj)
            rv = chunk_rv
        # What was deleted between the last event watched and this list (a 410 skipped its
        # DELETED) is deleted for the handler too, as client-go's reflector does on a relist
        # (DeltaFIFO.Replace: a DeletedFinalStateUnknown for each known key not listed).
        for namespace, name in sorted(self.known - listed):
            self._handle("DELETED", {"metadata": {"namespace": namespace, "name": name}})
        self.known = listed
        self.lists += 1
        self.resource_version = rv

    def _handle(self, kind: str, obj: dict[str, Any]) -> None:
        if self.stop.is_set() or not self.leading():
            return  # the term ended: the next leader lists everything again
        failed = False
        try:
            self.on_object(kind, obj)
        except Exception:  # one bad object must not stop the watcher
            failed = True
            log.exception("%s: failed to handle %s", self.resource.kind, kind)
        now = time.monotonic()
        if failed or now - self._checked_at >= CONNECTION_CHECK_S:
            close_old_connections()
            self._checked_at = now

    def run(self) -> None:
        delay = 0.5
        while not self.stop.is_set():
            try:
                if not self.resource_version:
                    self.relist()
                self.watches += 1
                for kind, obj in lists.watch(
                    self.resource, self.resource_version, timeout_seconds=self.watch_timeout
                ):
                    rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if rv:
                        self.resource_version = str(rv)
                    if kind != "BOOKMARK":
                        if kind == "DELETED":
                            self.known.discard(_key(obj))
                        else:
                            self.known.add(_key(obj))
                        self._handle(kind, obj)
                    if self.stop.is_set():
                        return
                delay = 0.5
            except errors.Expired:
                log.info("%s: resourceVersion expired, listing again", self.resource.kind)
                self.resource_version = ""
            except errors.KarmadaError as exc:
                log.warning("%s watch: %s; resuming in %.1fs", self.resource.kind, exc, delay)
                self.stop.wait(delay * (0.5 + random.random()))
                delay = min(delay * 2, 30.0)


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def on_cluster(kind: str, obj: dict[str, Any]) -> None:
    from portal import tasks

    name = (obj.get("metadata") or {}).get("name", "")
    if kind == "DELETED":
        sync.cluster_deleted(name)
        tasks.policies_sync.delay()
        return
    if sync.cluster_note(obj):
        tasks.policies_sync.delay()


# Bindings folded together at most (one query reads their units).
FOLD_BATCH = 500
# Under a burst (the batch before had FOLD_LINGER_FROM bindings or more), a batch is taken
# FOLD_LINGER_S after the one before, or as soon as FOLD_BATCH wait. In a 10,000-item
# fan-out the fold thread took whatever waited at once: a hundred batches every five seconds,
# most of a few bindings, each with its own reads, writes and commit (13 ms a batch against
# 0.13 ms a binding in a full one): half the watcher's samples. Gathered, the fan-out's
# watcher ran 7.1 CPU s instead of 10.2, PostgreSQL 3.7 instead of 5.0. A quiet fleet's
# binding (a unit that ended, a batch of one) is folded as soon as it is seen, as before, so
# a chain of steps waits no longer.
FOLD_LINGER_S = 0.2
FOLD_LINGER_FROM = 10


class Pending:
    """Bindings seen and not folded yet, by name, as client-go's workqueue keeps keys: a newer
    state of a binding replaces one still waiting, and the folding thread takes all that
    wait at once. Idle, a binding is folded as soon as it is seen; under a fan-out (a dozen
    changes per step, thousands of steps) the states a binding went through while the last
    batch was folded collapse into its newest, and a batch's units are read in one query.
    The newest state is what the resync folds too; a lost batch (the process killed) is
    listed again when the watcher starts."""

    def __init__(self) -> None:
        self._bindings: dict[str, dict[str, Any]] = {}
        self._changed = threading.Condition()

    def put(self, binding: dict[str, Any]) -> None:
        meta = binding.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        with self._changed:
            self._bindings[key] = binding
            self._changed.notify()

    def take(
        self, stop: threading.Event, most: int = FOLD_BATCH, linger: float = 0.0
    ) -> list[dict[str, Any]]:
        """Up to ``most`` waiting bindings, oldest first; [] when nothing came for a while
        or the watcher stops. With ``linger``, waits that long for ``most`` to gather (a
        burst folded in fewer, fuller batches)."""
        with self._changed:
            if not self._bindings and not stop.is_set():
                self._changed.wait(0.5)
            until = time.monotonic() + linger
            while len(self._bindings) < most and not stop.is_set():
                left = until - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            keys = list(itertools.islice(self._bindings, most))
            return [self._bindings.pop(k) for k in keys]

    def __len__(self) -> int:
        with self._changed:
            return len(self._bindings)


PENDING = Pending()
# What this watcher folded in from each binding (one watcher process, one memory).
FOLDED = bindings.Folded()


def on_binding(kind: str, obj: dict[str, Any]) -> None:
    if kind != "DELETED":
        PENDING.put(obj)


def fold_bindings(
    stop: threading.Event,
    pending: Pending = PENDING,
    folded: bindings.Folded = FOLDED,
    leading: Callable[[], bool] = _always,
) -> None:
    """Fold what the binding watch saw, batch by batch, and ask for the next step of every
    run whose unit ended; a batch taken when this watcher no longer leads is dropped (the
    next leader lists every binding)."""
    checked = 0.0
    linger = 0.0
    while not stop.is_set():
        batch = pending.take(stop, linger=linger)
        linger = FOLD_LINGER_S if len(batch) >= FOLD_LINGER_FROM else 0.0
        if not batch or stop.is_set() or not leading():
            continue
        failed = False
        try:
            ended = bindings.bindings_observe(batch, folded=folded)
            for run_id in sorted(ended):
                workqueue.add(run_id)
        except Exception:  # the batch's units could not be read: the resync folds them
            failed = True
            log.exception("folding %d bindings failed", len(batch))
        if failed or time.monotonic() - checked >= CONNECTION_CHECK_S:
            close_old_connections()
            checked = time.monotonic()


DRAIN_INTERVAL_S = 1.0


def drain_decisions(
    stop: threading.Event,
    interval: float = DRAIN_INTERVAL_S,
    leading: Callable[[], bool] = _always,
) -> None:
    """Write the webhook's queued decisions every ``interval`` (direct Workflows, and runtime
    units whose binding has not been seen yet)."""
    while not stop.wait(interval):
        if not leading():
            continue
        try:
            queue.decisions_flush()
        except queue.QueueUnavailable as exc:
            log.warning("webhook decisions stay queued: %s", exc)
        except Exception:  # the next round tries again
            log.exception("writing the webhook's queued decisions failed")
        finally:
            close_old_connections()


def run_forever(
    stop: threading.Event, watch_timeout: int = 300, leading: Callable[[], bool] = _always
) -> Term:
    """Start the loops and the folding and draining threads until ``stop`` (a leader's term):
    each term lists everything afresh, into its own queue of bindings and its own memory of
    what it folded (another leader may have folded meanwhile)."""
    pending, folded = Pending(), bindings.Folded()

    def on_binding_of_term(kind: str, obj: dict[str, Any]) -> None:
        if kind != "DELETED":
            pending.put(obj)

    loops = [
        Loop(resources.CLUSTER, on_cluster, stop, watch_timeout, leading),
        Loop(resources.RESOURCE_BINDING, on_binding_of_term, stop, watch_timeout, leading),
    ]
    threads = [
        threading.Thread(target=loop.run, name=f"watch-{loop.resource.plural}", daemon=True)
        for loop in loops
    ]
    threads.append(
        threading.Thread(
            target=drain_decisions,
            args=(stop, DRAIN_INTERVAL_S, leading),
            name="drain-decisions",
            daemon=True,
        )
    )
    threads.append(
        threading.Thread(
            target=fold_bindings,
            args=(stop, pending, folded, leading),
            name="fold-bindings",
            daemon=True,
        )
    )
    for t in threads:
        t.start()
    return Term(loops, threads[len(loops) :])


class Term:
    """What one ``run_forever`` started: its loops, and the threads that write."""

    def __init__(self, loops: list[Loop], writers: list[threading.Thread]) -> None:
        self.loops = loops
        self.writers = writers

    def join_writers(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` in all) for the batch or drain under way to end, once the
        term's stop is set; True when both ended. The watch loops are not waited for: they
        may sit in a long poll, and write nothing once stopped."""
        deadline = time.monotonic() + timeout
        for t in self.writers:
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self.writers)
