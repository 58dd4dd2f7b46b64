"""Registry mirrors: rewrite every container image of a Workflow to pull from a site's mirror
(Karmada's imageOverrider cannot find images inside a Workflow's templates)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

_IMAGE_FIELDS = ("container", "script")


def _with_registry(image: str, mirror: str) -> str:
    """``ghcr.io/eo/ingest:1`` → ``<mirror>/eo/ingest:1``;
    ``busybox`` → ``<mirror>/library/busybox`` (Docker Hub's implicit namespace)."""
    first, sep, rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        path = rest
    else:
        path = image if sep else f"library/{image}"
    return f"{mirror.rstrip('/')}/{path}"


def image_paths(workflow: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(JSON pointer, image) of every container image in a Workflow's templates."""
    out: list[tuple[str, str]] = []
    for i, t in enumerate(workflow.get("spec", {}).get("templates") or []):
        for fld in _IMAGE_FIELDS:
            c = t.get(fld)
            if isinstance(c, Mapping) and isinstance(c.get("image"), str):
                out.append((f"/spec/templates/{i}/{fld}/image", c["image"]))
        cs = t.get("containerSet")
        if isinstance(cs, Mapping):
            for j, c in enumerate(cs.get("containers") or []):
                if isinstance(c, Mapping) and isinstance(c.get("image"), str):
                    out.append(
                        (f"/spec/templates/{i}/containerSet/containers/{j}/image", c["image"])
                    )
        for key in ("initContainers", "sidecars"):
            for j, c in enumerate(t.get(key) or []):
                if isinstance(c, Mapping) and isinstance(c.get("image"), str):
                    out.append((f"/spec/templates/{i}/{key}/{j}/image", c["image"]))
    return out


def image_mirror_patch(workflow: Mapping[str, Any], mirror: str) -> list[dict[str, Any]]:
    """JSONPatch operations (for the webhook) that move every image to a registry mirror."""
    return [
        {"op": "replace", "path": path, "value": _with_registry(image, mirror)}
        for path, image in image_paths(workflow)
    ]


def mirror_images(workflow: Mapping[str, Any], mirror: str) -> dict[str, Any]:
    """A copy of ``workflow`` with every image pulled from ``mirror``."""
    out = copy.deepcopy(dict(workflow))
    for op in image_mirror_patch(out, mirror):
        parts = op["path"].strip("/").split("/")
        node: Any = out
        for p in parts[:-1]:
            node = node[int(p)] if isinstance(node, list) else node[p]
        node[parts[-1]] = op["value"]
    return out
