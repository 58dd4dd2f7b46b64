"""A step's log over REST: which attempt and lines are asked for, and the answer (one pod's
log read whole, or every pod's in turn as a stream, following the last while the step runs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.http import HttpResponse, HttpResponseBase, StreamingHttpResponse
from rest_framework.response import Response

from placement.parser import FieldError
from portal import log_follows
from portal.api.errors import errors_response
from portal.karmada import logs
from portal.models import UnitRun
from portal.selectors import Attempt, unit_detail


@dataclass(frozen=True)
class LogWanted:
    """Which log of an attempt, read how: its site, the container, the last ``tail`` lines,
    and whether to follow it while the step runs."""

    site: str
    container: str
    tail: int | None
    follow: bool

    def chunks(self, pod: str, kept: int | None, follow: bool) -> Any:
        return logs.log_chunks(
            self.site, pod, container=self.container, tail=self.tail, follow=follow, kept=kept
        )


def log_request(u: UnitRun, params: Any) -> tuple[Attempt, int | None] | Response:
    """The attempt whose log is asked for and the lines wanted (``tail``), or the 400 that
    names what is wrong."""
    errors = []
    numbers: dict[str, int | None] = {}
    for key in ("attempt", "tail"):
        raw = params.get(key)
        try:
            numbers[key] = int(raw) if raw else None
        except ValueError:
            errors.append(FieldError(key, "must be a whole number"))
            continue
        value = numbers[key]
        if value is not None and value < (1 if key == "attempt" else 0):
            errors.append(FieldError(key, "must be positive"))
    attempts = {a.number: a for a in unit_detail(u)["attempts"]}
    number = numbers.get("attempt") or u.attempt
    if not errors and number not in attempts:
        errors.append(FieldError("attempt", f"the unit has attempts 1 to {u.attempt}"))
    if errors:
        return errors_response([e.as_dict() for e in errors])
    return attempts[number], numbers["tail"]


def log_answer(
    u: UnitRun, attempt: int, pod: str | None, wanted: LogWanted, release: Any
) -> HttpResponseBase:
    """The log of the attempt's pods (``pod`` alone when given): one pod's read whole, or a
    stream of each in turn, headed by its name (raises ``LogsNotAvailable`` before any of it
    is sent)."""
    pods = logs.attempt_pods(u, attempt, wanted.site)
    shown = [p for p in pods.pods if not pod or p.pod == pod]
    if not shown:
        raise logs.LogsNotAvailable("No pod has run for this attempt yet.")
    if len(shown) == 1 and not wanted.follow:
        text = logs.log_text(
            wanted.site, shown[0].pod, container=wanted.container, tail=wanted.tail, kept=pods.kept
        )
        return HttpResponse(text, content_type="text/plain; charset=utf-8")
    first = wanted.chunks(shown[0].pod, pods.kept, wanted.follow)
    return StreamingHttpResponse(
        log_follows.HeldStream(_log_stream(shown, first, wanted, pods.kept), release),
        content_type="text/plain; charset=utf-8",
    )


def _log_stream(shown: list[Any], first: Any, wanted: LogWanted, kept: int | None) -> Any:
    if wanted.follow:
        # Nothing yet, but the status line and headers go out now: a follower knows at once
        # that it holds a slot, even while the step is silent.
        yield b""
    # Several pods: each in turn, headed by its name; following reads the last one.
    for i, pod in enumerate(shown):
        if len(shown) > 1:
            yield f"==> {pod.pod} ({pod.node}) <==\n".encode()
        try:
            last = i == len(shown) - 1
            yield from first if i == 0 else wanted.chunks(pod.pod, kept, wanted.follow and last)
        except logs.LogsNotAvailable as exc:
            yield f"[{exc}]\n".encode()
