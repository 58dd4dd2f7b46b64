"""``python manage.py watch_karmada``: the watcher process (one per deployment)."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand

from portal import gateway, tasks, watcher


class Command(BaseCommand):
    help = "Watch Karmada Clusters and ResourceBindings and keep the portal in step."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--watch-timeout", type=int, default=300)

    def handle(self, *args: Any, **options: Any) -> None:
        if not gateway.configured():
            raise SystemExit("Karmada is not configured: set KARMADA_KUBECONFIG")
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        # Policies first, so step workflows created from now on find their site policy.
        try:
            tasks.sites_sync()
        except gateway.KarmadaError as exc:
            self.stderr.write(f"initial sync failed ({exc}); the watch loops retry")
        watcher.run_forever(stop, options["watch_timeout"])
        self.stdout.write("watching Clusters and ResourceBindings")
        stop.wait()
