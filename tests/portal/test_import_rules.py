"""Which way imports run between the worker, the webhook and Karmada, checked from the source
(``ast``, every import statement, also those inside functions), followed through the project's
own modules: a rule broken two imports away is broken all the same."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("portal", "placement", "sites", "sandbox")

# The controller: everything that runs a run.
CONTROLLER = ("portal.controller",)
# The worker side: the Celery tasks and the watcher, which feed the controller.
WORKER = ("portal.tasks", "portal.karmada.watcher", *CONTROLLER)
# The webhook's decision and the recording of its decisions.
WEBHOOK = ("portal.admission.decide", "portal.admission.queue", "portal.admission.budget")
PURE = (
    "placement.parser",
    "placement.planner",
    "placement.manifests",
    "placement.expression",
    "placement.context",
    "placement.codec",
)


def _path(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _modules_under(name: str) -> list[str]:
    path = _path(name)
    assert path is not None, name
    if path.name != "__init__.py":
        return [name]
    return [
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in sorted(path.parent.rglob("*.py"))
    ]


def _imports_in(source: str, package: str) -> set[str]:
    """The modules a source text names in its imports (``package``: where it lives, for
    relative imports); a ``from package import name`` also names ``package.name`` when that
    is a module of the project."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            found.add(base)
            for alias in node.names:
                if _path(f"{base}.{alias.name}") is not None:
                    found.add(f"{base}.{alias.name}")
    return found


@cache
def _imports(module: str) -> frozenset[str]:
    path = _path(module)
    if path is None:
        return frozenset()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    return frozenset(_imports_in(path.read_text(), package))


@cache
def _reachable(module: str) -> frozenset[str]:
    """The modules importing ``module`` loads: what it imports, their packages, and so on."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        current = todo.pop()
        for name in _imports(current):
            parts = name.split(".")
            for i in range(1, len(parts) + 1):
                prefix = ".".join(parts[:i])
                if prefix in seen:
                    continue
                seen.add(prefix)
                if parts[0] in PACKAGES and _path(prefix) is not None:
                    todo.append(prefix)
    return frozenset(seen)


def _offending(modules: tuple[str, ...], forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    bad = {}
    for root in modules:
        for module in _modules_under(root):
            reached = _reachable(module)
            hits = sorted(
                n for n in reached if any(n == f or n.startswith(f"{f}.") for f in forbidden)
            )
            if hits:
                bad[module] = hits
    return bad


def test_the_worker_side_never_loads_the_webhooks_decision():
    assert _offending(WORKER, ("portal.admission.decide",)) == {}


def test_the_controller_never_loads_the_webhooks_modules():
    """The webhook's decision, its queue and its budget are the webhook's; the controller
    reads queued decisions only through the writer the process names for it."""
    assert _offending(CONTROLLER, WEBHOOK) == {}


def test_the_controller_never_loads_the_celery_tasks():
    """The tasks call the controller; the controller queues them by name."""
    assert _offending(CONTROLLER, ("portal.tasks",)) == {}


def test_the_webhooks_decision_and_recorder_never_load_the_karmada_boundary():
    assert _offending(WEBHOOK, ("portal.karmada", "kubernetes")) == {}


def test_only_the_karmada_client_imports_kubernetes():
    """One module owns the Kubernetes client: every other one reaches Karmada through it."""
    importers = sorted(
        module
        for package in PACKAGES
        for module in _modules_under(package)
        if any(n == "kubernetes" or n.startswith("kubernetes.") for n in _imports(module))
    )
    assert importers == ["portal.karmada.client"]


def test_the_boundarys_plain_modules_load_neither_django_nor_the_portal():
    """What a failure means, the kinds and a member's node map are plain data (held to
    ``mypy --strict``): they load nothing of Django, ``kubernetes`` or the project."""
    plain = ("portal.karmada.errors", "portal.karmada.resources", "portal.karmada.node_status")
    assert _offending(plain, ("django", "portal", "kubernetes", "sites", "placement")) == {}


def test_the_pure_libraries_are_pure():
    forbidden = ("django", "portal", "sites", "rest_framework", "placement.models")
    assert _offending(PURE, forbidden) == {}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from portal.karmada import client", "portal.karmada.client"),
        ("from portal.admission import decide", "portal.admission.decide"),
        ("import portal.admission.decide", "portal.admission.decide"),
        ("def f():\n    from .admission import queue", "portal.admission.queue"),
        ("from .karmada import client", "portal.karmada.client"),
    ],
)
def test_the_checker_sees_each_form_of_import(source, expected):
    """The rules above would pass vacuously if the checker missed a form of import."""
    assert expected in _imports_in(source, "portal")


def test_the_sandbox_imports_nothing_of_the_project_but_the_expression_library():
    """The sandbox plays Karmada and Argo, so it must not share the portal's logic (it would
    agree with the portal's mistakes). Argo's expression language is not portal logic: it is a
    library both sides use, as Argo's controller uses expr-lang."""
    allowed = ("placement", "placement.expression")
    forbidden = ("portal", "placement", "sites")
    bad = {
        module: [n for n in hits if n not in allowed and not n.startswith("placement.expression.")]
        for module, hits in _offending(("sandbox",), forbidden).items()
    }
    assert {m: hits for m, hits in bad.items() if hits} == {}


def test_the_expression_library_needs_nothing_else_of_the_project():
    forbidden = ("portal", "sites", "django", "placement.parser", "placement.manifests")
    assert _offending(("placement.expression",), forbidden) == {}
