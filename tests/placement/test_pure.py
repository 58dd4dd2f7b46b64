"""The pure core imports no Django (DESIGN section 2): it is tested and benchmarked alone.
Its modules import one another one way (no circle, not even through a package's
``__init__``) and share only public names."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PURE = [
    "placement.parser",
    "placement.planner",
    "placement.manifests",
    "placement.expression",
    "placement.codec",
    "placement.context",
    "placement.labels",
    "placement.units",
    "placement.gcpause",
    "placement.phase",
]
# What the pure core must never load: Django, the apps built on it, placement's own Django app.
FORBIDDEN = (
    "django",
    "rest_framework",
    "portal",
    "sites",
    "placement.admin",
    "placement.api",
    "placement.apps",
    "placement.choices",
    "placement.filtersets",
    "placement.management",
    "placement.models",
    "placement.revisions",
    "placement.selectors",
)


@pytest.mark.parametrize("module", PURE)
def test_it_imports_without_django(module: str) -> None:
    # A fresh interpreter: this test process has imported Django already.
    code = (
        "import importlib, pkgutil, sys\n"
        f"m = importlib.import_module({module!r})\n"
        "for info in pkgutil.walk_packages(getattr(m, '__path__', []), m.__name__ + '.'):\n"
        "    importlib.import_module(info.name)\n"
        f"bad = {FORBIDDEN!r}\n"
        "below = tuple(b + '.' for b in bad)\n"
        "print(sorted(n for n in sys.modules if n in bad or n.startswith(below)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout


def _pure_files() -> dict[str, Path]:
    """Module name → file, for every module of the pure core."""
    found: dict[str, Path] = {}
    for name in PURE:
        base = ROOT.joinpath(*name.split("."))
        paths = sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]
        for path in paths:
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[module.removesuffix(".__init__")] = path
    return found


def _imports(module: str, path: Path) -> Iterator[tuple[str, list[str]]]:
    """(imported module, names taken from it) for every import in the file, also those
    inside functions and under ``TYPE_CHECKING``; relative imports resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0]
                base = f"{parent}.{base}" if base else parent
            yield base, [alias.name for alias in node.names]


def _graph() -> dict[str, set[str]]:
    files = _pure_files()
    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        for base, names in _imports(module, path):
            targets = [f"{base}.{n}" for n in names if f"{base}.{n}" in files]
            if base in files and (len(targets) < len(names) or not names):
                targets.append(base)  # names taken from the module (or package) itself
            graph[module].update(t for t in targets if t != module)
    return graph


def test_its_modules_import_one_another_one_way() -> None:
    graph = _graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[module] = 2
        path.pop()
        return None

    for module in sorted(graph):
        if module not in state:
            cycle = visit(module)
            assert cycle is None, " -> ".join(cycle)


def test_no_private_name_crosses_a_module_line() -> None:
    files = _pure_files()
    crossing = [
        f"{module} imports {name} from {base}"
        for module, path in files.items()
        for base, names in _imports(module, path)
        if base.startswith("placement")
        for name in names
        if name.startswith("_") and not name.startswith("__")
    ]
    assert crossing == []


def test_the_checks_see_a_circle_through_a_package() -> None:
    """The cycle check would pass vacuously if it missed imports of a package's names."""
    graph = _graph()
    assert "placement.planner.inputs" in graph["placement.planner"]
    assert "placement.parser" in graph["placement.planner.planning"]
