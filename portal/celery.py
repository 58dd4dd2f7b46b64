"""The Celery application (the standard layout: settings from Django, tasks autodiscovered)."""

import os
from typing import Any

from celery import Celery
from celery.signals import beat_init, worker_init, worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
@beat_init.connect
def _refuse_without_secret_key(**_: Any) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from portal.startup import require_secret_key

    try:
        require_secret_key()
    except ImproperlyConfigured as exc:
        # SystemExit: Celery logs and ignores an exception a signal handler raises.
        raise SystemExit(f"portal: {exc}") from None


@worker_init.connect
@worker_process_init.connect
def _collect_seldom(**_: Any) -> None:
    """The collector run seldom (``placement.gcpause``): in the worker as it starts (a solo or
    threaded pool runs tasks there) and in each process a prefork pool starts."""
    from placement.gcpause import collect_seldom

    collect_seldom()
