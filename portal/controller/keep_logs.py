"""Keeping finished attempts' logs before their step workflows are deleted (``cleanup``):
each pod's main-container log is read once more through Karmada's cluster proxy and stored,
at most ``PORTAL_KEPT_LOG_MAX_BYTES`` of its end, in ``KeptAttempt`` and ``KeptLog`` rows; the
log views serve it from there afterwards (``portal.karmada.logs``).

* Idempotent and never half-stored: attempts are written in batches, each batch in one
  transaction with upserts, and an attempt counts as kept only once its record carries
  ``kept_at``. Only an attempt whose logs alone pass the memory bound is written in parts,
  unmarked (readers ignore it) until its last part. A worker killed mid-way leaves nothing a
  reader sees, and its step workflows (deleted only after the commit) are kept again.
* Never blocks the cleanup for good: a site that cannot answer holds back only its own step
  workflows, and only for ``PORTAL_LOG_KEEP_GIVE_UP_SECONDS`` after the step ended; then the
  record says why the log is missing and the step workflow goes.
* A log Argo archived (``archiveLogs``: the ``main-logs`` output artifact of the pod's node) is
  named in the record, and a reader whose log the site could no longer give is pointed to it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from portal.karmada import client, errors, logs, proxy
from portal.models import KeptAttempt, KeptLog

log = logging.getLogger(__name__)

M = TypeVar("M", bound=models.Model)

# Argo's main container (``common.MainContainerName``); the archived log of a container is the
# output artifact ``<container>-logs`` (workflow/executor/executor.go, ``saveContainerLogs``).
MAIN = "main"
LOG_ARTIFACT = "-logs"
# The kubelet's answers that no later read can change: the pod is gone (404), or its
# container never started (400 "is waiting to start").
FOR_GOOD = (400, 404)
READ_TIMEOUT_S = 10.0
# Log bytes held before they are written, and attempts per transaction: a commit per attempt
# cost more than reading its log.
FLUSH_BYTES = 32 * 1024 * 1024
FLUSH_ATTEMPTS = 100


class KeepLater(Exception):
    """The site cannot give a log now; the step workflow stays until the next cleanup."""


@dataclass
class _Log:
    pod: str
    container: str
    content: bytes
    size: int
    truncated: bool
    source: str


@dataclass
class _Attempt:
    unit_id: int
    attempt: int
    workflow: str
    site: str
    phase: str = ""
    note: str = ""
    pods: list[dict[str, Any]] = field(default_factory=list)
    logs: list[_Log] = field(default_factory=list)
    complete: bool = False


def kept_already(units: Iterable[tuple[int, int]]) -> set[tuple[int, int]]:
    """Which of these (unit, attempt) were kept by an earlier cleanup: one query."""
    wanted = set(units)
    rows = KeptAttempt.objects.filter(
        unit_id__in={u for u, _ in wanted}, kept_at__isnull=False
    ).values_list("unit_id", "attempt")
    return {row for row in rows if row in wanted}


class Keeper:
    """Reads attempts' logs (``add``) and writes them in few transactions (``flush``)."""

    def __init__(self) -> None:
        self.pending: list[_Attempt] = []
        self.held = 0
        self.kept: list[int] = []  # units whose attempt a committed write marked kept

    @property
    def full(self) -> bool:
        return self.held >= FLUSH_BYTES or len(self.pending) >= FLUSH_ATTEMPTS

    def add(self, *, unit_id: int, attempt: int, workflow: str, site: str, give_up: bool) -> bool:
        """Read one finished attempt's logs. True when its step workflow may go once the
        next ``flush`` has committed (kept, or given up with a note); False to try again at
        the next cleanup (the site could not answer)."""
        record = _Attempt(unit_id, attempt, workflow, site)
        self.pending.append(record)
        try:
            nothing = not self._read(record, give_up)
        except Exception as exc:
            self.pending.remove(record)
            self.held -= sum(len(x.content) for x in record.logs)
            if not isinstance(exc, KeepLater):
                raise
            log.info("logs of %s not kept yet: %s", workflow, exc)
            return False
        if nothing:
            self.pending.remove(record)
            self.kept.append(unit_id)
        record.complete = True
        return True

    def _read(self, record: _Attempt, give_up: bool) -> bool:
        """Read the attempt's logs into ``record``; False when there is nothing to keep: no
        site, or no binding (the step workflow is gone already), where the views say as
        much without a record."""
        if not record.site:
            return False
        try:
            status = logs.member_status(record.workflow)
        except errors.KarmadaError as exc:
            if not give_up:
                raise KeepLater(exc.message) from exc
            record.note = f"its status was unreadable when the step workflow was deleted ({exc})"
            return True
        if status is None:
            return False
        record.phase = str(status.get("phase") or "")
        for pod in logs.pods_of(record.workflow, status):
            record.pods.append(self._pod(record, pod, status.get("nodes"), give_up))
        return True

    def _pod(
        self, record: _Attempt, pod: logs.PodNode, nodes: Any, give_up: bool
    ) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "pod": pod.pod,
            "node": pod.node,
            "template": pod.template,
            "phase": pod.phase,
            "containers": [],
        }
        archived = _archived_log(nodes, pod.node)
        if archived:
            entry["archived"] = archived
        try:
            kept = _read_end(record.site, pod.pod, MAIN, int(settings.PORTAL_KEPT_LOG_MAX_BYTES))
        except logs.LogsNotAvailable as exc:
            entry["note"] = str(exc) + _archived_note(archived)
            return entry
        except KeepLater as exc:
            if not give_up:
                raise
            entry["note"] = (
                f"the site did not give its log before the step workflow was deleted ({exc})"
                + _archived_note(archived)
            )
            return entry
        record.logs.append(kept)
        entry["containers"].append(MAIN)
        self.held += len(kept.content)
        if self.held >= FLUSH_BYTES:
            # This attempt alone holds too much: what it has so far is written, unmarked.
            self._write()
        return entry

    def flush(self) -> list[int]:
        """Write what was read, in one transaction; the units whose attempt is now kept
        (since the last flush), whose step workflows may go."""
        self._write()
        kept, self.kept = self.kept, []
        return kept

    def _write(self) -> None:
        if not self.pending:
            return
        now = timezone.now()
        with transaction.atomic():
            rows = _upsert(
                KeptAttempt,
                [
                    KeptAttempt(
                        unit_id=a.unit_id,
                        attempt=a.attempt,
                        workflow=a.workflow,
                        site=a.site,
                        phase=a.phase,
                        pods=a.pods,
                        note=a.note,
                        kept_at=now if a.complete else None,
                    )
                    for a in self.pending
                ],
                key=["unit", "attempt"],
            )
            _upsert(
                KeptLog,
                [
                    KeptLog(
                        kept_id=row.pk,
                        pod=x.pod,
                        container=x.container,
                        content=x.content,
                        size=x.size,
                        truncated=x.truncated,
                        source=x.source,
                    )
                    for a, row in zip(self.pending, rows, strict=True)
                    for x in a.logs
                ],
                key=["kept", "pod", "container"],
            )
        self.kept += [a.unit_id for a in self.pending if a.complete]
        # An attempt still being read stays pending (its logs written), to be marked later.
        self.pending = [a for a in self.pending if not a.complete]
        for a in self.pending:
            a.logs = []
        self.held = 0


