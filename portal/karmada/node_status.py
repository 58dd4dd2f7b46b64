"""A member Workflow's node map as Argo stores it (``status.nodes``, or compressed), read by
the controller, the log reader and resume alike: it imports nothing of the portal."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Mapping
from typing import Any


class NodeStatusUnreadable(ValueError):
    """The member's Workflow status has no node status the portal can read."""


def nodes_of(status: Mapping[str, Any]) -> dict[str, Any]:
    """A Workflow status's nodes: ``status.nodes``, else ``status.compressedNodes`` (Argo
    compresses large node maps: base64 of gzipped JSON, ``util/file`` CompressEncodeString).
    Raises ``NodeStatusUnreadable`` when the member offloaded them to its own database
    (``offloadNodeStatusVersion``): no one outside that site can read them."""
    nodes = status.get("nodes")
    if isinstance(nodes, dict) and nodes:
        return nodes
    compressed = status.get("compressedNodes")
    if isinstance(compressed, str) and compressed:
        try:
            decoded = json.loads(gzip.decompress(base64.b64decode(compressed)))
        except (ValueError, OSError, EOFError) as exc:
            raise NodeStatusUnreadable(f"compressedNodes cannot be decoded: {exc}") from exc
        if not isinstance(decoded, dict):
            raise NodeStatusUnreadable("compressedNodes is not a map of nodes")
        return decoded
    version = status.get("offloadNodeStatusVersion")
    if version:
        raise NodeStatusUnreadable(
            f"node status offloaded to the member's database (offloadNodeStatusVersion {version})"
        )
    return {}
