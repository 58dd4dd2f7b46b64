"""Lists in chunks: ``limit`` and ``continue``, as kube-apiserver (and so karmada-apiserver)
serves them from etcd.

What is copied (``k8s.io/apiserver/pkg/storage/continue.go`` and the ``ListMeta`` field docs in
``k8s.io/apimachinery/pkg/apis/meta/v1/types.go``):

* items come in key order (etcd keys: ``<namespace>/<name>``, or ``<name>`` cluster-wide);
* a chunk that is not the last carries ``metadata.continue``: base64url (unpadded) JSON
  ``{"v": "meta.k8s.io/v1", "rv": <list resourceVersion>, "start": <next key>}``, the next
  key being the last item's key followed by a NUL byte;
* ``remainingItemCount`` is set on a chunk that is not the last, and only without label or
  field selectors (the server cannot count what a selector would keep);
* every chunk answers the first chunk's ``resourceVersion``;
* ``continue`` with ``resourceVersion`` is a 400; a token that does not decode is a 400;
* a token from before etcd's last compaction is a 410 Expired. kube-apiserver's compactor
  (``--etcd-compaction-interval``, 5 minutes) compacts, at each tick, to the revision it noted
  at the tick before, so a token lives between 5 and 10 minutes (wall time, at any time
  scale); ``POST /_sandbox/compact`` compacts at once.

One difference, noted in the sandbox README: etcd serves later chunks from the snapshot at
the token's revision; the sandbox serves them from the current objects (after the token's
key). Each object present throughout is listed exactly once either way; an object created or
deleted between chunks may be missed or seen, where etcd would show the state at the first
chunk. A client that starts a watch from the list's resourceVersion sees those changes as
events in both cases.
"""

from __future__ import annotations

import base64
import binascii
import json
import posixpath
from typing import Any

from sandbox.errors import ApiError

# k8s.io/apiserver/pkg/storage/etcd3/store.go: the message of the 410 for an expired token.
EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted "
    "between the time the first chunk was returned and now may show up in the list."
)
COMPACTION_INTERVAL_S = 300.0


def key_of(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    ns = meta.get("namespace") or ""
    return f"{ns}/{meta['name']}" if ns else str(meta["name"])


def encode(rv: int, start: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode(token: str) -> tuple[int, str]:
    """(resourceVersion, start key) of a continue token, or the 400 ``DecodeContinue``'s
    errors give (``invalid continue token: continue key is not valid...``)."""

    def bad(why: str) -> ApiError:
        return ApiError.bad_request(f"invalid continue token: continue key is not valid{why}")

    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (ValueError, binascii.Error) as exc:
        raise bad(f": {exc}") from exc
    if not isinstance(data, dict) or data.get("v") != "meta.k8s.io/v1":
        version = data.get("v") if isinstance(data, dict) else None
        raise bad(f": server does not recognize this encoded version {version}")
    rv, start = data.get("rv"), data.get("start")
    if not isinstance(rv, int) or rv == 0:
        raise bad(": incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
    if not isinstance(start, str) or not start:
        raise bad(": encoded start key empty (version meta.k8s.io/v1)")
    # Path traversal: the key, cleaned as a path, must be itself (``path.Clean``).
    key = start if start.startswith("/") else "/" + start
    if posixpath.normpath(key) != key or key.startswith("//"):
        raise bad(f": invalid start key: {start}")
    return rv, key[1:]


def parse_limit(raw: str | None) -> int:
    if not raw:
        return 0
    try:
        return max(0, int(raw))
    except ValueError as exc:
        raise ApiError.bad_request(f"limit: invalid value {raw!r}: must be an integer") from exc


class Compactor:
    """etcd compaction as kube-apiserver drives it: every ``interval`` seconds, compact to the
    revision noted at the previous tick. Ticks are taken lazily, before each write (so the
    revision noted is the one current at the tick) and when a token is checked."""

    def __init__(self, interval: float, now: float, rv: int) -> None:
        self.interval = interval
        self.compacted_rv = rv
        self._noted_rv = rv
        self._tick = now

    def advance(self, now: float, rv: int) -> None:
        while now - self._tick >= self.interval:
            self._tick += self.interval
            self.compacted_rv = max(self.compacted_rv, self._noted_rv)
            self._noted_rv = rv

    def compact_now(self, rv: int) -> None:
        self.compacted_rv = self._noted_rv = rv


def continue_point(
    token: str, *, resource_version: str, current_rv: int, compactor: Compactor, now: float
) -> tuple[int, str]:
    """The list's resourceVersion and the key its chunk starts at ("" for the first chunk)."""
    if not token:
        return current_rv, ""
    if resource_version:
        raise ApiError.bad_request("specifying resource version is not allowed when using continue")
    rv, start = decode(token)
    compactor.advance(now, current_rv)
    if rv < compactor.compacted_rv:
        raise ApiError.expired(EXPIRED)
    return rv, start


def page_meta(
    rv: int, page: list[dict[str, Any]], *, remaining: int, selected: bool
) -> dict[str, Any]:
    """A chunk's list metadata; ``remaining``: how many items follow it (0: the last chunk)."""
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if remaining and page:
        meta["continue"] = encode(rv, key_of(page[-1]) + "\x00")
        if not selected:
            meta["remainingItemCount"] = remaining
    return meta
