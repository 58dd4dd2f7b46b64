"""The pure core imports no Django (DESIGN section 2): it is tested and benchmarked alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PURE = [
    "placement.planner",
    "placement.manifests",
    "placement.codec",
    "placement.labels",
    "placement.units",
    "placement.expression",
    "placement.phase",
]


@pytest.mark.parametrize("module", PURE)
def test_it_imports_without_django(module: str) -> None:
    # A fresh interpreter: this test process has imported Django already.
    code = (
        "import importlib, pkgutil, sys\n"
        f"m = importlib.import_module({module!r})\n"
        "for info in pkgutil.walk_packages(getattr(m, '__path__', []), m.__name__ + '.'):\n"
        "    importlib.import_module(info.name)\n"
        "print(sorted(n for n in sys.modules if n == 'django' or n.startswith('django.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout
