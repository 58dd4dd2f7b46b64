"""Watch (`k8s.io/apiserver/pkg/endpoints/handlers/watch.go` and the watch cache's
`cacheWatcher`): the events since a resourceVersion, then each change as it comes, bookmarks
when asked for, a 410 Status for a resourceVersion too old."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from aiohttp import web

from sandbox.apiserver.crud import table, wants_table
from sandbox.apiserver.responses import dumps, truthy
from sandbox.errors import ApiError
from sandbox.resources import ResourceType
from sandbox.selectors import parse_field_selector, parse_label_selector
from sandbox.store import Event, Obj, Store, Watcher

DEFAULT_WATCH_TIMEOUT = 1800.0


def watch_start(
    store: Store, rtype: ResourceType, ns: str | None, watcher: Watcher, rv: str
) -> tuple[list[tuple[str, Obj]], ApiError | None]:
    """What a new watch sends first: synthetic ADDED for every object without a
    resourceVersion, else the logged events since it, or the 410 to send when too old."""
    if rv in ("", "0"):
        objs = store.list_objects(rtype, ns, watcher.label_match, watcher.field_match)
        return [("ADDED", o) for o in objs], None
    try:
        start = int(rv)
    except ValueError as exc:
        raise ApiError.bad_request(f"invalid resourceVersion {rv!r}") from exc
    initial: list[tuple[str, Obj]] = []
    try:
        for ev in store.events_since(rtype, start):
            kind = watcher.wants(ev)
            if kind:
                initial.append((kind, ev.obj))
    except ApiError as err:
        return [], err
    return initial, None


@dataclass
class WatchStream:
    """One watch's answer: its events written as JSON lines, as Table rows when asked."""

    store: Store
    rtype: ResourceType
    resp: web.StreamResponse
    table: bool
    first_table: bool = True

    async def send(self, kind: str, obj: Obj) -> None:
        if self.table and kind in ("ADDED", "MODIFIED", "DELETED"):
            obj = table(self.store, self.rtype, [obj], with_columns=self.first_table)
            self.first_table = False
        await self.resp.write((dumps({"type": kind, "object": obj}) + "\n").encode())

    async def bookmark(self) -> None:
        await self.send(
            "BOOKMARK",
            {
                "kind": self.rtype.kind,
                "apiVersion": self.rtype.api_version,
                "metadata": {"resourceVersion": str(self.store.rv)},
            },
        )


async def watch(
    store: Store,
    bookmark_interval: float,
    request: web.Request,
    rtype: ResourceType,
    ns: str | None,
) -> web.StreamResponse:
    q = request.query
    watcher = Watcher(
        rtype,
        ns,
        parse_label_selector(q.get("labelSelector")),
        parse_field_selector(q.get("fieldSelector")),
    )
    try:
        timeout = float(q.get("timeoutSeconds") or DEFAULT_WATCH_TIMEOUT)
    except ValueError as exc:
        raise ApiError.bad_request("timeoutSeconds must be a number") from exc
    bookmarks = truthy(q.get("allowWatchBookmarks"))
    initial, expired = watch_start(store, rtype, ns, watcher, q.get("resourceVersion", ""))
    if expired is None:
        store.watchers.add(watcher)
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    stream = WatchStream(store, rtype, resp, wants_table(request))
    try:
        if expired is not None:
            await stream.send("ERROR", expired.status())
            return resp
        for kind, obj in initial:
            await stream.send(kind, obj)
        interval = bookmark_interval if bookmarks else None
        await _follow(request, watcher, stream, time.monotonic() + timeout, interval)
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        store.watchers.discard(watcher)
    with contextlib.suppress(ConnectionResetError, RuntimeError):
        await resp.write_eof()
    return resp


async def _follow(
    request: web.Request,
    watcher: Watcher,
    stream: WatchStream,
    deadline: float,
    bookmark_interval: float | None,
) -> None:
    """Each change the watcher is sent, until the deadline, the client leaving, the
    watcher's overflow or the store's end; a bookmark after each quiet interval."""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        transport = request.transport
        if transport is None or transport.is_closing():
            break
        wait = min(remaining, bookmark_interval if bookmark_interval is not None else 5.0)
        try:
            got: Event | None = await asyncio.wait_for(watcher.queue.get(), wait)
        except TimeoutError:
            # A bookmark says "every event up to here was sent": never while events
            # wait in the queue (they came in while the wait was cancelled), nor
            # once the watcher overflowed (its later events were dropped, and the
            # client resumes from the bookmark), as kube-apiserver's cacheWatcher
            # sends one only in order with the events.
            if watcher.overflowed:
                break
            if (
                bookmark_interval is not None
                and time.monotonic() < deadline
                and watcher.queue.empty()
            ):
                await stream.bookmark()
            continue
        if got is None:
            break
        etype = watcher.wants(got)
        if etype:
            await stream.send(etype, got.obj)
