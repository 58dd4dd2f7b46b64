"""The architecture rules, checked from the source (``tests/architecture.py`` reads it with
``ast``, every import statement, also those inside functions):

* no import circle among the project's modules;
* no private name (``_x``) imported across a module line;
* no file over 500 lines, no function over 60 (tests, benchmarks and scripts included);
* the pure libraries load no Django, not even through another module of the project;
* the faces (views, APIs, template tags) import no module of the controller, and the controller
  loads no module of the webhook's decision.

What breaks a rule today is listed in ``tests/architecture_known.py``; a new breach fails, and so
does a listed one that is mended, until its entry is removed. Each failure names the file and line.
The second half of this module checks the checker on small made-up trees, so that no rule can
pass because its checker sees nothing."""

from __future__ import annotations

import pytest

from tests import architecture_known as known
from tests.architecture import (
    ADMISSION,
    CONTROLLER,
    FACES,
    MAX_FILE_LINES,
    MAX_FUNCTION_LINES,
    NOT_PURE,
    PURE,
    Tree,
    circle_problems,
    direct_import_problems,
    file_size_problems,
    function_size_problems,
    load_problems,
    outside_the_controller,
    private_import_problems,
    project,
)


def _report(problems: list[str]) -> None:
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def test_no_module_imports_itself_in_a_circle():
    _report(circle_problems(project(), known.KNOWN_CYCLES))


def test_no_private_name_is_imported_across_a_module_line():
    _report(private_import_problems(project(), known.KNOWN_PRIVATE_IMPORTS))


def test_no_file_is_over_500_lines():
    _report(file_size_problems(project(), known.KNOWN_LONG_FILES))


def test_no_function_is_over_60_lines():
    _report(function_size_problems(project(), known.KNOWN_LONG_FUNCTIONS))


def test_every_rule_names_modules_that_exist():
    """A rule over modules that moved away would pass on nothing."""
    tree = project()
    for name, modules in (("PURE", PURE), ("FACES", FACES), ("ADMISSION", ADMISSION)):
        missing = [m for m in modules if m not in tree.paths]
        assert not missing, f"{missing} moved: name where they live now in {name}"
    assert any(m in tree.paths for m in CONTROLLER), f"none of {CONTROLLER} exists"


def test_the_pure_libraries_load_no_django():
    _report(load_problems(project(), PURE, NOT_PURE))


def test_the_faces_import_no_module_of_the_controller():
    """Direct imports only: a face calls a service, and a service may enqueue a task."""
    problems = direct_import_problems(
        project(), FACES, CONTROLLER, known.KNOWN_FACE_IMPORTS, "KNOWN_FACE_IMPORTS"
    )
    _report(problems)


def test_the_controller_loads_no_module_of_the_webhooks_decision():
    """Followed through every module outside the controller (each controller module answers
    for its own imports)."""
    problems = load_problems(
        project(),
        CONTROLLER,
        ADMISSION,
        known.KNOWN_CONTROLLER_LOADS,
        through=outside_the_controller,
        listed_in="KNOWN_CONTROLLER_LOADS",
    )
    _report(problems)


# -- the checker, on made-up trees -----------------------------------------------------------

PKG = ("pkg",)


def _tree(**files: str) -> Tree:
    """A tree from ``pkg__a="..."`` keywords (``__`` for ``/``, ``pkg__init`` for a package's
    ``__init__``), each package with an ``__init__``."""
    sources = {}
    for name, text in files.items():
        path = name.replace("__", "/")
        path = (
            f"{path.removesuffix('/init')}/__init__.py" if path.endswith("/init") else f"{path}.py"
        )
        sources[path] = text
    for path in list(sources):
        parts = path.split("/")[:-1]
        for end in range(1, len(parts) + 1):
            sources.setdefault("/".join(parts[:end]) + "/__init__.py", "")
    return Tree(sources)


def test_a_circle_is_found_through_an_import_inside_a_function():
    tree = _tree(pkg__a="from pkg import b\n", pkg__b="def f():\n    from pkg.a import g\n")
    [problem] = circle_problems(tree, [], PKG)
    assert problem == "import circle: pkg.a (pkg/a.py:1) -> pkg.b (pkg/b.py:2) -> pkg.a"
    assert circle_problems(tree, [frozenset({"pkg.a", "pkg.b"})], PKG) == []


def test_a_circle_through_a_packages_init_is_found():
    tree = _tree(pkg__init="from pkg.a import x\n", pkg__a="import pkg\n")
    assert len(circle_problems(tree, [], PKG)) == 1


