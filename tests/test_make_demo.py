"""`make demo PORT=8001` serves the demo on that port (the Makefile passes it to run_demo)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("args", "port"), [([], "8000"), (["PORT=8001"], "8001")])
def test_make_demo_passes_the_port_to_run_demo(args: list[str], port: str) -> None:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    recipe = subprocess.run(
        ["make", "-n", "demo", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    run_demo = [line for line in recipe.splitlines() if "run_demo" in line]
    assert run_demo and run_demo[-1].endswith(f"run_demo --port {port}"), recipe
