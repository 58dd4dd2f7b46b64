"""The faces (pages, REST API, the OGC and Argo faces, template tags, drawings, selectors,
health) read what the worker recorded through selectors; none of them imports a module of the
worker's controller."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FACES = (
    "portal/views",
    "portal/api",
    "portal/templatetags",
    "portal/drawing",
    "portal/selectors",
    "portal/health.py",
    "portal/live.py",
    "portal/ogcapi",
    "portal/argoserver",
)
# The worker side: its Celery tasks, the watcher and the controller package.
CONTROLLER = ("portal.tasks", "portal.karmada.watcher", "portal.execution", "portal.controller")


def _sources() -> list[Path]:
    out: list[Path] = []
    for face in FACES:
        path = ROOT / face
        out += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return out


def _named(node: ast.stmt) -> list[str]:
    """The modules an import statement names (``from portal import tasks`` names
    ``portal.tasks``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        return [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return []


def _is_controller(module: str) -> bool:
    return any(module == c or module.startswith(f"{c}.") for c in CONTROLLER)


def test_no_face_imports_a_controller_module():
    offending = {
        f"{path.relative_to(ROOT)}:{node.lineno}": module
        for path in _sources()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.stmt)
        for module in _named(node)
        if _is_controller(module)
    }
    assert offending == {}


def test_the_checker_knows_the_controller_and_the_faces():
    assert any((ROOT / c.replace(".", "/")).exists() for c in CONTROLLER[2:])
    assert all((ROOT / face).exists() for face in FACES)
    assert _is_controller("portal.execution.sync")
    assert not _is_controller("portal.executions")
    assert _named(ast.parse("from portal import tasks").body[0]) == ["portal", "portal.tasks"]
