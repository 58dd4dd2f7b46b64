"""``python manage.py watch_karmada``: the watcher process. Several may run: they elect a
leader with the Lease ``portal-watcher`` on karmada-apiserver (``portal.leader``) and only
the leader watches; the others stand by and take over when it stops renewing."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand

from placement.gcpause import collect_seldom
from portal import leader, tasks
from portal.karmada import client, errors, watcher


class Command(BaseCommand):
    help = "Watch Karmada Clusters and ResourceBindings and keep the portal in step."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--watch-timeout", type=int, default=300)

    def handle(self, *args: Any, **options: Any) -> None:
        if not client.configured():
            raise SystemExit("Karmada is not configured: set KARMADA_KUBECONFIG")
        collect_seldom()  # a watch event's objects die young: no collection for each few
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        try:
            config = leader.ElectionConfig.from_settings(leader.WATCHER_LEASE)
        except leader.ElectionConfigError as exc:
            raise SystemExit(f"leader election: {exc}") from None
        elector = leader.Elector(config)
        terms: list[watcher.Term] = []

        def start(term: threading.Event) -> None:
            # Policies first, so step workflows created from now on find their site policy.
            try:
                tasks.sites_sync()
            except errors.KarmadaError as exc:
                self.stderr.write(f"initial sync failed ({exc}); the watch loops retry")
            if term.is_set():
                return
            terms.append(watcher.run_forever(term, options["watch_timeout"], elector.leading))
            self.stdout.write(f"watching Clusters and ResourceBindings as {config.identity}")

        def lead(term: threading.Event) -> None:
            # In a thread of its own: the election keeps renewing while the sync waits on
            # Karmada.
            threading.Thread(target=start, args=(term,), name="lead", daemon=True).start()

        def stopped() -> None:
            # Before the lease is released (at a stop) or can expire (a lost term): the batch
            # under way ends first, within the margin the lease leaves past the renew deadline.
            margin = config.lease_duration - config.renew_deadline
            while terms:
                if not terms.pop().join_writers(timeout=margin):
                    self.stderr.write("a fold was still under way as the term ended")

        self.stdout.write(
            f"leader election: lease {client.namespace()}/{config.lease_name} as {config.identity}"
        )
        leader.Campaign(elector, on_started=lead, on_stopped=stopped).run(stop)
