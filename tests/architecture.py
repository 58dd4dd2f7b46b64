"""The project's source read as data, for the architecture rules in ``tests/test_architecture.py``:
which module imports which (every import statement, also those inside functions, each with its
file and line), the import circles, private names imported across module lines, and the sizes of
files and functions.

Run as a script (``python -m tests.architecture``) it prints what the tree breaks today in the
form of the allow-lists of ``tests/architecture_known.py``, so a list can be rewritten from the
tree after a change that shrinks it."""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parents[1]
# The project's own packages: the import graph is theirs.
PACKAGES = ("portal", "placement", "sites", "sandbox")
# Where the size rules hold: the packages and the tests (benchmarks and scripts included).
SIZED = (*PACKAGES, "tests")
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 60

# The worker's controller: the workqueue, reconcile and the Celery tasks that drive them.
CONTROLLER = ("portal.execution", "portal.controller", "portal.tasks")
# The admission webhook's decision and the recording of its decisions.
ADMISSION = ("portal.admission.decide", "portal.admission.queue", "portal.admission.budget")
# What answers a browser or an API client.
FACES = (
    "portal.views",
    "portal.auth_views",
    "portal.faces",
    "portal.api",
    "portal.templatetags",
    "portal.ogcapi",
    "portal.stac",
    "portal.argoserver",
    "portal.quotas.api",
    "sites.api",
    "placement.api",
)
# The libraries that take plain data and return plain data.
PURE = (
    "placement.parser",
    "placement.planner",
    "placement.manifests",
    "placement.expression",
    "placement.codec",
    "placement.context",
)
# What a pure library must not load: the frameworks and the project's Django apps.
NOT_PURE = ("django", "rest_framework", "celery", "kubernetes", "portal", "sites")

Key = TypeVar("Key")


@dataclass(frozen=True)
class Import:
    """One imported name: ``importer`` (a module) loads ``target`` at ``path:line``; ``name`` is
    what a ``from`` import takes from ``module`` (None for a plain ``import``)."""

    importer: str
    target: str
    module: str
    name: str | None
    path: str
    line: int

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def module_name(path: str) -> str:
    """``portal/views/__init__.py`` -> ``portal.views``, ``portal/tasks.py`` -> ``portal.tasks``."""
    return path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")


