"""The quota queue: the ``Workload`` rows that wait, their order, the locks that serialise
admission, and what a queued unit's message says.

Admission at a site is serialised by a transaction-scoped advisory lock on the site's name, so
two workers advancing two runs never both take the last of a quota."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import F
from django.utils import timezone

from portal.choices import UnitPhase
from portal.models import UnitRun
from portal.quotas.models import Workload
from portal.quotas.scopes import Group

# Ordered last: a key never reached by a workload that exists.
_LAST = (0, datetime.max.replace(tzinfo=timezone.get_fixed_timezone(0)), 2**62)


def waiting() -> Any:
    """Queued workloads whose unit still waits, at the attempt they were queued for."""
    return Workload.objects.filter(
        admitted_at__isnull=True, unit__phase=UnitPhase.PENDING, unit__attempt=F("attempt")
    )


def queue_key(w: Workload) -> tuple[int, datetime, int]:
    """A waiting workload's place in its queue: higher priority first, then first queued."""
    return (-w.priority, w.queued_at, w.pk or _LAST[2])


def lock_site(site: str) -> None:
    """Take the site's (or a group's, by its name) admission lock until the transaction ends."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"portal-quota:{site}"])


def lock_groups(found: Iterable[Group]) -> None:
    """After the site's lock (every admission takes sites first, then groups, each in name
    order, so two never wait for each other): a group's quota is shared by its sites."""
    for g in sorted(found, key=lambda g: g.name):
        lock_site(g.name)


# What an admission writes to the Workload rows it keeps (the runtime admission also rewrites
# the sites each row was admitted for).
WORKLOAD_FIELDS = (
    "site",
    "attempt",
    "priority",
    "queued_at",
    "admitted_at",
    "released_at",
    "reason",
    "cpu_millicores",
    "memory_bytes",
    "gpus",
)


# How a queued unit's message begins.
QUEUED = "queued: "


def say_queued(units: Iterable[UnitRun], taken: set[int], why: dict[int, str]) -> None:
    """A queued unit's message says why it waits (the run page's table and logs show it);
    cleared on admission. Written only where it changes."""
    told: dict[str, list[int]] = {}
    cleared: list[int] = []
    for u in units:
        if u.pk in taken:
            if u.message.startswith(QUEUED):
                cleared.append(u.pk)
                u.message = ""
            continue
        text = f"{QUEUED}{why.get(u.pk, 'waiting for quota')}"[:2000]
        if u.message != text:
            told.setdefault(text, []).append(u.pk)
            u.message = text
    for text, ids in told.items():
        UnitRun.objects.filter(pk__in=ids, phase=UnitPhase.PENDING, workflow_name="").update(
            message=text
        )
    if cleared:
        UnitRun.objects.filter(pk__in=cleared, message__startswith=QUEUED).update(message="")
