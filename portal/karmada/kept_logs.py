"""Logs kept past their step workflow, as the log views read them: an attempt whose logs were
kept (``portal.controller.keep_logs``) is served from PostgreSQL, with the kubelet's meaning of
``tailLines``, so that a log read after the cleanup gives the text it gave before."""

from __future__ import annotations

from typing import Any

from portal.models import KeptAttempt, KeptLog


class NotKept(Exception):
    """This container's log was not kept; the message says why, for the reader."""


def kept_attempt(unit_id: int, attempt: int) -> KeptAttempt | None:
    """The attempt's kept record, when its keeping completed (a record cut short is ignored)."""
    return (
        KeptAttempt.objects.filter(unit_id=unit_id, attempt=attempt, kept_at__isnull=False)
        .defer("unit")
        .first()
    )


def kept_pod(kept: KeptAttempt, pod: str) -> dict[str, Any] | None:
    for entry in kept.pods or []:
        if isinstance(entry, dict) and entry.get("pod") == pod:
            return entry
    return None


def kept_log(kept_id: int, pod: str, container: str, tail_lines: int | None = None) -> bytes:
    """The kept log of one container, its last ``tail_lines`` lines when given. Raises
    ``NotKept`` saying why there is none."""
    content = (
        KeptLog.objects.filter(kept_id=kept_id, pod=pod, container=container)
        .values_list("content", flat=True)
        .first()
    )
    if content is None:
        raise NotKept(_why_not_kept(kept_id, pod, container))
    data = bytes(content)
    return tail(data, tail_lines) if tail_lines is not None else data


def _why_not_kept(kept_id: int, pod: str, container: str) -> str:
    kept = KeptAttempt.objects.filter(pk=kept_id).first()
    entry = kept_pod(kept, pod) if kept is not None else None
    if entry is None:
        return f"Logs not available: no pod {pod} ran in this attempt."
    if entry.get("note"):
        return f"Logs not available: {entry['note']}"
    kept_containers = ", ".join(entry.get("containers") or []) or "none"
    return (
        f"Logs not available: the step workflow is deleted and the portal kept the log of "
        f"{kept_containers} only, not of {container}."
    )


def tail(data: bytes, lines: int) -> bytes:
    """The last ``lines`` lines, as the kubelet cuts them: it counts ``\n`` in the CRI log
    file (pkg/util/tail/tail.go, ``FindTailLineStartIndex``), where every record, an
    unfinished last line too, ends in one; so a final newline starts no empty line, and an
    unfinished last line is a line."""
    if lines <= 0:
        return b""
    end = len(data) - 1 if data.endswith(b"\n") else len(data)
    start = end
    for _ in range(lines):
        start = data.rfind(b"\n", 0, start)
        if start < 0:
            return data
    return data[start + 1 :]
