"""Keeping a finished attempt's logs before its step workflow is deleted (``lifecycle``): each
pod's main-container log is read once more through Karmada's cluster proxy and stored, at most
``PORTAL_KEPT_LOG_MAX_BYTES`` of its end, in ``KeptAttempt`` and ``KeptLog`` rows; the log
views serve it from there afterwards (``portal.logs``).

* Idempotent: an attempt already kept is not read again; each container's row is written with
  an upsert, and the attempt counts as kept only once its record is marked complete, so a
  worker killed mid-way leaves nothing a reader sees, and the next cleanup starts over.
* Never blocks the cleanup for good: a site that cannot answer holds back only its own step
  workflows, and only for ``PORTAL_LOG_KEEP_GIVE_UP_SECONDS`` after the step ended; then the
  record says why the log is missing and the step workflow goes.
* A log Argo archived (``archiveLogs``: a ``main-logs`` output artifact on the pod's node) is
  also named in the record, where the kept copy says it came from.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from portal import gateway, logs
from portal.models import KeptAttempt, KeptLog

log = logging.getLogger(__name__)

# Argo's main container (``common.MainContainerName``); the archived log of a container is the
# output artifact ``<container>-logs`` (workflow/executor/executor.go, ``saveContainerLogs``).
MAIN = "main"
LOG_ARTIFACT = "-logs"
# The kubelet's answers that no later read can change: the pod is gone (404), or its
# container never started (400 "is waiting to start").
FOR_GOOD = (400, 404)
READ_TIMEOUT_S = 10.0


class KeepLater(Exception):
    """The site cannot give a log now; the step workflow stays until the next cleanup."""


def attempt_keep(*, unit_id: int, attempt: int, workflow: str, site: str, give_up: bool) -> bool:
    """Keep the logs of one finished attempt. True when its step workflow may be deleted
    (kept now or before, or given up with a note); False to try again at the next cleanup."""
    if KeptAttempt.objects.filter(unit_id=unit_id, attempt=attempt, kept_at__isnull=False).exists():
        return True
    if not site:
        _record(unit_id, attempt, workflow, site, "", [], "the step never reached a site")
        return True
    try:
        status = logs.member_status(workflow)
    except gateway.KarmadaError as exc:
        if not give_up:
            return False
        _record(unit_id, attempt, workflow, site, "", [], f"its status was unreadable ({exc})")
        return True
    if status is None:
        _record(
            unit_id,
            attempt,
            workflow,
            site,
            "",
            [],
            "the step workflow was gone before its logs could be kept",
        )
        return True
    record, _ = KeptAttempt.objects.get_or_create(
        unit_id=unit_id, attempt=attempt, defaults={"workflow": workflow, "site": site}
    )
    pods: list[dict[str, Any]] = []
    nodes = status.get("nodes") or {}
    for pod in logs.pods_of(workflow, status):
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
            _keep_container(record, site, pod.pod, MAIN)
            entry["containers"].append(MAIN)
        except logs.LogsNotAvailable as exc:
            entry["note"] = str(exc) + _archived_note(archived)
        except KeepLater as exc:
            if not give_up:
                log.info("logs of %s not kept yet: %s", workflow, exc)
                return False
            entry["note"] = (
                f"the site did not give its log before the step workflow was deleted ({exc})"
                + _archived_note(archived)
            )
        pods.append(entry)
    _record(unit_id, attempt, workflow, site, str(status.get("phase") or ""), pods, "")
    return True


def _record(
    unit_id: int,
    attempt: int,
    workflow: str,
    site: str,
    phase: str,
    pods: list[dict[str, Any]],
    note: str,
) -> None:
    """Mark the attempt kept (the one write that makes it visible to readers)."""
    values = {
        "workflow": workflow,
        "site": site,
        "phase": phase,
        "pods": pods,
        "note": note,
        "kept_at": timezone.now(),
    }
    KeptAttempt.objects.update_or_create(unit_id=unit_id, attempt=attempt, defaults=values)


def _keep_container(record: KeptAttempt, site: str, pod: str, container: str) -> None:
    limit = int(settings.PORTAL_KEPT_LOG_MAX_BYTES)
    data, size = _read_end(site, pod, container, limit)
    truncated = size > len(data)
    if truncated:
        data = (
            f"[log truncated: the container printed {size} bytes; the portal kept the last "
            f"{len(data)} (PORTAL_KEPT_LOG_MAX_BYTES)]\n"
        ).encode() + data
    source = f"cluster proxy: {site}/{pod}/{container}"
    with transaction.atomic():
        KeptLog.objects.update_or_create(
            kept=record,
            pod=pod,
            container=container,
            defaults={"content": data, "size": size, "truncated": truncated, "source": source},
        )


def _read_end(site: str, pod: str, container: str, limit: int) -> tuple[bytes, int]:
    """The last ``limit`` bytes of the container's log and how many it printed, read whole
    (the log API has no "last N bytes"); memory stays within twice ``limit``."""
    kept = bytearray()
    size = 0
    try:
        stream = gateway.pod_log(
            site, gateway.namespace(), pod, container=container, read_timeout=READ_TIMEOUT_S
        )
        for chunk in stream:
            size += len(chunk)
            kept += chunk
            if len(kept) > 2 * limit:
                del kept[: len(kept) - limit]
    except gateway.LogsUnavailable as exc:
        if exc.status in FOR_GOOD:
            why = f"the site no longer gave this pod's log ({exc.message})"
            raise logs.LogsNotAvailable(why) from exc
        raise KeepLater(exc.message) from exc
    except gateway.KarmadaError as exc:
        raise KeepLater(exc.message) from exc
    if len(kept) > limit:
        del kept[: len(kept) - limit]
    return bytes(kept), size


def _archived_note(key: str) -> str:
    if not key:
        return ""
    return f"; Argo archived it (archiveLogs) as {key} in the step's artifact repository"


def _archived_log(nodes: Any, node_name: str) -> str:
    """Where Argo archived the pod's main log (``archiveLogs``), as its node records it, or
    empty: the key of the ``main-logs`` output artifact of the Pod node shown as
    ``node_name`` (what ``logs.pods_of`` calls the pod's node)."""
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