class Tree:
    """Source files by their path relative to the project root (posix separators)."""

    def __init__(self, files: Mapping[str, str]) -> None:
        self.files = dict(files)
        self.paths = {module_name(p): p for p in self.files}
        self._imports: dict[str, list[Import]] = {}
        self._parsed: dict[str, ast.Module] = {}

    @classmethod
    def on_disk(cls, roots: Iterable[str] = SIZED, root: Path = ROOT) -> Tree:
        files = {}
        for top in roots:
            for path in sorted((root / top).rglob("*.py")):
                relative = path.relative_to(root)
                if "migrations" not in relative.parts:
                    files[relative.as_posix()] = path.read_text()
        return cls(files)

    def parsed(self, path: str) -> ast.Module:
        if path not in self._parsed:
            self._parsed[path] = ast.parse(self.files[path], filename=path)
        return self._parsed[path]

    def is_package(self, module: str) -> bool:
        return self.paths.get(module, "").endswith("__init__.py")

    def _base(self, importer: str, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        package = importer if self.is_package(importer) else importer.rpartition(".")[0]
        parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
        return f"{parent}.{node.module}" if node.module else parent

    def _module_of(self, dotted: str) -> str:
        """The longest prefix of ``dotted`` that is a module of the tree (``dotted`` itself when
        none is: an outside library)."""
        parts = dotted.split(".")
        for end in range(len(parts), 0, -1):
            if ".".join(parts[:end]) in self.paths:
                return ".".join(parts[:end])
        return dotted

    def imports(self, module: str) -> list[Import]:
        """Every import in ``module``'s file; ``from pkg import name`` targets ``pkg.name`` when
        that is a module, else ``pkg`` (whose ``__init__`` the import runs)."""
        if module in self._imports:
            return self._imports[module]
        path = self.paths[module]
        found = []
        for node in statements(self.parsed(path)):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = self._module_of(alias.name)
                    found.append(Import(module, target, alias.name, None, path, node.lineno))
            elif isinstance(node, ast.ImportFrom):
                base = self._base(module, node)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    target = sub if sub in self.paths else self._module_of(base)
                    found.append(Import(module, target, base, alias.name, path, node.lineno))
        found.sort(key=lambda i: i.line)
        self._imports[module] = found
        return found

    def modules(self, prefixes: Iterable[str] | None = None) -> list[str]:
        """The tree's modules under ``prefixes`` (all of them for None)."""
        return sorted(m for m in self.paths if prefixes is None or in_any(m, prefixes))


def statements(node: ast.AST) -> Iterator[ast.stmt]:
    """Every statement under ``node``, nested blocks included (expressions are not entered: no
    import or ``def`` hides in one)."""
    for field in ("body", "orelse", "finalbody", "handlers", "cases"):
        for child in getattr(node, field, ()):
            if isinstance(child, ast.stmt):
                yield child
            yield from statements(child)


def definitions(node: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]:
    """The functions and classes defined in ``node``'s own scope (inside its ``if``, ``try``,
    ``with`` and loops, not inside the definitions themselves)."""
    for field in ("body", "orelse", "finalbody", "handlers", "cases"):
        for child in getattr(node, field, ()):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                yield child
            else:
                yield from definitions(child)


def in_any(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == p or module.startswith(f"{p}.") for p in prefixes)


# -- import circles --------------------------------------------------------------------------


def graph(tree: Tree, prefixes: Iterable[str] = PACKAGES) -> dict[str, dict[str, Import]]:
    """Module -> module it imports -> the first import statement that does it (project only)."""
    edges: dict[str, dict[str, Import]] = {}
    for module in tree.modules(prefixes):
        out = edges.setdefault(module, {})
        for imp in tree.imports(module):
            if imp.target in tree.paths and imp.target != module:
                out.setdefault(imp.target, imp)
    return edges


def cycles(edges: Mapping[str, Mapping[str, Import]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges.get(start, {}))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges.get(child, {})))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(found, key=sorted)


def cycle_path(edges: Mapping[str, Mapping[str, Import]], members: frozenset[str]) -> list[Import]:
    """One closed path of imports inside ``members``, starting at its first module."""
    start = min(members)
    came: dict[str, Import] = {}
    todo = deque([start])
    while todo:
        node = todo.popleft()
        for target, imp in sorted(edges.get(node, {}).items()):
            if target not in members or target in came:
                continue
            came[target] = imp
            if target == start:
                path = [imp]
                while path[0].importer != start:
                    path.insert(0, came[path[0].importer])
                return path
            todo.append(target)
    return []


def describe_path(path: list[Import]) -> str:
    return " -> ".join(f"{i.importer} ({i.where})" for i in path) + f" -> {path[-1].target}"


# -- private names ---------------------------------------------------------------------------


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(tree: Tree) -> list[Import]:
    """``from module import _name`` where ``module`` is another module of the project."""
    found = []
    for module in tree.modules():
        for imp in tree.imports(module):
            if imp.name is None:
                private = any(is_private(part) for part in imp.module.split("."))
            else:
                private = is_private(imp.name)
            own = in_any(imp.module, SIZED) or imp.module in tree.paths
            if private and own and imp.module != module:
                found.append(imp)
    return found


# -- sizes -----------------------------------------------------------------------------------


def file_sizes(tree: Tree) -> dict[str, int]:
    return {path: len(text.splitlines()) for path, text in tree.files.items()}


