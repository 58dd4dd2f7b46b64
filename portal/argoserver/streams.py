"""Argo Server's streams: grpc-gateway writes each message as ``{"result": <message>}``, one
JSON object per line; a client that asks for ``Accept: text/event-stream`` (the argo CLI)
gets each as a server-sent event, ``data: {"result": ...}`` and a blank line
(pkg/apiclient/http1/server-sent-events-client.go reads them so).

Neither stream holds a web worker for long: a watch ends after ``PORTAL_ARGO_WATCH_SECONDS``
or once the workflow it names has finished (the argo CLI watches again on end of stream), a
followed log after ``PORTAL_LOG_FOLLOW_SECONDS`` (``portal.karmada.logs``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from django.conf import settings
from django.http import HttpRequest, StreamingHttpResponse

from portal.argoserver.workflows import node_id
from portal.choices import UnitPhase
from portal.karmada import logs
from portal.models import UnitRun


def wants_events(request: HttpRequest | Any) -> bool:
    return "text/event-stream" in request.META.get("HTTP_ACCEPT", "")


def framed(messages: Iterable[dict[str, Any]], events: bool) -> Iterator[bytes]:
    for message in messages:
        body = json.dumps({"result": message}, separators=(",", ":"))
        yield (f"data: {body}\n\n" if events else f"{body}\n").encode()


def stream_response(
    request: HttpRequest | Any, messages: Iterable[dict[str, Any]]
) -> StreamingHttpResponse:
    events = wants_events(request)
    response = StreamingHttpResponse(
        framed(messages, events),
        content_type="text/event-stream" if events else "application/json",
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # a proxy must pass each event on at once
    return response


def _lines(chunks: Iterable[bytes]) -> Iterator[str]:
    rest = b""
    for chunk in chunks:
        rest += chunk
        *whole, rest = rest.split(b"\n")
        for line in whole:
            yield line.decode("utf-8", errors="replace")
    if rest:
        yield rest.decode("utf-8", errors="replace")


def log_entries(
    workflow: str,
    units: Iterable[UnitRun],
    *,
    pod_name: str = "",
    container: str = "main",
    tail: int | None = None,
    follow: bool = False,
    grep: str = "",
) -> Iterator[dict[str, Any]]:
    """Argo's ``LogEntry`` messages, one per line, for every pod of each unit's current attempt
    (``pod_name``: one pod, by its name at the site or by its node's id here). A unit whose
    log cannot be read gives none, as Argo skips a pod whose log is gone."""
    for unit in units:
        if not unit.workflow_name or not unit.site:
            continue
        try:
            attempt = logs.attempt_pods(unit, unit.attempt, unit.site)
        except logs.LogsNotAvailable:
            continue
        pods = attempt.pods
        unit_ids = {node_id(workflow, f"{workflow}.{unit.name}"), unit.name}
        for pod in pods:
            if pod_name and pod_name != pod.pod and pod_name not in unit_ids:
                continue
            running = unit.phase in (UnitPhase.PENDING, UnitPhase.RUNNING)
            try:
                chunks = logs.log_chunks(
                    unit.site,
                    pod.pod,
                    container=container,
                    tail=tail,
                    follow=follow and running,
                    kept=attempt.kept,
                )
                for line in _lines(chunks):
                    if grep and grep not in line:
                        continue
                    yield {"content": line, "podName": pod.pod}
            except logs.LogsNotAvailable:
                continue


def watch_events(
    fetch: Callable[[dict[str, str]], tuple[dict[str, dict[str, Any]], set[str]]],
    *,
    named: bool,
    seconds: float | None = None,
) -> Iterator[dict[str, Any]]:
    """``WorkflowWatchEvent`` messages: ADDED for each workflow first, MODIFIED when its
    resourceVersion changes, DELETED when it is gone. ``fetch(seen)`` answers the workflows
    changed since the versions in ``seen`` and the names of all that still exist."""
    budget = float(settings.PORTAL_ARGO_WATCH_SECONDS if seconds is None else seconds)
    deadline = time.monotonic() + budget
    seen: dict[str, str] = {}
    last: dict[str, dict[str, Any]] = {}
    while True:
        changed, present = fetch(seen)
        for name, workflow in changed.items():
            kind = "MODIFIED" if name in seen else "ADDED"
            seen[name] = workflow["metadata"]["resourceVersion"]
            last[name] = workflow
            yield {"type": kind, "object": workflow}
        for name in set(seen) - present:
            del seen[name]
            yield {"type": "DELETED", "object": last.pop(name)}
        finished = [w for w in last.values() if w.get("status", {}).get("finishedAt")]
        if named and last and len(finished) == len(last):
            return
        if time.monotonic() >= deadline:
            return
        time.sleep(float(settings.PORTAL_ARGO_WATCH_POLL_SECONDS))
