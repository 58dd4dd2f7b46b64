"""Informer-like reads of karmada-apiserver: a list in chunks with the resourceVersion to watch
from, and a watch from that version.

A dropped watch resumes from the last version seen (``TransientError``); a version Karmada no
longer keeps (410, ``Expired``) means list again. ``portal.karmada.watcher`` runs this loop."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from portal.karmada import client
from portal.karmada.errors import Expired, TransientError
from portal.karmada.resources import Resource

log = logging.getLogger(__name__)

# Items per chunk of a list: client-go's pager's default (``tools/pager``, defaultPageSize).
# A list of every ResourceBinding in one answer would hold them all in the worker at once for
# every resync; in chunks it holds one chunk at a time.
LIST_CHUNK = 500


def list_objects(
    resource: Resource, ns: str | None = None, label_selector: str = ""
) -> tuple[list[dict[str, Any]], str]:
    """Items and the list's resourceVersion (to start a watch from). For lists that stay
    small (Clusters, policies); one that grows with the runs is read with ``list_chunks``."""
    items: list[dict[str, Any]] = []
    rv = ""
    for chunk, chunk_rv in list_chunks(resource, ns, label_selector):
        items.extend(chunk)
        rv = chunk_rv
    return items, rv


def list_chunks(
    resource: Resource, ns: str | None = None, label_selector: str = "", limit: int | None = None
) -> Iterator[tuple[list[dict[str, Any]], str]]:
    """A list in chunks of ``limit`` items (``limit`` and ``continue``), each with the list's
    resourceVersion. A chunk's call is retried as any other. When Karmada has compacted
    past the list (410 Expired on a continue), the list starts over, as client-go's pager
    does with ``FullListIfExpired`` (whole this time: the next chunks would expire alike);
    callers fold chunks idempotently, so chunks seen twice do no harm."""
    token = ""
    limit = LIST_CHUNK if limit is None else limit
    while True:
        try:
            out = client.list_page(resource, ns, label_selector, limit, token)
        except Expired:
            if not token:
                raise
            log.info("%s: the list's continue token expired; listing again, whole", resource.kind)
            token, limit = "", 0
            continue
        meta = out.get("metadata") or {}
        yield list(out.get("items") or []), str(meta.get("resourceVersion", ""))
        token = str(meta.get("continue") or "")
        if not token:
            return


def watch(
    resource: Resource,
    resource_version: str,
    ns: str | None = None,
    label_selector: str = "",
    timeout_seconds: int = 300,
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``(type, object)`` from ``resource_version`` until the server ends the stream.

    Raises ``Expired`` when the version is too old (list again) and ``TransientError`` when the
    connection drops (resume from the last version seen).
    """
    events = client.watch_events(resource, resource_version, ns, label_selector, timeout_seconds)
    with contextlib.closing(events):
        for event in events:
            kind = event.get("type", "")
            obj = event.get("raw_object") or event.get("object") or {}
            if kind == "ERROR":
                code = obj.get("code") if isinstance(obj, dict) else None
                if code == 410:
                    raise Expired("watch expired: " + str(obj.get("message", "")), 410, "Expired")
                raise TransientError(f"watch error: {obj}")
            yield kind, obj