def function_sizes(tree: Tree) -> dict[tuple[str, str], tuple[int, int]]:
    """(path, qualified name) -> (lines from ``def`` to the last line, line of the ``def``)."""
    sizes: dict[tuple[str, str], tuple[int, int]] = {}

    def visit(node: ast.AST, path: str, prefix: str) -> None:
        for child in definitions(node):
            name = f"{prefix}{child.name}"
            if not isinstance(child, ast.ClassDef):
                lines = (child.end_lineno or child.lineno) - child.lineno + 1
                sizes[(path, name)] = max(sizes.get((path, name), (0, 0)), (lines, child.lineno))
            visit(child, path, f"{name}.")

    for path in tree.files:
        visit(tree.parsed(path), path, "")
    return sizes


# -- what a module loads ---------------------------------------------------------------------


def loaded_by(
    tree: Tree, module: str, through: Callable[[str], bool] = lambda name: True
) -> dict[str, list[Import]]:
    """Every module importing ``module`` loads (its packages, what it imports, the packages
    whose ``__init__`` each import runs, and so on through the project's modules for which
    ``through`` holds), each with the chain of imports that loads it."""
    parents = module.split(".")[:-1]
    chains = {".".join(parents[:end]): list[Import]() for end in range(1, len(parents) + 1)}
    todo = deque([(name, list[Import]()) for name in [module, *chains]])
    while todo:
        current, chain = todo.popleft()
        if current not in tree.paths or (current != module and not through(current)):
            continue
        for imp in tree.imports(current):
            parts = imp.target.split(".")
            for end in range(1, len(parts) + 1):
                name = ".".join(parts[:end])
                if name in chains or name == module:
                    continue
                chains[name] = [*chain, imp]
                todo.append((name, chains[name]))
    return chains


def outside_the_controller(module: str) -> bool:
    return not in_any(module, CONTROLLER)


def describe_chain(chain: list[Import]) -> str:
    return " -> ".join(f"{i.importer} ({i.where}: {i.target})" for i in chain)


# -- the rules, each against its allow-list of what breaks it today ----------------------------
# An allow-list only shrinks: an entry that no longer breaks its rule is a problem too, so the
# list is always what the tree breaks and nothing more.


def stale(known: Iterable[object], found: Iterable[object], listed_in: str) -> list[str]:
    seen = set(found)
    return [
        f"{entry!r} no longer breaks the rule: remove it from {listed_in}"
        for entry in known
        if entry not in seen
    ]


def circle_problems(
    tree: Tree, known: Iterable[frozenset[str]], prefixes: Iterable[str] = PACKAGES
) -> list[str]:
    edges = graph(tree, prefixes)
    found = cycles(edges)
    problems = []
    for members in found:
        if members in known:
            continue
        wider = [k for k in known if members < k]
        hint = " (a listed circle shrank to this one: list it instead)" if wider else ""
        problems.append(f"import circle{hint}: {describe_path(cycle_path(edges, members))}")
    return problems + stale(known, found, "KNOWN_CYCLES")


def private_import_problems(tree: Tree, known: Iterable[tuple[str, str, str]]) -> list[str]:
    found = {(i.importer, i.module, i.name or ""): i for i in private_imports(tree)}
    problems = [
        f"{i.where}: {i.importer} imports the private name {i.name} of {i.module}"
        for key, i in sorted(found.items())
        if key not in known
    ]
    return problems + stale(known, found, "KNOWN_PRIVATE_IMPORTS")


def _size_problems(
    found: Mapping[Key, tuple[int, str]], known: Mapping[Key, int], limit: int, listed_in: str
) -> list[str]:
    problems = []
    for key, (size, where) in sorted(found.items()):
        if size <= limit:
            continue
        if key not in known:
            problems.append(f"{where}: {key} is {size} lines (at most {limit})")
        elif size > known[key]:
            problems.append(f"{where}: {key} grew to {size} lines (listed at {known[key]})")
    over = [key for key, (size, _) in found.items() if size > limit]
    return problems + stale(known, over, listed_in)


