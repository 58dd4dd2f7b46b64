"""What a call to karmada-apiserver can fail with, and how an answer becomes one of these.

Two families: ``TransientError`` (the API was unreachable, slow, overloaded or answered
5xx/429: try again later; Celery tasks ``autoretry_for`` it) or ``PermanentError`` (the API
refused the request: the unit fails with the API's message). ``NotFound``, ``AlreadyExists`` and
``Conflict`` are permanent errors that callers handle to stay idempotent.

The mapping reads the API's answer (its HTTP status, reason phrase and ``Status`` body), not the
client's exception class, so that only ``portal.karmada.client`` imports ``kubernetes``.
"""

from __future__ import annotations

import json
import re


class KarmadaError(Exception):
    def __init__(self, message: str, status: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason


class TransientError(KarmadaError):
    """Unreachable, timed out, 5xx or 429: the same call may succeed later."""


class PermanentError(KarmadaError):
    """The API refused the request; repeating it will not help."""


class NotFound(PermanentError):
    pass


class AlreadyExists(PermanentError):
    pass


class Conflict(PermanentError):
    pass


class Expired(PermanentError):
    """A watch's resourceVersion is too old (410): list again."""


class Forbidden(PermanentError):
    """RBAC refused the call (403): the portal's identity lacks a grant, on karmada-apiserver
    or, through the cluster proxy, at the site. The message names the verb and resource."""


class LogsUnavailable(PermanentError):
    """Karmada's cluster proxy refused the read for good: the pod is gone, or the member
    refused. (No path to the site at all is a 500 from Karmada: see ``portal.karmada.logs``.)"""


# kube-apiserver's forbidden message (apiserver responsewriters/errors.go, forbiddenMessage).
FORBIDDEN_MESSAGE = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>\S+) (?:resource "(?P<resource>[^"]*)" in API '
    r'group "(?P<group>[^"]*)"(?: in the namespace "(?P<ns>[^"]*)")?|path "(?P<path>[^"]*)")'
)


def forbidden_text(message: str, name: str = "") -> str:
    """A 403's message as the portal says it: who may not do what, where, then Karmada's own
    words. Through the cluster proxy a site may also refuse to let Karmada act as the portal
    (``impersonate``): that is said so."""
    found = FORBIDDEN_MESSAGE.search(message)
    if found is None:
        return f"the portal's identity may not do this: {message}"
    if found["path"] is not None:
        what = f"path {found['path']}"
    else:
        what = found["resource"] + (f' "{name}"' if name else "")
        if found["group"]:
            what += f" (API group {found['group']})"
        what += f" in namespace {found['ns']}" if found["ns"] else " at the cluster scope"
    if found["verb"] == "impersonate":
        return (
            "the site does not let Karmada's cluster proxy act as the portal's identity: "
            f"{found['user']} may not impersonate {what} (Karmada said: {message})"
        )
    return (
        f"the portal's identity ({found['user']}) may not {found['verb']} {what}"
        f" (Karmada said: {message})"
    )


def from_answer(status: int | None, phrase: str | None, body: str | bytes | None) -> KarmadaError:
    """The error an API answer means: its HTTP ``status``, reason ``phrase`` and ``body`` (a
    ``kind: Status`` object when the API server wrote it), as an ``ApiException`` carries them."""
    status = status or 0
    reason, message, name = "", phrase or "", ""
    try:
        found = json.loads(body or "{}")
        reason = found.get("reason", "") or ""
        message = found.get("message", "") or message
        name = str((found.get("details") or {}).get("name") or "")
    except (ValueError, TypeError, AttributeError):
        pass
    text = f"{status} {reason or phrase}: {message}".strip()
    if status == 403:
        return Forbidden(forbidden_text(message, name), status, reason)
    if status == 404:
        return NotFound(text, status, reason)
    if status == 409 and reason == "AlreadyExists":
        return AlreadyExists(text, status, reason)
    if status == 409:
        return Conflict(text, status, reason)
    if status == 410:
        return Expired(text, status, reason)
    if status == 429 or status >= 500 or status == 0:
        return TransientError(text, status, reason)
    return PermanentError(text, status, reason)


def unreachable(exc: BaseException) -> TransientError:
    """No answer at all: the connection failed, dropped or timed out."""
    return TransientError(f"Karmada unreachable: {exc.__class__.__name__}: {exc}")