def test_relative_imports_are_followed():
    tree = _tree(pkg__a="from . import b\n", pkg__b="from .a import x\n")
    assert "pkg/b.py:1" in circle_problems(tree, [], PKG)[0]


def test_a_listed_circle_that_is_gone_or_shrank_fails():
    tree = _tree(pkg__a="from pkg import b\n", pkg__b="import pkg.a\n", pkg__c="")
    listed = frozenset({"pkg.a", "pkg.b", "pkg.c"})
    shrank, gone = circle_problems(tree, [listed], PKG)
    assert shrank.startswith("import circle (a listed circle shrank")
    assert "remove it from KNOWN_CYCLES" in gone


def test_a_private_name_imported_from_another_module_is_found():
    tree = _tree(
        pkg__a="from pkg.b import _helper, public\n",
        pkg__b="_helper = public = 1\n",
        pkg__c="from pkg.c import _own\nfrom os import _exit\nfrom pkg.b import __doc__\n",
    )
    assert private_import_problems(tree, []) == [
        "pkg/a.py:1: pkg.a imports the private name _helper of pkg.b"
    ]
    assert private_import_problems(tree, {("pkg.a", "pkg.b", "_helper")}) == []
    [problem] = private_import_problems(tree, {("pkg.a", "pkg.b", "_helper"), ("x", "y", "_z")})
    assert "('x', 'y', '_z') no longer breaks the rule" in problem


def test_long_files_and_functions_are_found_and_may_only_shrink():
    source = "class C:\n    def long(self):\n" + "        pass\n" * MAX_FUNCTION_LINES
    source += "\n" * (MAX_FILE_LINES + 1 - source.count("\n"))
    tree = _tree(pkg__a=source)
    assert file_size_problems(tree, {}) == [
        f"pkg/a.py:1: pkg/a.py is {MAX_FILE_LINES + 1} lines (at most 500)"
    ]
    [function] = function_size_problems(tree, {})
    assert function == "pkg/a.py:2: ('pkg/a.py', 'C.long') is 61 lines (at most 60)"
    assert function_size_problems(tree, {("pkg/a.py", "C.long"): 70}) == []
    [grew] = function_size_problems(tree, {("pkg/a.py", "C.long"): 61 - 1})
    assert "grew to 61 lines (listed at 60)" in grew
    [passes] = file_size_problems(_tree(pkg__a="x = 1\n"), {"pkg/a.py": 600})
    assert passes == "'pkg/a.py' no longer breaks the rule: remove it from KNOWN_LONG_FILES"


def test_a_pure_module_loading_django_two_imports_away_is_found():
    tree = _tree(
        lib__pure="from lib import helper\n",
        lib__helper="def f():\n    from django.db import models\n",
        lib__other="import django\n",
    )
    [problem] = load_problems(tree, ["lib.pure"], ["django"])
    assert problem.startswith("lib/pure.py:1: lib.pure loads django: ")
    assert "lib.helper (lib/helper.py:2: django.db)" in problem


def test_a_pure_module_loads_its_packages_init():
    tree = _tree(lib__init="import django\n", lib__pure="")
    assert load_problems(tree, ["lib.pure"], ["django"])


def test_a_face_importing_the_controller_is_found():
    tree = _tree(
        portal__views__runs="from portal.execution.sync import policy_errors\n",
        portal__execution__sync="policy_errors = 1\n",
        portal__services="from portal import tasks\n",
        portal__tasks="",
    )
    problems = direct_import_problems(tree, FACES, CONTROLLER, set(), "KNOWN_FACE_IMPORTS")
    assert problems == ["portal/views/runs.py:1: portal.views.runs imports portal.execution.sync"]


def test_the_controller_loading_the_webhooks_decision_through_a_helper_is_found():
    tree = _tree(
        portal__controller__reconcile="from portal import planning\n",
        portal__planning="from portal.admission.queue import drain\n",
        portal__admission__queue="drain = 1\n",
        portal__tasks="from portal.controller import reconcile\n",
    )
    problems = load_problems(tree, CONTROLLER, ADMISSION, through=outside_the_controller)
    assert problems == [
        "portal/controller/reconcile.py:1: portal.controller.reconcile loads "
        "portal.admission.queue: portal.controller.reconcile (portal/controller/reconcile.py:1: "
        "portal.planning) -> portal.planning (portal/planning.py:1: portal.admission.queue)"
    ]
