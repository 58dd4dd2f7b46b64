"""The parser package as a whole: it stands without Django, and its one reader of ``depends``
gives the task names in the order they appear."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from placement import parser

ROOT = Path(__file__).resolve().parents[2]


def test_it_imports_no_django() -> None:
    code = (
        "import sys; import placement.parser; "
        "found = sorted(m for m in sys.modules if m == 'django' or m.startswith('django.')); "
        "print(found); sys.exit(1 if found else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG"}},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_depends_tasks_names_each_task_once_in_order() -> None:
    assert parser.depends_tasks("b && (a.Succeeded || !c.Failed) && b.Skipped") == ("b", "a", "c")
    assert parser.depends_tasks("x") == ("x",)


def test_depends_tasks_agrees_with_the_tree() -> None:
    for expr in ("A && (B.Succeeded || !C.Failed)", "a||b", "!(x && y.AnySucceeded) || z"):
        assert set(parser.depends_tasks(expr)) == parser.parse_depends(expr).tasks()


@pytest.mark.parametrize("bad", ["", "a &&", "a.Unknown", "(a", "a b", "a $ b"])
def test_depends_tasks_refuses_what_the_grammar_refuses(bad: str) -> None:
    with pytest.raises(parser.DependsSyntaxError):
        parser.depends_tasks(bad)
