"""Celery beat that sends periodic tasks only while it leads (the Lease ``portal-beat`` on
karmada-apiserver, ``portal.leader``), so two beats can run and the schedule goes on when
one dies, without the periodic tasks being sent twice (docs/decisions.md says why a scheduler
and not a wrapper around the beat service).

``CELERY_BEAT_SCHEDULER`` names it, so ``celery beat`` and a worker's embedded beat (``-B``)
both elect. Without Karmada configured there is nothing to elect on and it leads alone.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from celery import beat as celery_beat
from django.conf import settings

from portal import leader
from portal.karmada import client

log = logging.getLogger(__name__)

# The stubs know little of Celery's scheduler API (tick, apply_entry, max_interval).
_Scheduler: Any = celery_beat.PersistentScheduler

# How often a standby beat looks whether it leads now (a tick sends nothing meanwhile).
STANDBY_TICK_S = 0.5
# A standby never rewrites its schedule file, which the liveness probe watches: every beat
# touches a heartbeat file next to it this often instead.
HEARTBEAT_S = 30.0


class LeaderScheduler(_Scheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._stop = threading.Event()
        self._elector: leader.Elector | None = None
        self._thread: threading.Thread | None = None
        self._heartbeat_at = float("-inf")
        super().__init__(*args, **kwargs)
        if not kwargs.get("lazy"):
            self._campaign()

    def _campaign(self) -> None:
        if not client.configured():
            log.warning("beat: Karmada is not configured; no leader election, this beat leads")
            return
        config = leader.ElectionConfig.from_settings(leader.BEAT_LEASE)
        self._elector = leader.Elector(config)
        log.warning(
            "beat: leader election: lease %s/%s as %s",
            client.namespace(),
            config.lease_name,
            config.identity,
        )
        self._thread = threading.Thread(
            target=leader.Campaign(self._elector).run,
            args=(self._stop,),
            name="beat-election",
            daemon=True,
        )
        self._thread.start()

    def leading(self) -> bool:
        return self._elector is None or self._elector.leading()

    def _heartbeat(self) -> None:
        now = time.monotonic()
        if now - self._heartbeat_at < HEARTBEAT_S:
            return
        self._heartbeat_at = now
        try:
            Path(f"{self.schedule_filename}.heartbeat").touch()
        except OSError as exc:
            log.warning("beat: heartbeat file: %s", exc)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        self._heartbeat()
        if not self.leading():
            return min(STANDBY_TICK_S, float(self.max_interval))
        return float(super().tick(*args, **kwargs))

    def apply_entry(self, entry: Any, producer: Any = None) -> None:
        # Checked again right before sending: the term may have ended since the tick began.
        if not self.leading():
            log.info("beat: not sending %s: no longer leading", entry.name)
            return
        super().apply_entry(entry, producer=producer)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            # The campaign releases the lease as it ends, so a standby takes over at once.
            self._thread.join(timeout=float(settings.PORTAL_LEADER_RENEW_DEADLINE_SECONDS))
        super().close()