def _upsert(model: type[M], rows: list[M], *, key: list[str]) -> list[M]:
    """Insert ``rows`` in one statement; a row whose ``key`` is stored already (written by a
    keeping cut short, or by an earlier part of the same attempt) is overwritten in every
    other field. The rows come back with their primary keys."""
    others = [
        f.name for f in model._meta.concrete_fields if not f.primary_key and f.name not in key
    ]
    return model._default_manager.bulk_create(
        rows, update_conflicts=True, unique_fields=key, update_fields=others
    )


def _read_end(site: str, pod: str, container: str, limit: int) -> _Log:
    """The last ``limit`` bytes of the container's log, read whole (the log API has no "last
    N bytes"; memory stays within twice ``limit``), headed by a line saying what was dropped
    when it printed more."""
    data = bytearray()
    size = 0
    try:
        stream = proxy.pod_log(
            site, client.namespace(), pod, container=container, read_timeout=READ_TIMEOUT_S
        )
        for chunk in stream:
            size += len(chunk)
            data += chunk
            if len(data) > 2 * limit:
                del data[: len(data) - limit]
    except errors.LogsUnavailable as exc:
        if exc.status in FOR_GOOD:
            why = f"the site no longer gave this pod's log ({exc.message})"
            raise logs.LogsNotAvailable(why) from exc
        raise KeepLater(exc.message) from exc
    except errors.KarmadaError as exc:
        raise KeepLater(exc.message) from exc
    if len(data) > limit:
        del data[: len(data) - limit]
    content = bytes(data)
    truncated = size > len(content)
    if truncated:
        content = (
            f"[log truncated: the container printed {size} bytes; the portal kept the last "
            f"{len(data)} (PORTAL_KEPT_LOG_MAX_BYTES)]\n"
        ).encode() + content
    return _Log(pod, container, content, size, truncated, f"cluster proxy: {site}/{pod}")


def _archived_note(key: str) -> str:
    if not key:
        return ""
    return f"; Argo archived it (archiveLogs) as {key} in the step's artifact repository"


def _archived_log(nodes: Any, node_name: str) -> str:
    """The key Argo archived the pod's main log at (``archiveLogs``), as its node records it,
    or empty: the ``main-logs`` output artifact of the Pod node shown as ``node_name`` (what
    ``logs.pods_of`` calls the pod's node)."""
    if not isinstance(nodes, Mapping):
        return ""
    for node in nodes.values():
        if not isinstance(node, Mapping) or node.get("type") != "Pod":
            continue
        if str(node.get("displayName") or node.get("name") or "") != node_name:
            continue
        for art in (node.get("outputs") or {}).get("artifacts") or []:
            if isinstance(art, Mapping) and art.get("name") == MAIN + LOG_ARTIFACT:
                s3 = art.get("s3") or {}
                key = s3.get("key") if isinstance(s3, Mapping) else None
                return str(key) if key else ""
    return ""
