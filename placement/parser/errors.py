"""What intake refuses and how it says so: field errors, the refusal, and the limits."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FieldError:
    """One problem with the submitted document; ``path`` is empty for the document itself."""

    path: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


class WorkflowInvalid(Exception):
    """The document was refused; ``errors`` lists every problem found (never empty)."""

    def __init__(self, errors: Sequence[FieldError]) -> None:
        self.errors: list[FieldError] = list(errors) or [FieldError("", "invalid document")]
        super().__init__(
            "; ".join(f"{e.path or '<document>'}: {e.message}" for e in self.errors[:5])
        )

    def as_dicts(self) -> list[dict[str, str]]:
        return [e.as_dict() for e in self.errors]


@dataclass(frozen=True)
class Limits:
    """Bounds on what intake accepts. Defaults suit the REST API; tests shrink them."""

    max_body_bytes: int = 1024 * 1024
    max_units: int = 5000
    # Unit-to-unit dependencies after expansion (and task-to-task ones in every DAG): what
    # checking, ordering, planning and drawing a run cost grows with them, not with the units.
    max_dependency_edges: int = 20_000
    # Pods one unit's step workflow may create: its site's Argo expands whatever is nested in
    # it (``pods``), so this is the portal's only bound on that work.
    max_pods_per_unit: int = 5000
    # A loop nested in a unit whose size only the run will tell counts as this many items: one
    # such loop fits with room for the unit's other steps, a loop of such loops does not.
    unknown_loop_items: int = 1000
    # Alias *uses* are cheap for PyYAML (it shares the node), but every consumer that walks the
    # result pays for the expansion: bound both the number of aliases and the expanded size.
    max_yaml_aliases: int = 1000
    max_expanded_nodes: int = 500_000
    max_depth: int = 64
    max_errors: int = 200


DEFAULT_LIMITS = Limits()


# Field paths as the API reports them: ``spec.templates[2].dag.tasks[0].dependencies``.


def json_path(parts: Iterable[Any]) -> str:
    out = ""
    for part in parts:
        out = f"{out}[{part}]" if isinstance(part, int) else join_path(out, str(part))
    return out


def join_path(path: str, key: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_$-]+", key):
        return f"{path}[{json.dumps(key)}]"
    return f"{path}.{key}" if path else key


def type_name(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return type(value).__name__
