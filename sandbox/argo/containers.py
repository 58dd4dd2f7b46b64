"""A template's containers, and the pod that cannot start yet (what the kubelet reports)."""

from __future__ import annotations

from typing import Any


class NotRunnable(Exception):
    """The pod cannot start; it stays Pending with this message (as the kubelet reports)."""


def containers_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    if isinstance(body.get("container"), dict):
        return [body["container"]]
    if isinstance(body.get("script"), dict):
        return [body["script"]]
    if isinstance(body.get("containerSet"), dict):
        return [c for c in body["containerSet"].get("containers") or [] if isinstance(c, dict)]
    return []
