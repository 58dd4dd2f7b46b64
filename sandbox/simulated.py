"""What a step whose image the executing sandbox cannot run ends as.

A simulated step never turns a Workflow Argo would fail into a success without saying so: its
outcome comes from the fleet file's `execution.simulated` list (image patterns, `succeed`,
`fail` or `refuse`), and an image no pattern names is refused when the step fetches a URL
(it needs the network, which the sandbox does not give) and assumed to succeed otherwise. The
node's message always says that it was simulated and how it was decided.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from sandbox import executor

OUTCOMES = ("succeed", "fail", "refuse")
# A URL in the command, args or script source: the step fetches something from the network.
URL = re.compile(r"\b(?:https?|ftp|git|s3|gs)://|\bgit@[\w.-]+:", re.IGNORECASE)


def fetches_url(container: dict[str, Any]) -> bool:
    words = [*(container.get("command") or []), *(container.get("args") or [])]
    words.append(container.get("source") or "")
    return any(URL.search(str(w)) for w in words)


def outcome(
    containers: list[dict[str, Any]], rules: list[dict[str, str]] | None
) -> tuple[str, str]:
    """`(phase, message)` of a simulated step made of `containers` (the ones that are not
    executable here)."""
    for c in containers:
        image = str(c.get("image") or "")
        name = executor.image_name(image)
        for rule in rules or []:
            if fnmatch.fnmatchcase(name, rule["match"]) and rule["outcome"] in OUTCOMES:
                return _phase(rule["outcome"], image, f"the fleet's rule {rule['match']!r}")
        if fetches_url(c):
            return _phase("refuse", image, "its command fetches a URL (no network here)")
    image = str((containers[0] if containers else {}).get("image") or "")
    return _phase("succeed", image, "assumed to succeed")


def _phase(kind: str, image: str, why: str) -> tuple[str, str]:
    if kind == "fail":
        return "Failed", f"simulated: image {image} not executable here, failed by {why}"
    if kind == "refuse":
        return "Error", f"simulated: image {image} not executable here, refused: {why}"
    if why == "assumed to succeed":
        return "Succeeded", f"simulated: image {image} not executable here, assumed to succeed"
    return "Succeeded", f"simulated: image {image} not executable here, succeeded by {why}"