def file_size_problems(tree: Tree, known: Mapping[str, int]) -> list[str]:
    found = {path: (lines, f"{path}:1") for path, lines in file_sizes(tree).items()}
    return _size_problems(found, known, MAX_FILE_LINES, "KNOWN_LONG_FILES")


def function_size_problems(tree: Tree, known: Mapping[tuple[str, str], int]) -> list[str]:
    found = {key: (n, f"{key[0]}:{line}") for key, (n, line) in function_sizes(tree).items()}
    return _size_problems(found, known, MAX_FUNCTION_LINES, "KNOWN_LONG_FUNCTIONS")


def load_problems(
    tree: Tree,
    modules: Iterable[str],
    forbidden: Iterable[str],
    known: Iterable[tuple[str, str]] = (),
    *,
    through: Callable[[str], bool] = lambda name: True,
    listed_in: str = "",
) -> list[str]:
    """Each module of ``modules`` (and under them) that loads a module of ``forbidden``, with
    the chain of imports that loads it; (module, forbidden module) pairs in ``known`` pass."""
    problems, found = [], []
    for module in tree.modules(modules):
        loaded = loaded_by(tree, module, through)
        for name, chain in sorted(loaded.items()):
            parent = name.rpartition(".")[0]
            if not in_any(name, forbidden) or (parent in loaded and in_any(parent, forbidden)):
                continue
            found.append((module, name))
            if (module, name) not in known:
                where = chain[0].where if chain else f"{tree.paths[module]}:1"
                problems.append(f"{where}: {module} loads {name}: {describe_chain(chain)}")
    return problems + stale(known, found, listed_in)


def direct_import_problems(
    tree: Tree,
    modules: Iterable[str],
    forbidden: Iterable[str],
    known: Iterable[tuple[str, str]],
    listed_in: str,
) -> list[str]:
    """Each import statement in ``modules`` (and under them) that names a ``forbidden`` one."""
    problems, found = [], []
    for module in tree.modules(modules):
        for imp in tree.imports(module):
            if in_any(imp.target, forbidden):
                found.append((module, imp.target))
                if (module, imp.target) not in known:
                    problems.append(f"{imp.where}: {module} imports {imp.target}")
    return problems + stale(known, found, listed_in)


@cache
def project() -> Tree:
    return Tree.on_disk()


def _print_known(tree: Tree) -> None:
    edges = graph(tree)
    print("KNOWN_CYCLES: list[frozenset[str]] = [")
    for members in cycles(edges):
        print(f"    frozenset({sorted(members)!r}),")
    print("]\nKNOWN_PRIVATE_IMPORTS: set[tuple[str, str, str]] = set([")
    for imp in sorted({(i.importer, i.module, i.name) for i in private_imports(tree)}):
        print(f"    {imp!r},")
    print("])\nKNOWN_LONG_FILES: dict[str, int] = {")
    for path, lines in sorted(file_sizes(tree).items()):
        if lines > MAX_FILE_LINES:
            print(f"    {path!r}: {lines},")
    print("}\nKNOWN_LONG_FUNCTIONS: dict[tuple[str, str], int] = {")
    for key, (lines, _) in sorted(function_sizes(tree).items()):
        if lines > MAX_FUNCTION_LINES:
            print(f"    {key!r}: {lines},")
    print("}\nKNOWN_FACE_IMPORTS: set[tuple[str, str]] = set([")
    for module in tree.modules(FACES):
        for target in sorted(
            {i.target for i in tree.imports(module) if in_any(i.target, CONTROLLER)}
        ):
            print(f"    {(module, target)!r},")
    print("])\nKNOWN_CONTROLLER_LOADS: set[tuple[str, str]] = set([")
    for module in tree.modules(CONTROLLER):
        for name in sorted(loaded_by(tree, module, outside_the_controller)):
            if in_any(name, ADMISSION):
                print(f"    {(module, name)!r},")
    print("])")


if __name__ == "__main__":
    _print_known(project())
